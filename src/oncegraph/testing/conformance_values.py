"""Contract tests of stored values: JSON round trips and normalization, SQL
metacharacters and NUL as data, and values that never alias what is stored (a part of
:class:`~oncegraph.testing.conformance.CheckpointerConformance`)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from oncegraph.errors import InvalidUpdateError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import LogEntry, RunStatus, StepCommit, TaskWrite, WriteKind
from oncegraph.testing.conformance_kit import (
    HOSTILE,
    NESTED,
    PruneState,
    make_checkpoint,
    make_effect,
    make_run,
    new_id,
    snapshot,
    step,
)


class ValueConformance:
    """See the module docstring."""

    # -- values -----------------------------------------------------------------------

    async def test_json_round_trip(self, checkpointer: Checkpointer) -> None:
        tid, rid = new_id("thread"), new_id("run")
        cp = make_checkpoint(
            tid, rid, 1, values={"state": NESTED, "list": [NESTED]}, metadata={"m": NESTED}
        )
        run = make_run(tid, rid, input=NESTED, config={"c": NESTED})
        await checkpointer.commit(
            step(
                cp,
                new_run=run,
                log=[LogEntry("messages", 0, NESTED), LogEntry("messages", 1, None)],
            )
        )
        await checkpointer.put_task_write(
            TaskWrite(tid, cp.checkpoint_id, "t", WriteKind.WRITES, 0, NESTED)
        )
        effect = make_effect(rid, tid, request=NESTED, result=[NESTED])
        await checkpointer.begin_effect(effect)
        got_cp = await checkpointer.get_checkpoint(tid)
        assert got_cp is not None
        assert got_cp.values == {"state": NESTED, "list": [NESTED]}
        assert got_cp.metadata == {"m": NESTED}
        got_run = await checkpointer.get_run(rid)
        assert got_run is not None
        assert (got_run.input, got_run.config) == (NESTED, {"c": NESTED})
        assert await checkpointer.read_log(tid, "messages", 2) == [NESTED, None]
        (write,) = await checkpointer.get_task_writes(tid, cp.checkpoint_id)
        assert write.value == NESTED
        got_effect = await checkpointer.get_effect(effect.effect_id)
        assert got_effect is not None
        assert (got_effect.request, got_effect.result) == (NESTED, [NESTED])
        big = got_cp.values["state"]["big"]
        assert big == 2**63 - 1 and isinstance(big, int)
        assert isinstance(got_cp.values["state"]["float"], float)

    async def test_sql_metacharacters_are_data(self, checkpointer: Checkpointer) -> None:
        # Quotes, backslashes, placeholders, statement separators and comments in every
        # text a step writes come back unchanged, and the step still commits as a whole.
        tid, rid = new_id("thread") + "'; -- %s $1", new_id("run")
        cp1 = make_checkpoint(tid, rid, 1)
        first = StepCommit(tid, 0, cp1, new_run=make_run(tid, rid))
        await checkpointer.commit(first)
        cp2 = make_checkpoint(
            tid, rid, 2, parent=cp1.checkpoint_id, values={"v": HOSTILE}, metadata={HOSTILE: 1}
        )
        effect = make_effect(rid, tid, request={"q": HOSTILE}, result=HOSTILE)
        await checkpointer.commit(
            step(
                cp2,
                log=[LogEntry("messages", 0, HOSTILE)],
                effects=[effect],
                run_status=RunStatus.FAILED,
                run_error=HOSTILE,
            )
        )
        got = await checkpointer.get_checkpoint(tid)
        assert got is not None
        assert (got.values, got.metadata) == ({"v": HOSTILE}, {HOSTILE: 1})
        assert await checkpointer.read_log(tid, "messages", 1) == [HOSTILE]
        run = await checkpointer.get_run(rid)
        assert run is not None and (run.status, run.error) == (RunStatus.FAILED, HOSTILE)
        saved = await checkpointer.get_effect(effect.effect_id)
        assert saved is not None and (saved.request, saved.result) == ({"q": HOSTILE}, HOSTILE)
        thread = await checkpointer.get_thread(tid)
        assert thread is not None and thread.version == 2

    async def test_nul_in_free_text_is_kept_visible(self, checkpointer: Checkpointer) -> None:
        # PostgreSQL text cannot hold NUL: every store keeps such descriptions as "\\x00"
        tid, rid = new_id("thread"), new_id("run")
        run = make_run(tid, rid, error="boom\x00")
        await checkpointer.create_run(run)
        effect = make_effect(rid, tid, error="bad\x00byte", provider_reference="ref\x00")
        effect = effect.replace(recipient="a\x00b")
        await checkpointer.begin_effect(effect)
        created = await checkpointer.get_run(rid)
        assert created is not None and created.error == "boom\\x00"
        await checkpointer.update_run(rid, status=RunStatus.FAILED, error="update\x00d")
        got = await checkpointer.get_effect(effect.effect_id)
        assert got is not None
        assert (got.error, got.recipient, got.provider_reference) == (
            "bad\\x00byte",
            "a\\x00b",
            "ref\\x00",
        )
        stored = await checkpointer.get_run(rid)
        assert stored is not None and stored.error == "update\\x00d"
        # and through a step commit
        cp = make_checkpoint(tid, new_id("run"), 1)
        step = StepCommit(
            tid,
            0,
            cp,
            new_run=make_run(tid, cp.run_id),
            run_status=RunStatus.FAILED,
            run_error="step\x00",
        )
        await checkpointer.commit(step)
        committed = await checkpointer.get_run(cp.run_id)
        assert committed is not None and committed.error == "step\\x00"

    async def test_app_records_a_failure_whose_message_holds_nul(
        self, checkpointer: Checkpointer
    ) -> None:
        from oncegraph import END, START, StateGraph

        def fails(state: PruneState) -> dict[str, Any]:
            raise ValueError("bad\x00byte")

        g = StateGraph(PruneState)
        g.add_node("fails", fails)
        g.add_edge(START, "fails")
        g.add_edge("fails", END)
        app = g.compile(checkpointer=checkpointer)
        tid = new_id("thread")
        with pytest.raises(ValueError, match="bad"):  # the node's own error, as in LangGraph
            await app.ainvoke({"log": ["x\x00y"]}, {"thread_id": tid})
        [run] = await checkpointer.list_runs(thread_id=tid)
        assert run.status is RunStatus.FAILED
        assert run.error is not None and run.error.endswith("ValueError: bad\\x00byte")

    async def test_json_normalizes_like_json(self, checkpointer: Checkpointer) -> None:
        # state arrives encoded by its schema: tuples come back as lists on every backend
        # alike, and what JSON would silently change (int keys, datetimes, sets) is
        # refused naming the field, with nothing written
        tid, rid = new_id("thread"), new_id("run")
        cp = make_checkpoint(tid, rid, 1, values={"pair": (1, 2), "keys": {"1": "one"}})
        await checkpointer.commit(step(cp, new_run=make_run(tid, rid)))
        got = await checkpointer.get_checkpoint(tid)
        assert got is not None
        assert got.values == {"pair": [1, 2], "keys": {"1": "one"}}
        before = await snapshot(checkpointer, tid, [rid])
        for value in ({1: "one"}, datetime.datetime(2024, 1, 1), {"a"}):
            bad = make_checkpoint(tid, rid, 2, values={"ok": 1, "field": value})
            with pytest.raises(InvalidUpdateError, match="state field 'field'"):
                await checkpointer.commit(step(bad))
            with pytest.raises(InvalidUpdateError, match="state field 'messages'"):
                await checkpointer.commit(
                    StepCommit(
                        thread_id=tid,
                        expected_version=1,
                        checkpoint=make_checkpoint(tid, rid, 2),
                        log=[LogEntry("messages", 0, {"at": value})],
                    )
                )
        assert await snapshot(checkpointer, tid, [rid]) == before

    async def test_values_are_not_aliases(self, checkpointer: Checkpointer) -> None:
        tid, rid = new_id("thread"), new_id("run")
        values: dict[str, Any] = {"items": [1, 2], "inner": {"k": "v"}}
        log_value: dict[str, Any] = {"content": "hi"}
        cp = make_checkpoint(tid, rid, 1, values=values)
        await checkpointer.commit(
            step(
                cp,
                new_run=make_run(tid, rid, config={"a": [1]}),
                log=[LogEntry("messages", 0, log_value)],
            )
        )
        result: dict[str, Any] = {"r": [1]}
        effect = make_effect(rid, tid, result=result)
        await checkpointer.begin_effect(effect)
        # mutate what we passed in
        values["items"].append(3)
        values["inner"]["k"] = "changed"
        log_value["content"] = "changed"
        result["r"].append(2)
        # mutate what we got back
        got = await checkpointer.get_checkpoint(tid)
        assert got is not None
        got.values["items"].append(99)
        got.metadata["x"] = 1  # type: ignore[index]
        (entry,) = await checkpointer.read_log(tid, "messages", 1)
        entry["content"] = "mutated"
        got_run = await checkpointer.get_run(rid)
        assert got_run is not None
        got_run.config["a"].append(2)
        got_effect = await checkpointer.get_effect(effect.effect_id)
        assert got_effect is not None
        got_effect.result["r"].append(3)
        stored, _ = await checkpointer.begin_effect(effect)
        stored.result["r"].append(4)
        # the store still holds the original values
        again = await checkpointer.get_checkpoint(tid)
        assert again is not None
        assert again.values == {"items": [1, 2], "inner": {"k": "v"}}
        assert again.metadata == {"source": "loop"}
        assert await checkpointer.read_log(tid, "messages", 1) == [{"content": "hi"}]
        run_again = await checkpointer.get_run(rid)
        assert run_again is not None and run_again.config == {"a": [1]}
        effect_again = await checkpointer.get_effect(effect.effect_id)
        assert effect_again is not None and effect_again.result == {"r": [1]}


__all__ = ["ValueConformance"]
