"""The encryption key ring of the ``db`` commands, read from a file (``--keys-file``).

The file holds one key a line, ``<key id>=<key as hex>`` (16, 24 or 32 bytes: 32, 48
or 64 hex digits); blank lines and lines starting with ``#`` are ignored. The key that
seals new values is ``--current ID``, else the last key listed. Keys never go on the
command line (``ps`` would show them) and are never printed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from oncegraph.cli.output import CliError
from oncegraph.errors import ConfigError

KeysFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--keys-file",
        help="a file of encryption keys, one 'key_id=hex' a line (the store's EncryptionKeys)",
        show_default=False,
    ),
]
CurrentOpt = Annotated[
    str | None,
    typer.Option(
        "--current",
        help="the key id that seals new values (default: the last key of --keys-file)",
        show_default=False,
    ),
]


def read_keys(path: Path | None, current: str | None = None) -> Any:
    """The :class:`~oncegraph.storage.encryption.EncryptionKeys` of ``path`` (None: no
    file given); a malformed file is a CliError (exit 2) naming the line."""
    if path is None:
        if current is not None:
            raise CliError("--current needs --keys-file FILE", code=2)
        return None
    where = os.fspath(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise CliError(
            f"--keys-file {where}: cannot read it ({exc.strerror}); check the path", code=2
        ) from None
    keys: dict[str, bytes] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key_id, sep, value = line.partition("=")
        try:
            key = bytes.fromhex(value.strip())
        except ValueError:
            key = b""
        if not sep or not key_id.strip() or not key:
            raise CliError(
                f"--keys-file {where}, line {number}: expected 'key_id=<key as hex>' (the "
                "key itself is not shown)",
                code=2,
            )
        keys[key_id.strip()] = key
    if not keys:
        raise CliError(f"--keys-file {where} holds no key; add a line 'key_id=<hex>'", code=2)
    from oncegraph.storage.encryption import EncryptionKeys

    try:
        return EncryptionKeys(keys, current=current or list(keys)[-1])
    except ConfigError as exc:
        raise CliError(f"--keys-file {where}: {exc}", code=2) from None


__all__ = ["CurrentOpt", "KeysFileOpt", "read_keys"]
