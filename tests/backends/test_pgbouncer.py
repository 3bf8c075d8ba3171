"""PgCheckpointer behind a real PgBouncer in ``pool_mode=transaction``.

Such a proxy runs each transaction of a client connection on whichever server session is
free, so what needs a session of its own (a run's lock, a LISTEN) cannot go through it: two
processes would both "hold" one run. These tests start a real PgBouncer in front of the
test server and show that the store refuses a proxy's address for its sessions (naming
``session_dsn``), that with ``session_dsn`` run locks exclude each other again, that the
whole conformance suite passes with the pool behind the proxy, and that a worker fleet
behind it does every run's effect once.

PgBouncer comes from Debian's ``pgbouncer`` package (``.ci/run`` installs it); without the
binary these tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from oncegraph import END, START, MessagesState, StateGraph, tool
from oncegraph.errors import ConfigError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.conformance import CheckpointerConformance, Reopen
from oncegraph.testing.provider import FakeProvider

pytestmark = pytest.mark.postgres

BINARY = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def bouncer_port(pg_admin: str) -> Iterator[int]:
    """A PgBouncer (transaction pooling) in front of the test server, for this module."""
    if BINARY is None:
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is not installed (apt-get install -y pgbouncer)")
        pytest.skip("pgbouncer is not installed (apt-get install -y pgbouncer)")
    server = conninfo_to_dict(pg_admin)
    user = str(server.get("user") or "postgres")
    host, server_port = server.get("host") or "127.0.0.1", server.get("port") or 5432
    port = _free_port()
    folder = Path(tempfile.mkdtemp(prefix="og_pgbouncer_"))
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={host} port={server_port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\nmax_client_conn = 400\ndefault_pool_size = 4\n"
        # each test's brand-new database gets server connections of its own: let idle ones
        # go at once, or they pile up (10 minutes by default) until the server has no
        # connection left for anyone ("too many clients already")
        "server_idle_timeout = 1\n"
        f"unix_socket_dir =\nlogfile = {folder / 'pgbouncer.log'}\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    argv = [BINARY, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        shutil.chown(folder, "nobody")
        for f in folder.iterdir():
            shutil.chown(f, "nobody")
        argv[1:1] = ["-u", "nobody"]
    with open(folder / "stderr.txt", "wb") as err_file:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err_file)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = (folder / "stderr.txt").read_text(errors="replace")
                    pytest.fail(f"pgbouncer did not start: {err}")
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def through(dsn: str, port: int) -> str:
    """``dsn`` with its host and port swapped for the proxy's."""
    return make_conninfo(dsn, host="127.0.0.1", port=port)


def echo_graph(store: Checkpointer) -> Any:
    g = StateGraph(MessagesState, name="echo")
    g.add_node("echo", lambda s: {"messages": [{"role": "assistant", "content": "hi"}]})
    g.add_edge(START, "echo")
    g.add_edge("echo", END)
    return g.compile(checkpointer=store)


# -- what the proxy breaks, and the fix named ----------------------------------------------


async def test_the_proxy_really_shares_sessions(bouncer_port: int, fresh_dsn: str) -> None:
    """The premise: two connections through the proxy can both take one session lock."""
    dsn = through(fresh_dsn, bouncer_port)
    take = "SELECT pg_try_advisory_lock(424242)"
    a = await psycopg.AsyncConnection.connect(dsn, autocommit=True, prepare_threshold=None)
    b = await psycopg.AsyncConnection.connect(dsn, autocommit=True, prepare_threshold=None)
    try:
        got_a = (await (await a.execute(take)).fetchone() or (False,))[0]
        got_b = (await (await b.execute(take)).fetchone() or (False,))[0]
        assert got_a and got_b, "both connections got the lock through the proxy"
    finally:
        await a.execute("SELECT pg_advisory_unlock_all()")
        await a.close()
        await b.close()


async def test_a_store_whose_sessions_would_go_through_the_proxy_is_refused(
    bouncer_port: int, fresh_dsn: str
) -> None:
    store = PgCheckpointer(through(fresh_dsn, bouncer_port), prepared_statements=False)
    try:
        app = echo_graph(store)
        with pytest.raises(ConfigError, match="session_dsn") as refused:
            await app.ainvoke({"messages": [{"role": "user", "content": "x"}]}, {"thread_id": "t"})
        assert "transaction-pooling proxy" in str(refused.value)
    finally:
        await store.aclose()


async def test_with_session_dsn_run_locks_exclude_each_other_again(
    bouncer_port: int, fresh_dsn: str
) -> None:
    proxied = through(fresh_dsn, bouncer_port)
    one = PgCheckpointer(proxied, prepared_statements=False, session_dsn=fresh_dsn)
    two = PgCheckpointer(proxied, prepared_statements=False, session_dsn=fresh_dsn)
    try:
        await one.setup()
        await two.setup()
        held = await one.lock_run("run-1")
        assert held is not None
        assert await two.lock_run("run-1") is None, "a second holder of one run"
        await held.release()
        again = await two.lock_run("run-1")
        assert again is not None
        await again.release()
    finally:
        await one.aclose()
        await two.aclose()


