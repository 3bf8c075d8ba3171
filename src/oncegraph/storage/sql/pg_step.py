"""PostgreSQL's step commit: one message, one round trip, one transaction.

A step (:class:`~oncegraph.storage.records.StepCommit`) is up to a dozen statements:
the thread-version compare-and-swap, the run's insert / status / fence, the checkpoint,
log entries, effect results, and the cleanup of task writes.

Invariants:

* **One implicit transaction.** The statements go to the server as ONE simple-query
  message with no BEGIN or COMMIT of its own, which PostgreSQL runs as one transaction:
  if any statement fails, none of them is committed. The CAS and the run's update are
  each one statement with its check (:func:`checked`), which divides by zero when the
  write matched nothing, so a lost race aborts the step before anything after it runs.
* **Prepared once per connection.** The statements are ``PREPARE``d (named ``og_*``,
  apart from psycopg's own ``_pg3_*``) the first time a connection commits a step; the
  message is then a list of ``EXECUTE og_...(...)`` whose arguments are literals. A
  session that lost its prepared statements (``DISCARD ALL`` by a pooler) gets them
  again, and the step is sent again: the failed message committed nothing. Behind a
  transaction-pooling proxy, which cannot keep them at all, ``prepared=False`` sends
  the statements themselves in the same one message (and the error that says so
  names that switch).
* **Arguments quoted as the session reads them.** On a session with
  ``standard_conforming_strings`` on and UTF-8 (PostgreSQL's defaults, read from the
  session's reported settings before every message), strings, numbers and NULL are
  quoted by :mod:`~oncegraph.storage.sql.pg_literals` (a group's script in about two
  thirds of the time psycopg's ``as_literal`` takes, which quotes for any server);
  anything else, and any other session, goes through ``as_literal``. A value neither
  can send (a NUL in a string) gets psycopg's own error.

Why not pipelining: on loopback PostgreSQL 15 with async psycopg, five statements cost
~0.24-0.29 ms per commit this way, against ~0.36-0.39 ms pipelined (BEGIN ... COMMIT,
one sync: the pipeline takes a round of the event loop per statement) and ~0.31-0.33 ms
unprepared in one message (a parse and plan per statement).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import abc
from psycopg import errors as pg_errors
from psycopg.adapt import Transformer

from oncegraph.errors import StorageError
from oncegraph.storage.records import StepCommit
from oncegraph.storage.sql import rows
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.pg_literals import plain_literals, plain_session


def checked(write: str) -> str:
    """``write`` (an INSERT or UPDATE) as one statement that divides by zero, aborting
    the transaction, unless it wrote exactly one row."""
    return f"WITH w AS ({write} RETURNING 1) SELECT 1 / count(*) FROM w"


# The thread's write and its run's write each carry their own check (``checked``): one
# statement each, where a write and a check that read its row again were two
# (1,000 one-step runs at concurrency 64: 644 -> 678 runs/s).
_STATEMENTS = {
    "og_thread_insert_checked": checked(S.THREAD_INSERT),
    "og_thread_cas_checked": checked(S.THREAD_CAS),
    "og_run_insert": S.RUN_INSERT,
    "og_run_status_checked": checked(S.RUN_SET_STATUS),
    "og_run_status_fenced_checked": checked(S.RUN_SET_STATUS_FENCED),
    "og_run_touch_fenced_checked": checked(S.RUN_TOUCH_FENCED),
    "og_checkpoint_insert": S.CHECKPOINT_INSERT,
    "og_log_insert": S.LOG_INSERT,
    "og_effect_upsert": S.EFFECT_UPSERT_RESULT,
    "og_effect_intent": S.EFFECT_INTENT_INSERT,
    "og_task_writes_delete": S.TASK_WRITES_DELETE,
}
_PREPARED_NAMES = "SELECT name FROM pg_prepared_statements WHERE name = ANY(%s)"


def numbered(sql: str) -> str:
    """``?`` placeholders -> ``$1``, ``$2``, ... (the statements hold no literal ``?``)."""
    pieces = sql.split("?")
    out = [pieces[0]]
    for i, piece in enumerate(pieces[1:], start=1):
        out.append(f"${i}{piece}")
    return "".join(out)


def _prepare(name: str) -> str:
    return f"PREPARE {name} AS {numbered(_STATEMENTS[name])}"


def step_script(
    commit: StepCommit, ts: float, *, prepared: bool = True, codec: rows.Rows = rows.PLAIN
) -> tuple[str, list[Any]]:
    """The step's message as it is sent to a session with PostgreSQL's default settings
    (its arguments quoted by :mod:`~oncegraph.storage.sql.pg_literals`, psycopg's
    default adapters for the rest), and those arguments in order: ``EXECUTE``s of the
    prepared statements, or (``prepared=False``) the statements themselves."""
    parts = step_parts(commit, ts, codec)
    script = _script(parts, prepared, Transformer.from_context(None), plain=True)
    return script.decode(), [value for _, params in parts for value in params]


def step_parts(
    commit: StepCommit, ts: float, codec: rows.Rows = rows.PLAIN
) -> list[tuple[str, Sequence[Any]]]:
    """The step's statements in order: (statement name, its arguments)."""
    cp = commit.checkpoint
    parts: list[tuple[str, Sequence[Any]]] = []
    if commit.expected_version == 0:
        parts.append(("og_thread_insert_checked", (commit.thread_id, 1, cp.checkpoint_id, ts)))
    else:
        cas = (commit.expected_version + 1, cp.checkpoint_id, ts, commit.thread_id)
        parts.append(("og_thread_cas_checked", (*cas, commit.expected_version)))
    if commit.new_run is not None:
        parts.append(("og_run_insert", codec.run_to_params(commit.new_run)))
    if commit.run_status is not None:
        error = codec.error_param(cp.run_id, commit.run_error)
        status = (str(commit.run_status), error, ts, cp.run_id)
        if commit.fence is None:
            parts.append(("og_run_status_checked", status))
        else:
            parts.append(("og_run_status_fenced_checked", (*status, commit.fence)))
    elif commit.fence is not None:
        parts.append(("og_run_touch_fenced_checked", (ts, cp.run_id, commit.fence)))
    parts.append(("og_checkpoint_insert", codec.checkpoint_to_params(cp)))
    parts.extend(("og_log_insert", p) for p in codec.log_params(commit.thread_id, commit.log))
    parts.extend(("og_effect_intent", codec.effect_to_params(e)) for e in commit.intents)
    parts.extend(("og_effect_upsert", codec.effect_to_params(e)) for e in commit.effects)
    if commit.clear_task_writes_of is not None:
        parts.append(("og_task_writes_delete", (commit.thread_id, commit.clear_task_writes_of)))
    return parts


