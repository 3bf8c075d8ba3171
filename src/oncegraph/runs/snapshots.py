"""State snapshots in LangGraph's shape, for the compiled app's ``get_state`` and
``get_state_history``.

The run service's snapshot (:class:`~oncegraph.runs.views.StateSnapshot`) is turned
into what LangGraph code reads:

* ``config`` / ``parent_config``: ``{"configurable": {"thread_id", "checkpoint_ns",
  "checkpoint_id"}}`` (the flat ``thread_id`` / ``checkpoint_id`` keys stay too), so a
  snapshot's config can be passed back to ``get_state`` or ``invoke``;
* ``interrupts``: :class:`~oncegraph.runtime.interrupt.Interrupt` objects (a static
  breakpoint is not a question and is not listed);
* ``tasks``: one :class:`PregelTask` per task of the next step (pulled nodes, then
  sends), with the interrupt it asked last (answered too: a past checkpoint shows the
  question of its step; the snapshot's ``interrupts`` lists only those still open),
  the writes of a sibling that already finished, or in the history of a step that went
  on, of each task (``result``), and for a subgraph task
  its own snapshot (``state``) when asked for with ``subgraphs=True``;
* history: each run's input is shown as LangGraph shows it, as a checkpoint of its own
  before the input was applied (``next == ("__start__",)``, ``metadata["source"] ==
  "input"``), with the id ``<input checkpoint id>.input``; the stored input checkpoint
  (the input applied) is then the loop's first, ``metadata["source"] == "loop"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from oncegraph.graph.constants import PULL, START, push_path
from oncegraph.graph.spec import GraphSpec
from oncegraph.runs.views import StateSnapshot
from oncegraph.runtime.engine import GIVEN, decode_result, is_breakpoint, with_finished
from oncegraph.runtime.interrupt import Interrupt
from oncegraph.runtime.sends import decode_send
from oncegraph.runtime.stepevents import INPUT_SUFFIX, lg_metadata, task_id
from oncegraph.runtime.updates import written
from oncegraph.state.channels import public
from oncegraph.storage.records import TaskWrite, WriteKind


class PregelTask(NamedTuple):
    """A task of the next step, as LangGraph's ``StateSnapshot.tasks`` lists it."""

    id: str
    name: str
    path: tuple[Any, ...]
    error: Exception | str | None = None  # from a stored step: the error's repr
    interrupts: tuple[Interrupt, ...] = ()
    state: Any = None  # a subgraph's StateSnapshot (subgraphs=True), or its config
    result: Any = None


class SnapshotConfig(dict[str, Any]):
    """A checkpoint's config as LangGraph gives it, ``{"configurable": {"thread_id",
    "checkpoint_ns", "checkpoint_id"}}`` (equal to LangGraph's); the flat keys oncegraph
    always gave (``config["checkpoint_id"]``, ``config.get("thread_id")``) still read,
    from ``configurable``."""

    def __missing__(self, key: str) -> Any:
        conf = dict.get(self, "configurable")
        if isinstance(conf, Mapping) and key in conf:
            return conf[key]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


def lg_config(
    thread_id: str,
    checkpoint_id: str | None,
    ns: str = "",
    parents: Mapping[str, str] | None = None,
) -> SnapshotConfig:
    """A checkpoint's config; a subgraph's (``parents``: the checkpoint id of each graph
    above it, by namespace) also maps every namespace down to its own to its checkpoint
    (``checkpoint_map``), as LangGraph's does."""
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
        if parents:
            conf["checkpoint_map"] = {**parents, ns: checkpoint_id}
    return SnapshotConfig(configurable=conf)


def iso_time(created_at: float | str | None) -> str | None:
    """A checkpoint's time as LangGraph gives it (``ts``): ISO 8601, UTC."""
    if created_at is None or isinstance(created_at, str):
        return created_at
    return datetime.fromtimestamp(created_at, UTC).isoformat()


def timestamp(created_at: float | str | None) -> float | None:
    """A snapshot's ``created_at`` (ISO 8601 or seconds) as seconds since the epoch."""
    if created_at is None or isinstance(created_at, int | float):
        return created_at
    return datetime.fromisoformat(created_at).timestamp()


def task_keys(spec: GraphSpec, snap: StateSnapshot) -> list[tuple[str, str, Any]]:
    """``(key, node, path)`` of each task of the step after ``snap``, in LangGraph's order:
    the ``Send`` tasks first, then the pulled nodes."""
    sends = snap.metadata.get("sends") or ()
    pulled = snap.next[: len(snap.next) - len(sends)]
    out: list[tuple[str, str, Any]] = []
    for i, stored in enumerate(sends):
        send = decode_send(spec, stored)
        out.append((f"{send.node}:{i}", send.node, push_path(i)))
    out.extend((n, n, (PULL, n)) for n in pulled)
    return out


