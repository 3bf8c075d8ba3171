"""Messages as an operator at the UI reads them.

The library's errors name the Python call that fixes them (``app.resume(run_id, ...)``),
because most of their readers are writing Python. A person at the UI has buttons, not a
Python prompt: :func:`for_operator` rewrites each such call in a message into the
button that does the same, so a page never tells its reader to write code.
"""

from __future__ import annotations

import re

# The app's calls, and the button of the run's page that does the same.
BUTTONS = {
    "resume": "Continue run",
    "aresume": "Continue run",
    "invoke": "Continue run",
    "ainvoke": "Continue run",
    "resolve_effect": "Resolve effect",
    "aresolve_effect": "Resolve effect",
    "check_effect": "Check at recipient",
    "acheck_effect": "Check at recipient",
    "redeliver_effect": "Redeliver effect",
    "aredeliver_effect": "Redeliver effect",
    "compensate": "Compensate",
    "acompensate": "Compensate",
    "abandon": "Abandon run",
    "aabandon": "Abandon run",
    "replay": "Create replay",
    "areplay": "Create replay",
    "branch": "Create branch",
    "abranch": "Create branch",
}
# Reads: the page itself shows them.
PAGES = {"get_run", "aget_run", "get_state", "aget_state", "runs", "aruns", "effects"}

_CALL = re.compile(r"\b(?:app\.)?(\w+)\(")
# "the X button or the X button", once two calls became one button
_TWICE = re.compile(r'(the "[^"]+" button)(?: \(or \1\)| or \1)')


def _close(text: str, start: int) -> int:
    """The index after the parenthesis that closes the one before ``start``, or -1."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def for_operator(text: str) -> str:
    """``text`` with every Python call of the app rewritten as the UI's button for it
    (``the "Continue run" button``), and reads as "this page"."""
    out: list[str] = []
    at = 0
    for found in _CALL.finditer(text):
        if found.start() < at:
            continue
        name = found.group(1)
        qualified = found.group(0).startswith("app.")
        if name not in BUTTONS and not (qualified and name in PAGES):
            continue
        if not qualified and name not in ("invoke", "ainvoke"):
            continue  # a bare word followed by "(": prose, not a call of the app
        end = _close(text, found.end())
        if end < 0:
            continue
        if text.startswith(".status", end):
            end += len(".status")
        out.append(text[at : found.start()])
        button = BUTTONS.get(name)
        out.append(f'the "{button}" button' if button else "see the run's page")
        at = end
    out.append(text[at:])
    return _TWICE.sub(r"\1", "".join(out))


__all__ = ["BUTTONS", "for_operator"]