class StepWriter:
    """Sends step commits; remembers which connections hold the prepared statements.

    ``prepared=False`` sends the statements themselves (parsed per commit): for a
    transaction-pooling proxy (PgBouncer ``pool_mode=transaction``), which cannot keep a
    session's prepared statements between transactions.
    """

    def __init__(self, *, prepared: bool = True, codec: rows.Rows = rows.PLAIN) -> None:
        self.prepared = prepared
        self.codec = codec
        self._ready: weakref.WeakSet[psycopg.AsyncConnection[Any]] = weakref.WeakSet()

    async def send(self, conn: psycopg.AsyncConnection[Any], commit: StepCommit, ts: float) -> int:
        """Commit ``commit`` on ``conn`` (autocommit), or raise what the server said;
        returns how many of its planned intents were inserted."""
        return (await self.send_many(conn, [(commit, ts)]))[0]

    async def send_many(
        self, conn: psycopg.AsyncConnection[Any], commits: Sequence[tuple[StepCommit, float]]
    ) -> list[int]:
        """Commit every step of ``commits`` in ONE transaction (one message), or none of
        them (the server's error is raised); how many planned intents each inserted, in
        the order of ``commits``.

        The steps go in the order of their run ids (bytewise; a stable sort, so steps of
        one run keep theirs), whatever order they were asked in: each step locks its
        run's row, and a worker's lease renewal (:data:`.pg_queue.RENEW_MANY`) locks the
        rows of the same runs in that order too, so the two never deadlock."""
        order = sorted(range(len(commits)), key=lambda i: commits[i][0].checkpoint.run_id)
        parts: list[tuple[str, Sequence[Any]]] = []
        spans: dict[int, tuple[int, int]] = {}
        for i in order:
            commit, ts = commits[i]
            start = len(parts)
            parts.extend(step_parts(commit, ts, self.codec))
            spans[i] = (start, len(parts))
        counts = await self._send(conn, parts)
        return [
            _inserted(counts, [j for j in range(a, b) if parts[j][0] == "og_effect_intent"])
            for a, b in (spans[i] for i in range(len(commits)))
        ]

    async def _send(
        self, conn: psycopg.AsyncConnection[Any], parts: list[tuple[str, Sequence[Any]]]
    ) -> list[int]:
        script = _script(
            parts, self.prepared, Transformer.from_context(conn), plain=plain_session(conn)
        )
        if not self.prepared:
            return await _execute(conn, script)
        if conn not in self._ready:
            await self._prepare(conn)
        try:
            return await _execute(conn, script)
        except pg_errors.InvalidSqlStatementName:
            # The session lost its prepared statements: nothing was committed.
            self._ready.discard(conn)
            await self._prepare(conn)
            try:
                return await _execute(conn, script)
            except pg_errors.InvalidSqlStatementName as exc:
                raise StorageError(
                    "PostgreSQL lost the step's prepared statements between two messages "
                    "on one connection, so nothing was written. Behind a transaction-"
                    "pooling proxy (PgBouncer pool_mode=transaction) pass "
                    "PgCheckpointer(..., prepared_statements=False)"
                ) from exc

    async def _prepare(self, conn: psycopg.AsyncConnection[Any]) -> None:
        cur = await conn.execute(_PREPARED_NAMES, (list(_STATEMENTS),), prepare=False)
        have = {name for (name,) in await cur.fetchall()}
        missing = [_prepare(name) for name in _STATEMENTS if name not in have]
        if missing:
            await _execute(conn, ";\n".join(missing).encode())
        self._ready.add(conn)


