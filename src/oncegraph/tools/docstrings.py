"""Read a tool's description and its parameters' descriptions from its docstring.

Three styles are understood, and may not be mixed within one docstring::

    Google                      NumPy                       reST (Sphinx)
    ------                      -----                       -------------
    Refund an order.            Refund an order.            Refund an order.

    Args:                       Parameters                  :param order_id: The order.
        order_id (str): The     ----------                  :param float amount: In EUR,
            order.              order_id : str                  tax included.
        amount: In EUR.             The order.              :type order_id: str
                                amount : float              :returns: The refund.
    Returns:                        In EUR.
        The refund.

The description is the text before the first section (a Google ``Name:`` header of
a known section, a NumPy header underlined with dashes, or the first reST field);
the summary alone is not enough for a model to choose well, so the whole text is
kept. A parameter's description is its entry with continuation lines joined by one
space. ``*args`` / ``**kwargs`` entries are read under their bare names. Anything
that is not understood is left out, never guessed.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

__all__ = ["Docstring", "parse_docstring"]

_GOOGLE_PARAMS = {
    "args",
    "arguments",
    "parameters",
    "params",
    "keyword args",
    "keyword arguments",
    "kwargs",
    "other parameters",
}
_GOOGLE_OTHER = {
    "attributes",
    "example",
    "examples",
    "exceptions",
    "methods",
    "note",
    "notes",
    "raises",
    "references",
    "return",
    "returns",
    "see also",
    "todo",
    "warning",
    "warnings",
    "warns",
    "yield",
    "yields",
}
_NUMPY_PARAMS = {"parameters", "params", "other parameters", "keyword arguments"}

_GOOGLE_HEADER = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_GOOGLE_ITEM = re.compile(r"^\**(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_NUMPY_RULE = re.compile(r"^-{3,}\s*$")
_NUMPY_ITEM = re.compile(r"^\**(\w+)\s*(?::\s*(.*))?$")
_REST_FIELD = re.compile(r"^:([^:]+):\s*(.*)$")
_REST_PARAM_KINDS = {"param", "parameter", "arg", "argument", "key", "keyword"}


@dataclass(frozen=True, slots=True)
class Docstring:
    """A parsed docstring: the description and each documented parameter's text."""

    description: str = ""
    params: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> Docstring:
    """Parse ``doc`` (raw or already cleaned) in whichever style it is written."""
    if not doc or not doc.strip():
        return Docstring()
    lines = inspect.cleandoc(doc).splitlines()
    start = _first_section(lines)
    description = "\n".join(lines[:start]).strip()
    params: dict[str, str] = {}
    style = _style_at(lines, start) if start < len(lines) else None
    if style == "google":
        _google(lines[start:], params)
    elif style == "numpy":
        _numpy(lines[start:], params)
    elif style == "rest":
        _rest(lines[start:], params)
    return Docstring(description, params)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_google_header(lines: list[str], i: int) -> bool:
    match = _GOOGLE_HEADER.match(lines[i])
    if match is None:
        return False
    name = match.group(1).strip().lower()
    return name in _GOOGLE_PARAMS or name in _GOOGLE_OTHER


def _is_numpy_header(lines: list[str], i: int) -> bool:
    return (
        i + 1 < len(lines)
        and bool(lines[i].strip())
        and _NUMPY_RULE.match(lines[i + 1].strip()) is not None
        and _indent(lines[i + 1]) == _indent(lines[i])
    )


def _style_at(lines: list[str], i: int) -> str | None:
    if _is_google_header(lines, i):
        return "google"
    if _is_numpy_header(lines, i):
        return "numpy"
    if _REST_FIELD.match(lines[i].strip()):
        return "rest"
    return None


def _first_section(lines: list[str]) -> int:
    for i in range(len(lines)):
        if _style_at(lines, i) is not None:
            return i
    return len(lines)


def _join(parts: list[str]) -> str:
    return " ".join(p.strip() for p in parts if p.strip())


def _google(lines: list[str], params: dict[str, str]) -> None:
    """Entries of every parameter section; other sections are skipped."""
    i = 0
    while i < len(lines):
        header = _GOOGLE_HEADER.match(lines[i])
        if header is None or not _is_google_header(lines, i):
            i += 1
            continue
        base = _indent(lines[i])
        in_params = header.group(1).strip().lower() in _GOOGLE_PARAMS
        i += 1
        item_indent: int | None = None
        name: str | None = None
        parts: list[str] = []
        while i < len(lines):
            line = lines[i]
            if line.strip() and _indent(line) <= base:
                break  # the section ended (a new header, or text back at its level)
            if in_params and line.strip():
                indent = _indent(line)
                if item_indent is None:
                    item_indent = indent
                item = _GOOGLE_ITEM.match(line.strip()) if indent == item_indent else None
                if item is not None:
                    if name is not None:
                        params[name] = _join(parts)
                    name, parts = item.group(1), [item.group(3)]
                elif name is not None:
                    parts.append(line)
            i += 1
        if name is not None:
            params[name] = _join(parts)


def _numpy(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i < len(lines):
        if not _is_numpy_header(lines, i):
            i += 1
            continue
        base = _indent(lines[i])
        in_params = lines[i].strip().lower() in _NUMPY_PARAMS
        i += 2
        name: str | None = None
        parts: list[str] = []
        while i < len(lines) and not _is_numpy_header(lines, i):
            line = lines[i]
            if in_params and line.strip():
                if _indent(line) == base:
                    if name is not None:
                        params[name] = _join(parts)
                    item = _NUMPY_ITEM.match(line.strip())
                    # "a, b : int" documents two parameters at once
                    if item is None and ":" in line:
                        names = [n.strip().lstrip("*") for n in line.split(":")[0].split(",")]
                        name, parts = ",".join(names), []
                    else:
                        name, parts = (item.group(1) if item else None), []
                elif name is not None:
                    parts.append(line)
            i += 1
        if name is not None:
            params[name] = _join(parts)
    for key in [k for k in params if "," in k]:
        text = params.pop(key)
        for one in key.split(","):
            params.setdefault(one, text)


def _rest(lines: list[str], params: dict[str, str]) -> None:
    name: str | None = None
    parts: list[str] = []
    for line in lines:
        field_match = _REST_FIELD.match(line.strip())
        if field_match is not None and _indent(line) == 0:
            if name is not None:
                params[name] = _join(parts)
            name, parts = None, []
            words = field_match.group(1).split()
            if len(words) >= 2 and words[0] in _REST_PARAM_KINDS:
                name, parts = words[-1].lstrip("*"), [field_match.group(2)]
        elif name is not None:
            parts.append(line)
    if name is not None:
        params[name] = _join(parts)
