"""Read a tool's description and its parameters' descriptions from its docstring.

The parsing is docstring-parser's, which understands the three common styles
(one per docstring)::

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

The description is the text before the first section; the summary alone is not
enough for a model to choose well, so the whole text is kept. A parameter's
description is its entry with its lines joined by one space. ``*args`` /
``**kwargs`` entries are read under their bare names, and a NumPy ``a, b : int``
entry documents both parameters. Anything that is not understood is left out,
never guessed.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import docstring_parser

__all__ = ["Docstring", "parse_docstring"]


@dataclass(frozen=True, slots=True)
class Docstring:
    """A parsed docstring: the description and each documented parameter's text."""

    description: str = ""
    params: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> Docstring:
    """Parse ``doc`` (raw or already cleaned) in whichever style it is written."""
    if not doc or not doc.strip():
        return Docstring()
    try:
        parsed = docstring_parser.parse(inspect.cleandoc(doc))
    except docstring_parser.ParseError:
        return Docstring(inspect.cleandoc(doc).strip())
    params: dict[str, str] = {}
    for param in parsed.params:
        text = " ".join((param.description or "").split())
        for name in param.arg_name.split(","):
            params.setdefault(name.strip().lstrip("*"), text)
    return Docstring((parsed.description or "").strip(), params)
