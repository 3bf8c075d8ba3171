"""The mask an ``effect(..., mask=[...])`` call declares, carried by its stored request.

A tool's masked fields are known from the graph (``ToolNode.effect_masks``); an effect
made directly in a node is not, so its request says it itself::

    {"args": [...], "kwargs": {...}, "mask": {"fields": ["card"], "positions": [1]}}

``fields`` are the masked parameter names (keys of that name are masked at any depth),
``positions`` the positional arguments bound to them. Views read it with
:func:`declared_mask` (:mod:`oncegraph.runs.masking`); the ledger hashes it with the
rest of the request, so it is fixed with the record.

Every tool made in this process also registers its masked fields here
(:func:`register`), and every masked call this process performs the values it was given
in them (:func:`remember`, the newest :data:`REMEMBERED` of them): what a record shows of
itself (its ``repr``, which a user's ``reconcile`` hook may log) and what a span carries
are masked by them without a graph or a store at hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

MASK = "***"  # what a masked value is shown as
_REGISTERED: dict[str, tuple[str, ...]] = {}
REMEMBERED = 4096  # secret values kept for reprs and spans, newest first
_REMEMBERED: dict[str, None] = {}  # insertion-ordered: the oldest goes first


def register(effect_type: str, fields: Iterable[str]) -> None:
    """Remember that ``effect_type``'s ``fields`` are masked (every tool of that name
    made in this process: the union of what they declared)."""
    new = tuple(f for f in fields if isinstance(f, str))
    if not new:
        return
    known = _REGISTERED.get(effect_type, ())
    if not set(new) <= set(known):
        _REGISTERED[effect_type] = tuple(dict.fromkeys((*known, *new)))


def registered() -> dict[str, tuple[str, ...]]:
    """Every effect type's masked fields declared by a tool made in this process."""
    return dict(_REGISTERED)


def declare(
    request: dict[str, Any], fields: Iterable[str], positions: Iterable[int]
) -> dict[str, Any]:
    """``request`` carrying its mask declaration."""
    return {**request, "mask": {"fields": list(fields), "positions": list(positions)}}


def remember(values: Iterable[str]) -> None:
    """Keep secret values a masked call was given (see the module docstring)."""
    for value in values:
        if value in _REMEMBERED:
            continue
        _REMEMBERED[value] = None
        if len(_REMEMBERED) > REMEMBERED:
            del _REMEMBERED[next(iter(_REMEMBERED))]


CallValues = Callable[[str, Any, tuple[str, ...]], Iterable[str]]
"""``(effect_type, request, fields) -> the masked values in the request``."""
_CALL_VALUES: list[CallValues] = []


def find_call_values_with(call_values: CallValues) -> None:
    """Install how a call's masked values are found: the run layer's masker
    (:mod:`oncegraph.runs.masking`, installed when it is imported, as importing
    ``oncegraph`` does), which knows every shape a tool call comes in. The ledger does not
    import it: the run layer sits above."""
    _CALL_VALUES[:] = [call_values]


def remember_call(effect_type: str, request: Any, fields: Iterable[str]) -> None:
    """Keep the masked values a call about to be made is given (for reprs and spans)."""
    fields = tuple(fields)
    if not (fields or declared_mask(request)[0]):
        return
    if not _CALL_VALUES:
        raise RuntimeError(
            "a masked call's values cannot be kept: nothing installed their masking; "
            "import oncegraph (it installs oncegraph.runs.masking) before running a graph"
        )
    remember(_CALL_VALUES[0](effect_type, request, fields))


def remembered() -> tuple[str, ...]:
    """The secret values this process's masked calls were given (the newest kept)."""
    return tuple(_REMEMBERED)


def declared_mask(request: Any) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The ``(fields, positions)`` an ``effect()`` request declares; ``((), ())`` if none."""
    if not (isinstance(request, Mapping) and "args" in request and "kwargs" in request):
        return (), ()
    mask = request.get("mask")
    if not isinstance(mask, Mapping):
        return (), ()
    fields = tuple(f for f in mask.get("fields") or () if isinstance(f, str))
    positions = tuple(p for p in mask.get("positions") or () if type(p) is int)
    return fields, positions


def mask_value(value: Any, fields: tuple[str, ...]) -> Any:
    """``value`` with every key in ``fields``, at any depth, replaced by ``"***"``."""
    if isinstance(value, Mapping):
        return {k: (MASK if k in fields else mask_value(v, fields)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_value(v, fields) for v in value]
    return value


__all__ = [
    "MASK",
    "declare",
    "declared_mask",
    "find_call_values_with",
    "mask_value",
    "register",
    "registered",
    "remember",
    "remember_call",
    "remembered",
]