def shape(
    spec: GraphSpec,
    snap: StateSnapshot,
    *,
    thread_id: str,
    writes: Sequence[TaskWrite],
    states: Mapping[str, Any] | None = None,
    ns: str = "",
    parents: Mapping[str, str] | None = None,
    done: Mapping[str, Any] | None = None,
    split: bool = False,
) -> StateSnapshot:
    """``snap`` in LangGraph's shape (see the module docstring). ``writes`` are the task
    writes of its checkpoint; ``done`` what the tasks of a step that went on from it
    wrote, by task key (:mod:`oncegraph.runtime.stepresults`); ``states`` the subgraph
    snapshots (or configs) by task;
    ``parents``, for a subgraph's snapshot, the checkpoint id of each graph above it by
    namespace (``metadata["parents"]``, and the configs' ``checkpoint_map``);
    ``split``: a subgraph's input checkpoint comes after LangGraph's input checkpoint,
    as a graph's own does (its history lists both)."""
    cp_id = snap.config.get("checkpoint_id")
    interrupts = tuple(
        Interrupt.of(cp_id or "", i["node"], i["index"], i["value"])
        for i in snap.interrupts
        if isinstance(i, Mapping) and not is_breakpoint(i.get("node", ""), i.get("value"))
    )
    asked: dict[str, Interrupt] = {}  # each task's last question, answered or not
    for w in writes:
        question = w.kind == WriteKind.INTERRUPT and not is_breakpoint(w.task, w.value)
        if question and (w.task not in asked or asked[w.task].index < w.idx):
            asked[w.task] = Interrupt.of(cp_id or "", w.task, w.idx, w.value)
    finished = {w.task: w for w in writes if w.kind == WriteKind.WRITES}
    errors = {
        w.task: w.value
        for w in writes
        if w.kind == WriteKind.ERROR and w.idx == 0 and w.task not in finished
    }
    tasks = []
    for key, node, path in task_keys(spec, snap):
        result = (done or {}).get(key)
        if key in finished:
            result = written(decode_result(spec, key, node, finished[key].value))
        tasks.append(
            PregelTask(
                id=task_id(cp_id or "", key),
                name=node,
                path=path,
                error=errors.get(key),
                interrupts=(asked[key],) if key in asked else (),
                state=(states or {}).get(key),
                result=result,
            )
        )
    parent = snap.parent_config.get("checkpoint_id") if snap.parent_config else None
    source = str(snap.metadata.get("source", "loop"))
    if source == "input" and cp_id and (split or not ns):
        parent = cp_id + INPUT_SUFFIX  # LangGraph's input checkpoint comes before it
        source = "loop"  # ...and this one, the input applied, is the loop's first
    forked = snap.metadata.get("forked_from")
    if source == "fork" and isinstance(forked, Mapping) and forked.get("entry"):
        parent = str(forked["entry"])  # a copy of an input checkpoint (runs/forks.py)
    step = int(snap.metadata.get("step", -1)) + 1
    return snap._replace(
        metadata={**lg_metadata(snap.metadata, step, source), "parents": dict(parents or {})},
        created_at=iso_time(snap.created_at),
        values=public(with_given(spec, snap.values, writes)),
        config=lg_config(thread_id, cp_id, ns, parents),
        parent_config=lg_config(thread_id, parent, ns, parents) if parent else None,
        interrupts=interrupts,
        tasks=tuple(tasks),
    )


def with_given(
    spec: GraphSpec, values: Mapping[str, Any], writes: Sequence[TaskWrite]
) -> Mapping[str, Any]:
    """``values`` with the updates answers brought (``Command(resume=..., update=...)``)
    applied, as LangGraph shows its checkpoint's input writes: the step that uses them
    commits them; until it does, the state shows them all the same."""
    given = [
        decode_result(spec, GIVEN, GIVEN, w.value)
        for w in writes
        if w.kind == WriteKind.WRITES and w.task == GIVEN
    ]
    return with_finished(spec, values, given) if given else values


def input_snapshot(
    loop_snap: StateSnapshot,
    *,
    thread_id: str,
    before: dict[str, Any],
    before_id: str | None,
    update: Mapping[str, Any],
    ns: str = "",
    parents: Mapping[str, str] | None = None,
) -> StateSnapshot:
    """LangGraph's input checkpoint of a run: the state ``before`` the run's input
    ``update``, about to run ``__start__``; ``loop_snap`` is the run's input checkpoint
    as oncegraph stores it (input applied); ``parents`` as for :func:`shape`."""
    cp_id = str(loop_snap.config.get("checkpoint_id", "")) + INPUT_SUFFIX
    step = int(loop_snap.metadata.get("step", -1))
    return StateSnapshot(
        values=public(before),
        next=(START,),
        config=lg_config(thread_id, cp_id, ns, parents),
        metadata={"source": "input", "step": step, "parents": dict(parents or {})},
        created_at=iso_time(loop_snap.created_at),
        parent_config=lg_config(thread_id, before_id, ns, parents) if before_id else None,
        run_id=loop_snap.run_id,
        interrupts=(),
        tasks=(
            PregelTask(
                task_id(cp_id, START),
                START,
                (PULL, START),
                result=public(dict(update)) if update else None,  # the input, as it wrote
            ),
        ),
    )


__all__ = [
    "INPUT_SUFFIX",
    "PregelTask",
    "SnapshotConfig",
    "input_snapshot",
    "iso_time",
    "lg_config",
    "lg_metadata",
    "shape",
    "task_keys",
    "timestamp",
]
