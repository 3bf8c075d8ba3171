"""The state diff between two checkpoints, for the run page: pure, no I/O.

A field is ``added``, ``removed`` or ``changed``; a list that only grew (messages) is
``appended`` with just the new items, so a long conversation's diff stays short.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Change:
    field: str
    kind: str  # added | removed | changed | appended
    before: Any
    after: Any


def state_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    changes = []
    for key in sorted(set(before) | set(after), key=str):
        if key not in before:
            changes.append(Change(str(key), "added", None, after[key]))
        elif key not in after:
            changes.append(Change(str(key), "removed", before[key], None))
        elif before[key] != after[key]:
            old, new = before[key], after[key]
            if isinstance(old, list) and isinstance(new, list) and new[: len(old)] == old:
                changes.append(Change(str(key), "appended", len(old), new[len(old) :]))
            else:
                changes.append(Change(str(key), "changed", old, new))
    return changes


def patch_diff(current: Mapping[str, Any], patch: Mapping[str, Any]) -> list[Change]:
    """What a branch patch would change, field by field (a preview; the run service's
    diff after the branch is the record)."""
    return [
        Change(str(k), "changed" if k in current else "added", current.get(k), v)
        for k, v in patch.items()
        if current.get(k) != v or k not in current
    ]


__all__ = ["Change", "patch_diff", "state_diff"]
