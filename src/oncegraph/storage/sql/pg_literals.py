"""Values as SQL literals, for a PostgreSQL session that reads them plainly.

Messages that carry many values (a group of step commits, a batch of run locks) are
sent as text with their values quoted in it, one simple-query message. psycopg's
``as_literal`` quotes a value for any server (``E'...'`` escapes, the connection's
encoding); quoting here, for the session every PostgreSQL since 9.1 has by default
(``standard_conforming_strings`` on, so a backslash is an ordinary character, and
UTF-8), builds a group's script in about two thirds of the time. :func:`plain_session`
reads both settings from the session's own reported values; on any other session the
caller quotes with psycopg.

Invariants:

* A literal means exactly the value: a string is its text in single quotes with its
  quotes doubled; an int or a float is written as Python writes it, with psycopg's
  spellings of infinities and NaN and a space before a minus (so no ``--`` can start a
  comment); None is NULL.
* What is not quoted here is left to psycopg (None is returned): other types (bool,
  bytes, JSON objects) and a string holding a NUL, which PostgreSQL text cannot hold,
  so psycopg raises its own error for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import psycopg


def plain_session(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Does ``conn``'s session read ``quote_plain``'s literals as meant: standard
    conforming strings (a backslash is an ordinary character) and UTF-8? Both are
    reported by the server whenever they change, so this reads no more than libpq's
    copy of them."""
    pgconn = conn.pgconn
    return (
        pgconn.parameter_status(b"standard_conforming_strings") == b"on"
        and pgconn.parameter_status(b"client_encoding") in _UTF8
    )


_UTF8 = (b"UTF8", b"UNICODE")
_FLOAT_WORDS = {"inf": "'Infinity'::float8", "-inf": "'-Infinity'::float8", "nan": "'NaN'::float8"}


def quote_plain(value: Any) -> str | None:
    """``value`` as a literal for a :func:`plain_session`, or None when psycopg must quote
    it: a string in single quotes with its single quotes doubled (None if it holds a NUL,
    which no text can), an int or a float as Python writes it (a space before a minus, as
    psycopg does, so no ``--`` can start a comment), NULL for None. Not a bool (an int
    subclass): psycopg writes ``true``."""
    kind = type(value)
    if kind is str:
        string: str = value
        if "\x00" in string:
            return None
        return "'" + (string.replace("'", "''") if "'" in string else string) + "'"
    if value is None:
        return "NULL"
    if kind is int:
        text = str(value)
    elif kind is float:
        text = repr(value)
        if text in _FLOAT_WORDS:
            return _FLOAT_WORDS[text]
    else:
        return None
    return " " + text if text[0] == "-" else text


def plain_literals(values: Iterable[Any], as_literal: Callable[[Any], Any]) -> list[str] | None:
    """Each of ``values`` as a literal for a :func:`plain_session`: :func:`quote_plain`'s,
    else psycopg's ``as_literal``'s (the types quoted only there); None when a string
    cannot be sent (a NUL), so that the caller quotes the whole message with psycopg,
    whose error says what is wrong."""
    out: list[str] = []
    for value in values:
        quoted = quote_plain(value)
        if quoted is None:
            if type(value) is str:
                return None
            quoted = bytes(as_literal(value)).decode()
        out.append(quoted)
    return out


__all__ = ["plain_literals", "plain_session", "quote_plain"]
