"""A one-file Django project serving the pid server at ``/mcp`` beside a page at ``/``.

Importing it configures Django for this process (if nothing else has), with the CSRF
middleware on so that the MCP view has to be exempt from it. ``application`` is the project
as Django's own WSGI application; ``mount(view)`` routes ``/mcp`` to a view (each test
mounts a fresh ``server.django_view()`` and closes it).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False, SECRET_KEY="only for the tests of this project",
        ALLOWED_HOSTS=["127.0.0.1", "localhost"], ROOT_URLCONF=__name__, INSTALLED_APPS=[],
        MIDDLEWARE=["django.middleware.common.CommonMiddleware",
                    "django.middleware.csrf.CsrfViewMiddleware"])

import django
from django.core.wsgi import get_wsgi_application
from django.http import HttpResponse
from django.urls import clear_url_caches, path

django.setup()


def home(request: Any) -> HttpResponse:
    return HttpResponse("the site's home page")


urlpatterns = [path("", home)]
application = get_wsgi_application()


def mount(view: Any) -> None:
    """Route ``/mcp`` to ``view`` from now on."""
    urlpatterns[:] = [path("mcp", view), path("", home)]
    clear_url_caches()