# -- the contract, with the pool behind the proxy -------------------------------------------


class TestPgBouncerConformance(CheckpointerConformance):
    @pytest.fixture
    async def checkpointer(self, bouncer_port: int, fresh_dsn: str) -> AsyncIterator[Checkpointer]:
        store = PgCheckpointer(
            through(fresh_dsn, bouncer_port), prepared_statements=False, session_dsn=fresh_dsn
        )
        await store.setup()
        yield store
        await store.aclose()

    @pytest.fixture
    async def reopen(self, bouncer_port: int, fresh_dsn: str) -> AsyncIterator[Reopen]:
        opened: list[PgCheckpointer] = []

        async def make() -> Checkpointer:
            store = PgCheckpointer(
                through(fresh_dsn, bouncer_port),
                prepared_statements=False,
                session_dsn=fresh_dsn,
            )
            await store.setup()
            opened.append(store)
            return store

        yield make
        for store in opened:
            await store.aclose()


# -- a worker fleet behind the proxy ---------------------------------------------------------

APP = '''
import os
from oncegraph import current_effect, tool
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import PgCheckpointer
from oncegraph.testing.provider import ProviderClient

client = ProviderClient(os.environ["BOUNCER_TEST_PROVIDER"])


@tool(effect="write", recipient="payments")
def charge(order_id: str, amount: float) -> dict:
    """Charge an order (idempotent at the provider through the effect key)."""
    done = client.charge(amount, "eur", order_id,
                         idempotency_key=current_effect().idempotency_key)
    return {"charge_id": done["id"]}


def ask(messages, tools):
    order = [m for m in messages if m["role"] == "user"][-1]["content"]
    return {"content": "", "tool_calls": [
        {"id": "call_1", "name": "charge", "args": {"order_id": order, "amount": 10.0}}]}


app = ReactAgent(
    model=ScriptedModel.turns(ask, "charged"), system_prompt="You charge orders.", tools=[charge],
).compile(checkpointer=PgCheckpointer(
    os.environ["BOUNCER_TEST_DSN"], prepared_statements=False,
    session_dsn=os.environ["BOUNCER_TEST_SESSION_DSN"]))
'''


def _agent(store: PgCheckpointer) -> Any:
    @tool(effect="write", recipient="payments", dedup="never called in this process")
    def charge(order_id: str, amount: float) -> dict[str, Any]:
        """Charge an order (idempotent at the provider through the effect key)."""
        raise AssertionError("the submitting process never runs the tool")

    return ReactAgent(
        model=ScriptedModel.turns("unused"),
        system_prompt="You charge orders.",
        tools=[charge],
    ).compile(checkpointer=store)


def test_two_workers_behind_the_proxy_do_each_effect_once(
    bouncer_port: int, fresh_dsn: str, tmp_path: Path
) -> None:
    n = 40
    proxied = through(fresh_dsn, bouncer_port)

    async def submit() -> None:
        store = PgCheckpointer(proxied, prepared_statements=False, session_dsn=fresh_dsn)
        try:
            app = _agent(store)
            for i in range(n):
                await app.asubmit(
                    {"messages": [{"role": "user", "content": f"o-{i}"}]}, {"thread_id": f"t{i}"}
                )
        finally:
            await store.aclose()

    asyncio.run(submit())
    (tmp_path / "bounced_app.py").write_text(APP)
    with FakeProvider() as provider:
        env = {
            **os.environ,
            "BOUNCER_TEST_DSN": proxied,
            "BOUNCER_TEST_SESSION_DSN": fresh_dsn,
            "BOUNCER_TEST_PROVIDER": provider.url,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        }
        argv = [sys.executable, "-m", "oncegraph", "worker", "bounced_app:app"]
        procs = []
        for k in (1, 2):
            with open(tmp_path / f"w{k}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        [*argv, "--owner", f"w{k}", "--concurrency", "4", "--poll", "0.1"],
                        cwd=tmp_path,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )

        def logs() -> str:
            return "\n".join(
                (tmp_path / f"w{k}.log").read_text(errors="replace")[-2000:] for k in (1, 2)
            )

        try:
            deadline = time.monotonic() + 120
            while True:
                with psycopg.connect(fresh_dsn, autocommit=True) as conn:
                    row = conn.execute(
                        "SELECT count(*) FROM oncegraph_runs WHERE status = 'completed'"
                    ).fetchone()
                if row and row[0] == n:
                    break
                assert all(p.poll() is None for p in procs), f"a worker exited:\n{logs()}"
                assert time.monotonic() < deadline, f"only {row} of {n} completed:\n{logs()}"
                time.sleep(0.1)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)
        assert provider.stats()["performed"] == n
        keys = [e["idempotency_key"] for e in provider.effects()]
        assert len(keys) == len(set(keys)) == n
