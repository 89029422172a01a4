"""typing.get_type_hints resolves every public annotation, in a fresh interpreter.

The client import leaves many modules for later, and an annotation naming a class imported
only under TYPE_CHECKING cannot be evaluated: get_type_hints() and
inspect.signature(eval_str=True) would raise NameError, breaking the tools that call them
(pydantic, typer, dependency injectors, documentation generators). Such annotations reach
the class through an attribute that loads it when read (``mcpsync.Resource``,
``mcpsync.transport.memory.MemoryTransport``). The walk runs in a new interpreter because
in this one other tests have already loaded what a fresh import defers.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.layout.test_public_api import PUBLIC

# Annotations that never resolved at runtime (they name a class imported only for the type
# checker in code outside the client import): the walk supplies these names itself, so the
# rest of each signature is still checked. Shrink this, never grow it.
KNOWN_UNRESOLVED: dict[str, dict[str, str]] = {
    "mcpsync.gateway._gateway.Gateway.wsgi_app": {"HttpFront": "mcpsync.gateway._front"},
    "mcpsync.gateway.wsgi": {"HttpFront": "mcpsync.gateway._front"},
    "mcpsync.server._server.Server.django_view": {"DjangoView": "mcpsync.server.http._django"},
    "mcpsync.client._connect.connect": {
        "Unpack": "typing" if sys.version_info >= (3, 11) else "typing_extensions"},
}


WALK = r"""
import importlib, inspect, sys, typing

public, known = eval(sys.argv[1]), eval(sys.argv[2])
failures, checked, seen = [], 0, set()


def members(qual, obj):
    if inspect.isclass(obj):
        yield qual, obj
        for klass in obj.__mro__:
            if not klass.__module__.startswith("mcpsync"):
                continue
            for key, value in vars(klass).items():
                if key.startswith("_") and key != "__init__":
                    continue
                if isinstance(value, property):
                    for fn in (value.fget, value.fset):
                        if fn is not None:
                            yield f"{qual}.{key}", fn
                elif isinstance(value, (classmethod, staticmethod)):
                    yield f"{qual}.{key}", value.__func__
                elif inspect.isfunction(value):
                    yield f"{qual}.{key}", value
    elif inspect.isfunction(obj):
        yield qual, obj


for module_name, names in sorted(public.items()):
    if not module_name.startswith("mcpsync"):
        continue
    module = importlib.import_module(module_name)
    for name in names:
        for qual, obj in members(f"{module_name}.{name}", getattr(module, name)):
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            where = f"{obj.__module__}.{obj.__qualname__}"
            localns = {key: getattr(importlib.import_module(mod), key)
                       for key, mod in known.get(where, {}).items()}
            checked += 1
            try:
                typing.get_type_hints(obj, localns=localns or None)
                if not inspect.isclass(obj):
                    inspect.signature(obj, eval_str=True, locals=localns or None)
            except Exception as exc:
                failures.append(f"{qual}: {type(exc).__name__}: {exc}")
print(checked)
print("\n".join(failures))
"""


def test_every_public_annotation_resolves_in_a_fresh_interpreter() -> None:
    done = subprocess.run([sys.executable, "-c", WALK, repr(PUBLIC), repr(KNOWN_UNRESOLVED)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    checked, *failures = done.stdout.strip().split("\n")
    assert int(checked) > 300
    assert not [f for f in failures if f], "\n".join(failures)


# Public annotations that name a lazily loaded type through an attribute that loads it
# (``mcpsync.types.Content``, ``mcpsync.Resource``): each is checked in an interpreter that
# imported only its module, so nothing else has loaded the type first. The walk above cannot
# tell: importing ``mcpsync`` and reading its names loads them all before it looks.
THROUGH_A_LAZY_NAME = (
    ("mcpsync.types", "CallToolResult"),
    ("mcpsync.types", "CallToolResult.__init__"),
    ("mcpsync.types", "content_block_from_dict"),
    ("mcpsync.client", "Client.list_resources"),
    ("mcpsync.client", "Client.list_resource_templates"),
    ("mcpsync.client", "Client.list_prompts"),
    ("mcpsync.client", "Client.read_resource"),
    ("mcpsync.client", "Client.get_prompt"),
    ("mcpsync.client", "Client.complete"),
)

ALONE = r"""
import importlib, inspect, sys, typing

module_name, path = sys.argv[1], sys.argv[2]
obj = importlib.import_module(module_name)
assert "mcpsync._types_more" not in sys.modules, "loaded before the check"
for part in path.split("."):
    obj = getattr(obj, part)
typing.get_type_hints(obj)
if not inspect.isclass(obj):
    inspect.signature(obj, eval_str=True)
print("ok")
"""


@pytest.mark.parametrize(("module_name", "path"), THROUGH_A_LAZY_NAME)
def test_annotations_through_a_lazy_name_resolve_with_only_their_module_loaded(
        module_name: str, path: str) -> None:
    done = subprocess.run([sys.executable, "-c", ALONE, module_name, path],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() == "ok", done.stderr
