"""The equality a dataclass would generate, written once for the classes that opt out, and the
default that stands for a field's factory in the constructors written out in its place.

A dataclass generates and compiles ``__eq__`` every time its class is made, at every import,
cached bytecode or not; the client import's public dataclasses (``mcpsync.types``,
``mcpsync.jsonrpc.Message``, ``mcpsync.config.ServerConfig``,
``mcpsync.client.ClientOptions``) are made with ``eq=False`` and an ``__eq__`` that calls
the comparison made here, once per class, from the names of the
fields the generated one compared. It compares as the generated one of the running Python
does: up to 3.12 the two tuples of field values (so a field holding the very same object,
a NaN for instance, counts as equal), from 3.13 the same instance at once and then field by
field with ``==``, returning the first false result (a NaN field makes two instances
unequal).

The slotted dataclasses of the client import (``TextContent``, ``Tool``, ``CallToolResult``,
``ServerInfo``, ``jsonrpc.Message``) are made with ``init=False`` and an ``__init__`` written
out, for the same reason: the generated one is compiled at every import. A field with a
``default_factory`` takes :data:`FACTORY` as its default there, as the generated method takes
a marker of the ``dataclasses`` module: the factory's value is made only when the argument is
left out, so each instance gets a fresh one and a value passed (``None`` too) is stored as
given. Its repr is the generated one's, ``<factory>``, so ``inspect.signature`` shows the
same defaults.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from operator import attrgetter
from typing import Any

__all__ = ["FACTORY", "fields_eq"]


class _Factory:
    """The type of :data:`FACTORY`: a marker no caller has (a plain ``None`` default would
    turn a ``None`` passed on purpose into the factory's value)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


#: The default of a field made by its factory, in a written ``__init__``. Typed ``Any`` so
#: that it stands as the default of a parameter of any type.
FACTORY: Any = _Factory()


def fields_eq(names: list[str]) -> Callable[[Any, object], bool]:
    """The generated ``__eq__``'s comparison of the fields ``names`` (at least two)."""
    values = attrgetter(*names)
    if sys.version_info >= (3, 13):
        def __eq__(self: Any, other: object) -> bool:
            if self is other:
                return True
            if other.__class__ is self.__class__:
                result: bool = True
                for mine, theirs in zip(values(self), values(other), strict=True):
                    result = mine == theirs
                    if not result:
                        return result
                return result
            return NotImplemented
    else:
        def __eq__(self: Any, other: object) -> bool:
            if other.__class__ is self.__class__:
                same: bool = values(self) == values(other)
                return same
            return NotImplemented
    return __eq__
