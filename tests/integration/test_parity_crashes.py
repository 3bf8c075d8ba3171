"""SIGKILL inside a subgraph's effect and inside a ``Send`` branch: a fresh process
resumes the run, and the provider (a separate process that outlives both) has exactly
one effect per charge, on SQLite and on PostgreSQL (a fresh database per test).

The worker (``_parity_crash_worker.py``) dies at ``in_tool``: the provider has done the
work, the ledger holds only the intent (``pending``). On resume a ``write`` effect is
sent again with the SAME idempotency key (the provider answers from its key store); an
``irreversible`` one is reconciled (``find_by_key``) and its body never runs again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncegraph.testing.crash import CompletedRun, run_in_subprocess
from oncegraph.testing.provider import ProviderClient, serve_forever_in_subprocess

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("_parity_crash_worker.py")


@pytest.fixture
def world(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    dsn = request.getfixturevalue("fresh_dsn") if backend == "postgres" else None
    with serve_forever_in_subprocess(tmp_path / "provider.port") as provider:
        yield {
            "store": ["--pg", dsn] if dsn else ["--db", str(tmp_path / "runs.db")],
            "provider": provider.url,
            "calls": tmp_path / "calls.jsonl",
        }


def _worker(world: dict[str, Any], mode: str, shape: str, kind: str, crash: bool) -> CompletedRun:
    args = [
        *world["store"],
        "--provider",
        world["provider"],
        "--calls-log",
        str(world["calls"]),
        "--shape",
        shape,
        "--effect",
        kind,
        "--mode",
        mode,
    ]
    return run_in_subprocess(WORKER, args, timeout=300, crash_at="in_tool" if crash else None)


def _pg(*values: object) -> Any:
    return pytest.param("postgres", *values, marks=pytest.mark.postgres)


CASES = [
    *[
        ("sqlite", shape, kind)
        for shape in ("subgraph", "send")
        for kind in ("write", "irreversible")
    ],
    _pg("subgraph", "irreversible"),
    _pg("send", "write"),
]


@pytest.mark.parametrize(("backend", "shape", "kind"), CASES)
def test_sigkill_inside_a_nested_effect_resumes_with_one_provider_effect_each(
    world: dict[str, Any], shape: str, kind: str
) -> None:
    crashed = _worker(world, "run", shape, kind, crash=True)
    assert crashed.killed, crashed.describe()
    client = ProviderClient(world["provider"])
    orders = ["1042"] if shape == "subgraph" else ["1042", "1043"]
    # the charge in flight when the process died (Send branches run side by side, so
    # the other may have charged too)
    assert 1 <= len(client.effects()) <= len(orders)

    resumed = _worker(world, "resume", shape, kind, crash=False)
    assert resumed.returncode == 0, resumed.describe()
    report = resumed.json()
    assert report["outcome"] == "completed", report
    assert report["run_status"] == "completed"
    effects = client.effects()
    per_key = Counter(e["idempotency_key"] for e in effects)
    assert sorted(e["body"]["order_id"] for e in effects) == orders
    assert set(per_key.values()) == {1}, effects  # one provider effect per charge
    assert [c.split("=")[0] for c in report["charged"]] == orders
    assert {c.split("=")[1] for c in report["charged"]} == {e["id"] for e in effects}
    calls = [json.loads(line) for line in world["calls"].read_text().splitlines()]
    bodies = Counter(c["key"] for c in calls)
    assert set(bodies) == set(per_key)  # every call used its effect's key
    stats = client.stats()
    assert stats["performed"] == len(orders)
    # (a Send sibling may have been killed after logging its call but before its request
    # left, so its body runs again on resume: that one was never delivered)
    assert set(bodies.values()) <= {1, 2}
    if kind == "irreversible":  # reconciled: a delivered charge is never sent again
        assert stats["replayed"] == 0
        if shape == "subgraph":
            assert list(bodies.values()) == [1]
    else:  # the charge killed in flight was sent again with the SAME key, answered from
        # the provider's key store
        assert stats["replayed"] >= 1
