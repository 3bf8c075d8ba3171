"""Values quoted as literals by oncegraph (``pg_literals.quote_plain``) mean, to a real
PostgreSQL session, exactly the values psycopg binds; a session whose settings would read
them otherwise gets psycopg's own quoting, and its step commits and run-lock batches do
the same.
"""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest
from psycopg.adapt import Transformer
from psycopg.conninfo import make_conninfo

from oncegraph.storage.records import LogEntry, StepCommit
from oncegraph.storage.sql.pg_literals import plain_session, quote_plain
from oncegraph.storage.sql.pg_locks import TRY_LOCK, batch_message
from oncegraph.storage.sql.pg_step import _script, step_parts, step_script
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.conformance import make_checkpoint, start_thread

pytestmark = pytest.mark.postgres

STRINGS = [
    "",
    "plain",
    "it's",
    "''",
    "a\\b",
    "\\",
    "\\'",
    "ends with a backslash\\",
    'C:\\path\\to\\"file"',
    '{"k": "a\\"b\\n", "u": "\\u00e9"}',
    "ünïcödé ✓ 🙂 中文",
    "E'x'",
    "-- not a comment",
    "/* not a comment */",
    "$1 $$ $tag$",
    "); DROP TABLE oncegraph_threads; --",
    "line\nbreak\ttab\rreturn",
    "%s %(x)s {}",
]
INTS = [0, 1, -1, 42, -42, 2**63 - 1, -(2**63)]
FLOATS = [
    0.0,
    -0.0,
    1.5,
    -1.5,
    1e300,
    -1e-300,
    1e16,
    5e-324,
    1_764_547_200.123456,
    math.inf,
    -math.inf,
    math.nan,
]


def _execute(conn: psycopg.Connection[Any], kind: str, literal: str) -> Any:
    """``literal`` as the argument of a prepared statement of ``kind``, as a step sends
    its arguments (``EXECUTE name(literal)``)."""
    conn.execute(f"PREPARE q_{kind}({kind}) AS SELECT $1", prepare=False)
    try:
        row = conn.execute(f"EXECUTE q_{kind}({literal})", prepare=False).fetchone()
    finally:
        conn.execute(f"DEALLOCATE q_{kind}", prepare=False)
    assert row is not None
    return row[0]


def test_plain_literals_mean_the_values_psycopg_binds(pg_admin: str) -> None:
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        assert plain_session(conn)  # type: ignore[arg-type]
        for text in STRINGS:
            literal = quote_plain(text)
            assert literal is not None
            assert _execute(conn, "text", literal) == text, literal
        for number in INTS:
            literal = quote_plain(number)
            assert literal is not None
            assert _execute(conn, "bigint", literal) == number, literal
            # a minus never meets another one: "1 - -1" must not become a comment
            row = conn.execute(f"SELECT 1::numeric -{literal}", prepare=False).fetchone()
            assert row == (1 - number,)
        for value in FLOATS:
            literal = quote_plain(value)
            assert literal is not None
            got = _execute(conn, "float8", literal)
            if math.isnan(value):
                assert math.isnan(got)
            else:
                assert got == value  # -0.0 arrives as 0.0, as psycopg's " -0.0" always did
        assert _execute(conn, "text", "NULL") is None
        assert quote_plain(None) == "NULL"


def test_what_plain_quoting_leaves_to_psycopg() -> None:
    assert quote_plain(True) is None  # an int subclass psycopg writes as true
    assert quote_plain(b"\x00\xff") is None
    assert quote_plain({"a": 1}) is None
    assert quote_plain("a\x00b") is None  # no text can hold a NUL
    # numbers and strings written as psycopg writes them (a space before a minus)
    tx = Transformer.from_context(None)
    for value in [*INTS, *FLOATS, "plain", "it's"]:
        assert quote_plain(value) == bytes(tx.as_literal(value)).decode()


