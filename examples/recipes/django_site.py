"""A one-file Django project whose view calls MCP tools through one Manager per process.

The Manager is made on the first request a process serves, and forgotten in a forked child
(``os.register_at_fork``), so the same code is right under ``manage.py runserver``, under
gunicorn with or without ``--preload``, and under uWSGI. In a real project the module-level
part goes in a module of its own (``myproject/mcp.py``) and the view in ``views.py``.

Run it with ``python django_site.py runserver 127.0.0.1:8000`` or
``gunicorn -w 2 -k gthread django_site:application``.
"""

from __future__ import annotations

import os
import sys
import threading

from django.conf import settings

settings.configure(
    DEBUG=False, SECRET_KEY="a real secret in a real project", ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["127.0.0.1", "localhost"], INSTALLED_APPS=[], DATABASES={})

import django  # noqa: E402  (settings first)
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import HttpRequest, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

import mcpsync  # noqa: E402

CONFIGS = [mcpsync.ServerConfig(id="demo", command=sys.executable, args=("-m", "mcpsync.demo"))]

_lock = threading.Lock()
_manager: mcpsync.Manager | None = None


def get_manager() -> mcpsync.Manager:
    """This process's Manager, started on first use by whichever request thread comes first."""
    global _manager
    with _lock:
        if _manager is None:
            manager = mcpsync.Manager(configs=CONFIGS)
            failed = {sid: err for sid, err in manager.start_all().items() if err is not None}
            if failed:
                manager.close()
                raise RuntimeError(f"MCP servers did not start: {failed}")
            _manager = manager   # closed at interpreter exit
        return _manager


def _forget_after_fork() -> None:
    """In a forked child, the parent's Manager (and the state of its lock) are not ours."""
    global _manager, _lock
    _manager, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def add(request: HttpRequest) -> JsonResponse:
    a, b = float(request.GET.get("a", 0)), float(request.GET.get("b", 0))
    try:
        result = get_manager().call_tool("demo", "add", {"a": a, "b": b})
    except mcpsync.MCPError as exc:   # a server that died, a timeout, a refused call
        return JsonResponse({"error": type(exc).__name__, "message": str(exc)}, status=502)
    return JsonResponse({"sum": (result.structured or {})["sum"], "pid": os.getpid()})


urlpatterns = [path("add", add)]
django.setup()
application = get_wsgi_application()

if __name__ == "__main__":
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
