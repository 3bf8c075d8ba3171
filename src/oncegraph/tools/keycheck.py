"""Does a ``write`` tool hand its idempotency key to the recipient? Checked at compile.

A ``write`` tool whose outcome is unknown after a crash is called again with the SAME
idempotency key (``current_effect().idempotency_key``). That is only safe if the
recipient gets the key and deduplicates on it: a bare function that never passes it
makes the second call look new to the recipient (a refund made twice, silently).

So :func:`check_tools` (called by ``compile``) looks at each ``write`` tool's code: the
names its function uses (its own code, the functions nested in it, and one level of the
functions of its own module that it calls) must include ``current_effect`` (or an alias
of it) or ``idempotency_key``. A tool that does not is an :class:`UnkeyedToolWarning`
naming the fixes, or, with ``compile(strict=True)``, a ``ConfigError``. The check is
silenced by a tool that says how its recipient deduplicates otherwise
(``@tool(dedup="natural key: order_id")``), and does not apply to ``read`` and
``irreversible`` tools (the first may run again, the second is reconciled, never re-sent
blindly). A function whose code cannot be read (a builtin, a C extension) is not flagged:
the check warns about what it can see, it does not guess.
"""

from __future__ import annotations

import functools
import inspect
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from oncegraph.errors import ConfigError, UnkeyedToolWarning
from oncegraph.runtime.context import current_effect
from oncegraph.storage.records import EffectClass
from oncegraph.tools.tool import Tool

__all__ = ["UnkeyedToolWarning", "check_tools", "reads_key", "unkeyed"]

_KEY_NAMES = frozenset({"current_effect", "idempotency_key"})


def _function(fn: Any) -> types.FunctionType | None:
    """The Python function behind ``fn`` (through partials, bound methods, decorators
    that set ``__wrapped__``, and callable objects), or None."""
    for _ in range(16):  # a chain of wrappers, never a cycle
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif inspect.ismethod(fn):
            fn = fn.__func__
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        else:
            break
    if isinstance(fn, types.FunctionType):
        return fn
    call = inspect.getattr_static(type(fn), "__call__", None)  # a callable object
    return call if isinstance(call, types.FunctionType) else None


def _names(code: types.CodeType) -> set[str]:
    """Global, attribute and free-variable names used by ``code`` and the code nested in
    it (inner functions, lambdas, comprehensions)."""
    out = set(code.co_names) | set(code.co_freevars)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


def _referenced(fn: types.FunctionType, names: Iterable[str]) -> Iterator[Any]:
    """The objects ``names`` stand for in ``fn``: its closure's cells, then its globals."""
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False))
    for name in names:
        if name in cells:
            try:
                yield cells[name].cell_contents
            except ValueError:  # an empty cell
                continue
        elif name in fn.__globals__:
            yield fn.__globals__[name]


def _reads_directly(fn: types.FunctionType) -> tuple[bool, set[str]]:
    names = _names(fn.__code__)
    if names & _KEY_NAMES:
        return True, names
    return any(obj is current_effect for obj in _referenced(fn, names)), names


def reads_key(fn: Callable[..., Any]) -> bool | None:
    """Whether ``fn``'s code reads the idempotency key (see the module docstring); None
    when its code cannot be read."""
    target = _function(fn)
    if target is None:
        return None
    found, names = _reads_directly(target)
    if found:
        return True
    for obj in _referenced(target, names):  # one level down, in the tool's own module
        callee = _function(obj) if callable(obj) else None
        if (
            callee is not None
            and callee is not target
            and callee.__module__ == target.__module__
            and _reads_directly(callee)[0]
        ):
            return True
    return False


def unkeyed(tools: Iterable[Tool]) -> list[Tool]:
    """The ``write`` tools that never read their idempotency key and say nothing of how
    their recipient deduplicates."""
    return [
        t
        for t in tools
        if t.effect is EffectClass.WRITE
        and not t.dedup
        and reads_key(t.source if t.source is not None else t.fn) is False
    ]


def _message(tools: list[Tool]) -> str:
    names = ", ".join(repr(t.name) for t in tools)
    which, verb = ("tool", "reads") if len(tools) == 1 else ("tools", "read")
    return (
        f"write {which} {names} never {verb} the idempotency key: a write tool whose outcome "
        "is unknown after a crash is called again, and without the key the recipient "
        "cannot tell that call from a new one (a refund made twice). Pass "
        "current_effect().idempotency_key to the recipient (an Idempotency-Key header, a "
        "request id); or declare it @tool(effect=\"irreversible\", reconcile=...) so an "
        "unknown outcome is checked at the recipient, never re-sent; or, if the recipient "
        "deduplicates another way, say how in the tool's declaration: "
        "@tool(dedup=\"natural key: order_id\"). compile(strict=True) makes this an error."
    )


def check_tools(nodes: Mapping[str, Any], *, strict: bool, stacklevel: int = 2) -> None:
    """Warn (``strict``: raise ``ConfigError``) about the unkeyed ``write`` tools of the
    tool nodes among ``nodes`` (a graph's node specs, each with ``fn``)."""
    found: list[Tool] = []
    for node in nodes.values():
        tools = getattr(getattr(node, "fn", None), "tools", None)
        if isinstance(tools, Mapping):
            found += unkeyed(t for t in tools.values() if isinstance(t, Tool))
    if not found:
        return
    if strict:
        raise ConfigError(_message(found))
    warnings.warn(_message(found), UnkeyedToolWarning, stacklevel=stacklevel + 1)