# Each statement's text around its ``?`` placeholders (for ``prepared=False``).
_TEXT_PIECES = {name: sql.split("?") for name, sql in _STATEMENTS.items()}
_PIECES = {name: [p.encode() for p in pieces] for name, pieces in _TEXT_PIECES.items()}


def _script(
    parts: list[tuple[str, Sequence[Any]]], prepared: bool, tx: abc.Transformer, *, plain: bool
) -> bytes:
    """The message with every argument quoted as a literal, built here: psycopg would
    parse the whole script again for its ``%s`` on every commit (it caches the parse only
    for short queries of at most 50 arguments, and a group's script is longer).
    ``plain``: the session is a :func:`plain_session`, so :func:`plain_literals` quotes what
    it can (then a script it cannot finish is quoted whole by psycopg)."""
    if plain:
        script = _plain_script(parts, prepared, tx)
        if script is not None:
            return script
    return _literal_script(parts, prepared, tx)


def _plain_script(
    parts: list[tuple[str, Sequence[Any]]], prepared: bool, tx: abc.Transformer
) -> bytes | None:
    statements: list[str] = []
    for name, params in parts:
        args = plain_literals(params, tx.as_literal)
        if args is None:  # a NUL: psycopg's quoting says what is wrong
            return None
        if prepared:
            statements.append(f"EXECUTE {name}({', '.join(args)})")
        else:
            statements.append(_join_pieces(_TEXT_PIECES[name], args))
    try:
        return ";\n".join(statements).encode()
    except UnicodeEncodeError:  # a lone surrogate: psycopg's quoting says what is wrong
        return None


def _literal_script(
    parts: list[tuple[str, Sequence[Any]]], prepared: bool, tx: abc.Transformer
) -> bytes:
    """Every argument quoted by psycopg (``as_literal``, as its ``ClientCursor`` quotes
    them): for any session."""
    literal = tx.as_literal
    statements: list[bytes] = []
    for name, params in parts:
        args = [b"NULL" if p is None else literal(p) for p in params]
        if prepared:
            statements.append(b"EXECUTE %b(%b)" % (name.encode(), b", ".join(args)))
        else:
            statements.append(_join_pieces(_PIECES[name], args))
    return b";\n".join(statements)


def _join_pieces(pieces: Sequence[Any], args: Sequence[Any]) -> Any:
    """A statement's text with ``args`` in its placeholders (str or bytes alike)."""
    out = [pieces[0]]
    for arg, piece in zip(args, pieces[1:], strict=True):
        out += (arg, piece)
    return pieces[0][:0].join(out)


async def _execute(conn: psycopg.AsyncConnection[Any], script: bytes) -> list[int]:
    """Run ``script`` (no arguments left to bind); the row count of each of its
    statements, in order."""
    async with psycopg.AsyncClientCursor(conn) as cur:
        await cur.execute(script)
        counts = [cur.rowcount]
        while cur.nextset():
            counts.append(cur.rowcount)
        return counts


def _inserted(counts: list[int], intents: list[int]) -> int:
    """Planned intents inserted: the row counts of their statements (``ON CONFLICT DO
    NOTHING`` inserts one row or none)."""
    return sum(max(counts[i], 0) for i in intents if i < len(counts))


__all__ = ["StepWriter", "checked", "numbered", "step_parts", "step_script"]
