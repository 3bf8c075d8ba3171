"""The server takes over the runs a dead process left ``running``, on every store: at
start-up and then periodically, through the audited Continue (the audit log names the
server), obeying the ledger (a recorded charge is not made again), never a run a live
process holds, and never left ``running``."""

from __future__ import annotations

import time

import pytest
from shop import USER, VIEWER, Shop, auth

from conftest import client_for
from oncegraph import FaultPlan
from oncegraph.errors import _CrashSignal
from oncegraph.runtime.portal import run_sync
from oncegraph.server.hub import RunHub
from oncegraph.server.recovery import REASON, Recovery, server_actor
from oncegraph.storage.records import RunStatus


def crashed(shop: Shop, thread: str, nth: int = 1) -> str:
    """A run its process left ``running`` (a crash before its ``nth`` checkpoint)."""
    with pytest.raises(_CrashSignal):
        shop.app.invoke(
            USER, {"thread_id": thread, "fault_plan": FaultPlan("before_checkpoint", nth=nth)}
        )
    (run,) = shop.app.runs(thread_id=thread)
    assert run.status is RunStatus.RUNNING
    return run.run_id


def stopped(shop: Shop, run_id: str) -> RunStatus:
    """The run's status once it is no longer ``running`` (bounded: 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        status = shop.app.get_run(run_id).status
        if status is not RunStatus.RUNNING:
            return status
        assert time.monotonic() < deadline, f"run {run_id} was left running"
        time.sleep(0.05)


def test_runs_left_running_are_taken_over_at_start_up(kshop: Shop) -> None:
    before_any_step = crashed(kshop, "t-rec-1")
    after_the_charge = crashed(kshop, "t-rec-2", nth=3)  # the charge is made and recorded
    assert kshop.performed() == 1
    with client_for(kshop) as client:
        assert stopped(kshop, before_any_step) is RunStatus.COMPLETED
        assert stopped(kshop, after_the_charge) is RunStatus.COMPLETED
        for run_id in (before_any_step, after_the_charge):
            found = client.get(f"/api/runs/{run_id}/audit", headers=auth(VIEWER)).json()
            (record,) = found["audit"]
            assert (record["action"], record["actor"], record["reason"]) == (
                "continue",
                server_actor(),
                REASON,
            )
            assert record["details"]["before"] == "running"
    assert kshop.performed() == 2  # one charge per order: the recorded one is not redone


def test_a_run_left_running_while_the_server_is_up_is_taken_over_by_the_next_pass(
    kshop: Shop,
) -> None:
    with client_for(kshop, recover_every=0.2):
        run_id = crashed(kshop, "t-rec-later")
        assert stopped(kshop, run_id) is RunStatus.COMPLETED
    assert kshop.performed() == 1


def test_a_run_a_live_holder_has_is_never_taken(kshop: Shop) -> None:
    run_id = crashed(kshop, "t-rec-held")
    store = kshop.app.store
    lock = run_sync(store.lock_run(run_id), "lock")  # alive, and holding it
    assert lock is not None
    recovery = Recovery(RunHub(kshop.app), every=None)
    try:
        assert run_sync(recovery.run_once(), "recover") == []
        assert kshop.app.get_run(run_id).status is RunStatus.RUNNING
        assert kshop.performed() == 0
    finally:
        run_sync(lock.release(), "release")
    # its holder is gone: the next pass takes it
    assert run_sync(recovery.run_once(), "recover") == [run_id]
    assert stopped(kshop, run_id) is RunStatus.COMPLETED
    assert kshop.performed() == 1


def test_recovery_can_be_turned_off(kshop: Shop) -> None:
    run_id = crashed(kshop, "t-rec-off")
    with client_for(kshop, recover=False) as client:
        got = client.get(f"/api/runs/{run_id}", headers=auth(VIEWER))
        assert got.json()["run"]["status"] == "running"
    assert kshop.app.get_run(run_id).status is RunStatus.RUNNING
    with pytest.raises(ValueError, match="recover_every"):
        client_for(kshop, recover_every=0)
