"""Stored strings shown literally on a terminal.

Thread ids, errors, effect types and recipients come from users, models and providers.
Printed as they are, Rich would read ``[...]`` in them as markup (``a[/]b`` crashes a
table, ``[link=...]`` becomes a live link) and the terminal would obey their escape
sequences (clear the screen, retitle the window, hide text). :func:`literal` is the
one way the CLI shows such a string.

Invariant: the result is a :class:`rich.text.Text` (Rich never parses markup or emoji
codes in one), and its text has no control or invisible formatting character left:
C0 and C1 controls, DEL, line and paragraph separators and Unicode format characters
(bidi overrides, zero-width characters) appear as Python-style escapes (``\\x1b``,
``\\n``, ``\\u202e``), and a backslash as ``\\\\``, so every shown string maps back to
exactly one stored string.
"""

from __future__ import annotations

import unicodedata

from rich.text import Text

_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    if unicodedata.category(ch) not in _INVISIBLE:
        return ch
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(value: object) -> str:
    """``str(value)`` with every control, format and separator character escaped."""
    text = "" if value is None else str(value)
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_escape(ch) for ch in text)


def literal(value: object, style: str = "") -> Text:
    """``value`` as a Rich ``Text`` shown exactly as stored: no markup, no control codes."""
    return Text(visible(value), style=style)


__all__ = ["literal", "visible"]
