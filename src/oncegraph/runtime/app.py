"""``CompiledGraph``: the runnable app. Four run paths over one driver, plus the
operator's read views (state, history, runs, effects)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import ConfigError, RunNotFoundError
from oncegraph.graph.spec import GraphSpec
from oncegraph.graph.view import GraphView
from oncegraph.ids import new_run_id
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.driver import Runner, open_interrupts
from oncegraph.runtime.engine import Head, empty_head
from oncegraph.runtime.faults import FaultPlan
from oncegraph.runtime.portal import iterate_sync, run_sync
from oncegraph.storage.protocols import Checkpointer, Pruner
from oncegraph.storage.records import (
    CheckpointRecord,
    EffectRecord,
    EffectStatus,
    PruneReport,
    RunRecord,
    RunStatus,
)

STREAM_MODES = frozenset({"values", "updates", "events"})
_HEAD_CACHE_SIZE = 1024
MASK = "***"


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    values: dict[str, Any]
    next: tuple[str, ...]
    config: dict[str, Any]
    metadata: Mapping[str, Any]
    created_at: float | None
    parent_config: dict[str, Any] | None
    run_id: str | None
    interrupts: tuple[dict[str, Any], ...] = ()


class CompiledGraph:
    def __init__(self, spec: GraphSpec, *, checkpointer: Checkpointer | None) -> None:
        self.spec = spec
        self.checkpointer = checkpointer
        self.fingerprint = spec.fingerprint()
        self._ready: set[int] = set()
        self._heads: OrderedDict[str, Head] = OrderedDict()
        self._fences: dict[str, int] = {}

    def get_graph(self, *, xray: bool | int = False) -> GraphView:
        """The graph's nodes and edges (``.draw_mermaid()`` draws them)."""
        return GraphView.of(self.spec)

    # -- plumbing used by the driver -------------------------------------------------------

    @property
    def store(self) -> Checkpointer:
        if self.checkpointer is None:
            raise ConfigError(
                "this graph was compiled without a checkpointer, so nothing is stored; "
                "compile(checkpointer=SqliteCheckpointer('runs.db')) to keep state"
            )
        return self.checkpointer

    def fence_for(self, run_id: str) -> int | None:
        return self._fences.get(run_id)

    def set_fence(self, run_id: str, token: int | None) -> None:
        """Workers: every write of ``run_id`` from this process carries ``token``."""
        if token is None:
            self._fences.pop(run_id, None)
        else:
            self._fences[run_id] = token

    def remember_head(self, head: Head) -> None:
        tid = head.checkpoint.thread_id
        self._heads[tid] = head
        self._heads.move_to_end(tid)
        while len(self._heads) > _HEAD_CACHE_SIZE:
            self._heads.popitem(last=False)

    async def load_head(self, store: Checkpointer, thread_id: str) -> Head:
        """The thread's head, materialized; the in-process copy is used when still current."""
        thread = await store.get_thread(thread_id)
        if thread is None or thread.head_checkpoint_id is None:
            return empty_head(self.spec, thread_id)
        cached = self._heads.get(thread_id)
        if cached is not None and cached.checkpoint.checkpoint_id == thread.head_checkpoint_id:
            return cached
        cp = await store.get_checkpoint(thread_id, thread.head_checkpoint_id)
        if cp is None:
            raise RunNotFoundError(f"thread {thread_id!r} points to a missing checkpoint")
        head = Head(cp, await self._materialize(cp, store))
        self.remember_head(head)
        return head

    async def _materialize(
        self, cp: CheckpointRecord, store: Checkpointer | None = None
    ) -> dict[str, Any]:
        store = store or self.store
        schema = self.spec.schema
        values = schema.initial()
        values.update(schema.decode_values(cp.values))
        for channel in schema.log_channels():
            end = cp.logs.get(channel, 0)
            entries = await store.read_log(cp.thread_id, channel, end) if end else []
            values[channel] = schema.channel(channel).fold(schema.decode_entries(channel, entries))
        return values

    async def _prepare_run(
        self, config: Mapping[str, Any] | None
    ) -> tuple[RunConfig, Checkpointer]:
        """Config and store for one run. Without a checkpointer every call gets a private
        in-memory store: the laws hold inside the call, nothing outlives it."""
        if self.checkpointer is not None:
            return await self._prepare(config), self.checkpointer
        from oncegraph.storage.memory import InMemoryCheckpointer

        cfg = RunConfig.parse(config)
        if cfg.thread_id is None:
            cfg = RunConfig.parse({**(config or {}), "thread_id": new_run_id()})
        store = InMemoryCheckpointer()
        await store.setup()
        return self._with_env_faults(cfg), store

    def _with_env_faults(self, cfg: RunConfig) -> RunConfig:
        if cfg.fault_plan is None:
            env_plan = FaultPlan.from_env()
            if env_plan is not None:
                return dataclasses.replace(cfg, fault_plan=env_plan)
        return cfg

    async def _prepare(self, config: Mapping[str, Any] | None) -> RunConfig:
        cfg = RunConfig.parse(config)
        if self.checkpointer is None:
            raise ConfigError(
                "this graph was compiled without a checkpointer, so nothing is stored; "
                "compile(checkpointer=SqliteCheckpointer('runs.db')) to keep state"
            )
        if cfg.thread_id is None:
            raise ConfigError(
                "this graph has a checkpointer, so every call needs a thread: pass "
                "config={'thread_id': '<conversation id>'}"
            )
        await self.setup()
        return self._with_env_faults(cfg)

    async def setup(self) -> None:
        store = self.store
        if id(store) not in self._ready:
            await store.setup()
            self._ready.add(id(store))

    # -- run paths -------------------------------------------------------------------------

    async def ainvoke(self, input: Any, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        cfg, store = await self._prepare_run(config)
        return await Runner(self, store, input, cfg, _ignore).execute()

    def invoke(self, input: Any, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return run_sync(self.ainvoke(input, config), "invoke")

    async def astream(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        stream_mode: str | Sequence[str] = "values",
    ) -> AsyncIterator[Any]:
        single = isinstance(stream_mode, str)
        modes = {stream_mode} if isinstance(stream_mode, str) else set(stream_mode)
        if not modes or not modes <= STREAM_MODES:
            raise ConfigError(
                f"stream_mode must be among {sorted(STREAM_MODES)}; got {stream_mode!r}"
            )
        cfg, store = await self._prepare_run(config)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        done = object()

        def emit(mode: str, payload: Any) -> None:
            if mode in modes:
                if mode == "values":
                    payload = dict(payload)
                queue.put_nowait(payload if single else (mode, payload))

        task = asyncio.ensure_future(Runner(self, store, input, cfg, emit).execute())
        task.add_done_callback(lambda _: queue.put_nowait(done))
        try:
            while True:
                item = await queue.get()
                if item is done:
                    task.result()
                    return
                yield item
        finally:
            if not task.done():
                task.cancel()
                try:
                    await task
                except BaseException:
                    pass

    def stream(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        stream_mode: str | Sequence[str] = "values",
    ) -> Iterator[Any]:
        return iterate_sync(self.astream(input, config, stream_mode=stream_mode), "stream")

    async def asubmit(self, input: Any, config: Mapping[str, Any]) -> RunRecord:
        """Enqueue a run for the workers (``oncegraph worker``); returns the queued run.

        A thread runs one run at a time: a run submitted while another is unfinished waits
        behind it instead of failing, and its input is kept in the run record.
        """
        from oncegraph.runtime.driver import input_json

        cfg = await self._prepare(config)
        assert cfg.thread_id is not None
        run = RunRecord(
            run_id=new_run_id(),
            thread_id=cfg.thread_id,
            status=RunStatus.QUEUED,
            workflow_name=self.spec.name,
            workflow_version=self.spec.version,
            state_schema_version=self.spec.state_schema_version,
            graph_fingerprint=self.fingerprint,
            launch_reason="submit",
            input=input_json(input, self.spec),
            config=cfg.to_json(),
        )
        await self.store.create_run(run)
        return run

    def submit(self, input: Any, config: Mapping[str, Any]) -> RunRecord:
        return run_sync(self.asubmit(input, config), "submit")

    # -- reading ---------------------------------------------------------------------------

    async def _snapshot(self, cp: CheckpointRecord) -> StateSnapshot:
        values = await self._materialize(cp)
        interrupts: tuple[dict[str, Any], ...] = ()
        writes = await self.store.get_task_writes(cp.thread_id, cp.checkpoint_id)
        interrupts = tuple(
            {"node": w.task, "index": w.idx, "value": w.value}
            for w in open_interrupts(writes).values()
        )
        return StateSnapshot(
            values=values,
            next=cp.next,
            config={"thread_id": cp.thread_id, "checkpoint_id": cp.checkpoint_id},
            metadata=dict(cp.metadata, step=cp.step),
            created_at=cp.created_at,
            parent_config=(
                {"thread_id": cp.thread_id, "checkpoint_id": cp.parent_checkpoint_id}
                if cp.parent_checkpoint_id
                else None
            ),
            run_id=cp.run_id,
            interrupts=interrupts,
        )

    async def aget_state(self, config: Mapping[str, Any]) -> StateSnapshot:
        cfg = await self._prepare(config)
        assert cfg.thread_id is not None
        wanted = (config or {}).get("checkpoint_id")
        cp = await self.store.get_checkpoint(cfg.thread_id, wanted)
        if cp is None:
            if wanted:
                raise RunNotFoundError(f"no checkpoint {wanted!r} on thread {cfg.thread_id!r}")
            head = empty_head(self.spec, cfg.thread_id)
            return StateSnapshot(
                head.values, (), {"thread_id": cfg.thread_id}, {}, None, None, None
            )
        return await self._snapshot(cp)

    def get_state(self, config: Mapping[str, Any]) -> StateSnapshot:
        return run_sync(self.aget_state(config), "get_state")

    async def aget_state_history(
        self, config: Mapping[str, Any], *, limit: int | None = None
    ) -> list[StateSnapshot]:
        cfg = await self._prepare(config)
        assert cfg.thread_id is not None
        cps = await self.store.list_checkpoints(
            cfg.thread_id, run_id=(config or {}).get("run_id"), limit=limit
        )
        return [await self._snapshot(cp) for cp in cps]

    def get_state_history(
        self, config: Mapping[str, Any], *, limit: int | None = None
    ) -> list[StateSnapshot]:
        return run_sync(self.aget_state_history(config, limit=limit), "get_state_history")

    async def aruns(
        self,
        *,
        thread_id: str | None = None,
        status: str | Sequence[str] | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        await self.setup()
        statuses = None
        if status is not None:
            statuses = [RunStatus(s) for s in ([status] if isinstance(status, str) else status)]
        return await self.store.list_runs(thread_id=thread_id, statuses=statuses, limit=limit)

    def runs(
        self,
        *,
        thread_id: str | None = None,
        status: str | Sequence[str] | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        return run_sync(self.aruns(thread_id=thread_id, status=status, limit=limit), "runs")

    async def aget_run(self, run_id: str) -> RunRecord:
        await self.setup()
        run = await self.store.get_run(run_id)
        if run is None:
            raise RunNotFoundError(f"no run {run_id!r}; list runs with app.runs(thread_id=...)")
        return run

    def get_run(self, run_id: str) -> RunRecord:
        return run_sync(self.aget_run(run_id), "get_run")

    async def aeffects(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        status: str | Sequence[str] | None = None,
    ) -> list[EffectRecord]:
        if run_id is None and thread_id is None:
            raise ConfigError("effects() needs run_id=... or thread_id=...")
        await self.setup()
        statuses = None
        if status is not None:
            statuses = [EffectStatus(s) for s in ([status] if isinstance(status, str) else status)]
        records = await self.store.list_effects(
            run_id=run_id, thread_id=thread_id, statuses=statuses
        )
        masks = self._masks()
        return [_mask(r, masks.get(r.effect_type, ())) for r in records]

    def effects(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        status: str | Sequence[str] | None = None,
    ) -> list[EffectRecord]:
        return run_sync(self.aeffects(run_id=run_id, thread_id=thread_id, status=status), "effects")

    def _masks(self) -> dict[str, tuple[str, ...]]:
        from oncegraph.tools.node import ToolNode

        out: dict[str, tuple[str, ...]] = {}
        for node in self.spec.nodes.values():
            if isinstance(node.fn, ToolNode):
                for t in node.fn.tools.values():
                    if t.mask:
                        out[t.name] = t.mask
        return out

    async def aabandon(self, config: Mapping[str, Any], *, reason: str = "abandoned") -> RunRecord:
        """Give up on the thread's unfinished run; new input may follow. Nothing is deleted."""
        cfg = await self._prepare(config)
        assert cfg.thread_id is not None
        runs = await self.store.list_runs(thread_id=cfg.thread_id, limit=1)
        if not runs or runs[0].status in (RunStatus.COMPLETED, RunStatus.ABANDONED):
            raise RunNotFoundError(f"thread {cfg.thread_id!r} has no unfinished run to abandon")
        await self.store.update_run(runs[0].run_id, status=RunStatus.ABANDONED, error=reason)
        return await self.aget_run(runs[0].run_id)

    def abandon(self, config: Mapping[str, Any], *, reason: str = "abandoned") -> RunRecord:
        return run_sync(self.aabandon(config, reason=reason), "abandon")

    async def aprune(
        self,
        *,
        keep_checkpoints: int = 1,
        effects_older_than: float | None = None,
        thread_id: str | None = None,
    ) -> PruneReport:
        """Retention: delete checkpoints and finished effect records no open run needs.

        Delegates to the store's :meth:`~oncegraph.storage.protocols.Pruner.prune` (the
        head, the newest ``keep_checkpoints`` and unfinished runs' checkpoints stay; log
        entries are never deleted); ``effects_older_than`` is in seconds.
        """
        store = self.store
        if not isinstance(store, Pruner):
            raise ConfigError(
                f"{type(store).__name__} cannot prune (it has no prune() method); use "
                "InMemoryCheckpointer, SqliteCheckpointer or PgCheckpointer, or add "
                "prune() (oncegraph.storage.protocols.Pruner) to your store"
            )
        await self.setup()
        return await store.prune(
            keep_checkpoints=keep_checkpoints,
            effects_older_than=effects_older_than,
            thread_id=thread_id,
        )

    def prune(
        self,
        *,
        keep_checkpoints: int = 1,
        effects_older_than: float | None = None,
        thread_id: str | None = None,
    ) -> PruneReport:
        return run_sync(
            self.aprune(
                keep_checkpoints=keep_checkpoints,
                effects_older_than=effects_older_than,
                thread_id=thread_id,
            ),
            "prune",
        )


def _ignore(mode: str, payload: Any) -> None:
    return None


def _mask_value(value: Any, fields: tuple[str, ...]) -> Any:
    if isinstance(value, Mapping):
        return {k: (MASK if k in fields else _mask_value(v, fields)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_value(v, fields) for v in value]
    return value


def _mask(record: EffectRecord, fields: tuple[str, ...]) -> EffectRecord:
    if not fields:
        return record
    return record.replace(
        request=_mask_value(record.request, fields), result=_mask_value(record.result, fields)
    )