def test_a_script_plain_quoting_cannot_finish_gets_psycopgs_error() -> None:
    tx = Transformer.from_context(None)
    for bad, error in (("a\x00b", psycopg.DataError), ("a\ud800b", UnicodeEncodeError)):
        parts: list[tuple[str, Any]] = [("og_log_insert", ("t", "messages", 1, bad))]
        with pytest.raises(error):
            _script(parts, True, tx, plain=True)
        with pytest.raises(error):
            _script(parts, True, tx, plain=False)


def _tricky_commit(thread_id: str, run_id: str, parent: str) -> StepCommit:
    values = {f"v{i}": text for i, text in enumerate(STRINGS)}
    checkpoint = make_checkpoint(
        thread_id,
        run_id,
        2,
        parent=parent,
        values=values,
        logs={"m": 1},
        metadata={"source": "loop", "note": "it's \\ 'quoted' \\'"},
    )
    log = [LogEntry("m", 0, {"text": "a\\b 'c' \\'d"})]
    return StepCommit(thread_id=thread_id, expected_version=1, checkpoint=checkpoint, log=log)


@pytest.mark.parametrize("conforming", ["on", "off"])
async def test_step_commits_read_back_whatever_the_session_reads_strings_as(
    fresh_dsn: str, conforming: str
) -> None:
    """With ``standard_conforming_strings`` off a backslash in a plain literal is an
    escape: the writer must see that from the session and let psycopg quote."""
    dsn = make_conninfo(fresh_dsn, options=f"-c standard_conforming_strings={conforming}")
    for prepared in (True, False):
        store = PgCheckpointer(dsn, min_size=1, max_size=1, prepared_statements=prepared)
        try:
            tid, rid, cp1 = await start_thread(store)
            commit = _tricky_commit(tid, rid, cp1.checkpoint_id)
            await store.commit(commit)
            assert await store.get_checkpoint(tid) == commit.checkpoint
            assert await store.read_log(tid, "m", 1) == [commit.log[0].value]
            pool = store._pools.peek()
            assert pool is not None
            async with pool.connection() as conn:
                assert plain_session(conn) is (conforming == "on")
        finally:
            await store.aclose()


def test_step_script_shows_the_plain_message() -> None:
    commit = _tricky_commit("t1", "r1", "cp0")
    script, params = step_script(commit, 1.0)
    # a backslash needs no escape string (psycopg writes " E'...'") on a conforming session
    assert " E'" not in script
    for value in params:
        assert quote_plain(value) in script
    assert len(params) == sum(len(p) for _, p in step_parts(commit, 1.0))


@pytest.mark.parametrize("conforming", ["on", "off"])
async def test_lock_batches_take_and_give_back_odd_run_ids(fresh_dsn: str, conforming: str) -> None:
    """The run-lock batch (``pg_locks.batch_message``) writes its arrays in on a plain
    session and binds them otherwise: both take and give back exactly the runs named,
    whatever their ids hold."""
    dsn = make_conninfo(fresh_dsn, options=f"-c standard_conforming_strings={conforming}")
    runs = ["it's", "a\\b", "\\'", "ünï ✓"]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        message, params = batch_message(conn, ["lock"] * len(runs), runs)
        assert (params is None) is (conforming == "on")
        cur = await conn.execute(message, params)
        assert await cur.fetchall() == [(True,)] * len(runs)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other:
            for run in runs:  # held by the first session, so no other can take them
                cur = await other.execute(TRY_LOCK, (run,))
                assert await cur.fetchone() == (False,)
            ops = ["unlock", "lock", "unlock"]
            cur = await conn.execute(*batch_message(conn, ops, [runs[0], runs[0], runs[0]]))
            assert await cur.fetchall() == [(True,), (True,), (True,)]  # in order
            cur = await other.execute(TRY_LOCK, (runs[0],))
            assert await cur.fetchone() == (True,)  # given back
