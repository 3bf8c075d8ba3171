"""The functional API (``oncegraph.func``): LangGraph's semantics, and every ``@task``
call a recorded step under the ledger, on every backend and every run path."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel
from tests.conftest import run_async

from oncegraph import END, START, Command, StateGraph, current_effect, interrupt
from oncegraph.errors import ConfigError
from oncegraph.func import entrypoint, task
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectClass, EffectStatus

PATHS = ("invoke", "ainvoke", "stream", "astream")


class Quote(BaseModel):
    price: int


def drive(flow: Any, given: Any, config: dict[str, Any] | None, path: str) -> Any:
    """The answer of ``flow`` on ``path``: the return value, or ``{"__interrupt__": ...}``
    (a stream's answer is the entrypoint's update, or the interrupt's)."""
    if path == "invoke":
        return flow.invoke(given, config)
    if path == "ainvoke":
        return run_async(flow.ainvoke(given, config))

    def fold(chunks: list[Any]) -> Any:
        answer: Any = None
        for chunk in chunks:
            if "__interrupt__" in chunk:
                answer = {"__interrupt__": list(chunk["__interrupt__"])}
            elif flow.name in chunk:
                answer = chunk[flow.name]
        return answer

    if path == "stream":
        return fold(list(flow.stream(given, config)))

    async def collect() -> list[Any]:
        return [c async for c in flow.astream(given, config)]

    return fold(run_async(collect()))


def cfg(thread: str = "t1") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


# -- LangGraph's semantics ----------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_tasks_futures_previous_and_final(checkpointer: Checkpointer, path: str) -> None:
    @task
    def double(x: int) -> int:
        return 2 * x

    @task
    async def add_one(x: int) -> int:
        return x + 1

    @entrypoint(checkpointer=checkpointer)
    def flow(x: int, *, previous: Any = None) -> entrypoint.final[dict[str, Any], int]:
        futures = [double(x), double(x + 1)]  # started at once, gathered in order
        both = [f.result() for f in futures]
        bumped = add_one(both[1]).result()
        return entrypoint.final(
            value={"both": both, "bumped": bumped, "previous": previous}, save=x
        )

    assert drive(flow, 1, cfg(), path) == {"both": [2, 4], "bumped": 5, "previous": None}
    assert drive(flow, 7, cfg(), path) == {"both": [14, 16], "bumped": 17, "previous": 1}
    assert flow.get_state(cfg()).values == {"both": [14, 16], "bumped": 17, "previous": 1}
    assert drive(flow, 3, cfg("other"), path)["previous"] is None  # previous is per thread


@pytest.mark.parametrize("path", PATHS)
def test_async_entrypoint_awaits_tasks(checkpointer: Checkpointer, path: str) -> None:
    @task
    async def slow_square(x: int) -> int:
        await asyncio.sleep(0)
        return x * x

    @task
    def sync_neg(x: int) -> int:  # a sync task from an async entrypoint: in a thread
        return -x

    @entrypoint(checkpointer=checkpointer)
    async def flow(xs: list[int]) -> list[int]:
        squares = await asyncio.gather(*(slow_square(x) for x in xs))
        return [await sync_neg(s) for s in squares]

    assert drive(flow, [1, 2, 3], cfg(), path) == [-1, -4, -9]


@pytest.mark.parametrize("path", PATHS)
def test_a_finished_task_is_not_run_again_on_resume(checkpointer: Checkpointer, path: str) -> None:
    ran: list[str] = []

    @task
    def compose(topic: str) -> str:
        ran.append(topic)
        return f"An essay about {topic}"

    @entrypoint(checkpointer=checkpointer)
    def review(topic: str) -> dict[str, Any]:
        essay = compose(topic).result()
        verdict = interrupt({"question": "review?", "essay": essay})
        return {"essay": essay, "review": verdict}

    paused = drive(review, "cats", cfg(), path)
    (question,) = paused["__interrupt__"]
    assert question.value == {"question": "review?", "essay": "An essay about cats"}
    done = drive(review, Command(resume="great"), cfg(), path)
    assert done == {"essay": "An essay about cats", "review": "great"}
    assert ran == ["cats"]  # served from its record on resume


def test_interrupt_inside_a_task_then_one_in_the_entrypoint(checkpointer: Checkpointer) -> None:
    """Answers line up with their questions: a task served from its record keeps the
    count of the answers it consumed."""
    ran: list[int] = []

    @task
    def ask(n: int) -> str:
        ran.append(n)
        return f"{n}:{interrupt(f'task question {n}')}"

    @entrypoint(checkpointer=checkpointer)
    def flow(n: int) -> list[str]:
        first = ask(n).result()
        second = interrupt("entrypoint question")
        return [first, second]

    assert flow.invoke(1, cfg())["__interrupt__"][0].value == "task question 1"
    paused = flow.invoke(Command(resume="a"), cfg())
    assert paused["__interrupt__"][0].value == "entrypoint question"
    assert flow.invoke(Command(resume="b"), cfg()) == ["1:a", "b"]
    assert ran == [1, 1]  # asked, then answered; not run a third time


def test_stream_modes(checkpointer: Checkpointer) -> None:
    @task
    def shout(word: str) -> str:
        return word.upper()

    @entrypoint(checkpointer=checkpointer)
    def flow(word: str, *, writer: Callable[[Any], None]) -> str:
        writer({"progress": "start"})
        loud = shout(word).result()
        writer({"progress": "done"})
        return loud + "!"

    assert list(flow.stream("hi", cfg(), stream_mode="updates")) == [
        {"shout": "HI"},
        {"flow": "HI!"},
    ]
    assert list(flow.stream("yo", cfg(), stream_mode="values")) == ["YO!"]

    @entrypoint(checkpointer=checkpointer)
    def asks(word: str) -> str:
        return shout(word).result() + str(interrupt("more?"))

    (question,) = list(asks.stream("hey", cfg("q"), stream_mode="values"))
    assert question["__interrupt__"][0].value == "more?"  # a question is a values chunk
    assert list(asks.stream(Command(resume="!"), cfg("q"), stream_mode="values")) == ["HEY!"]
    assert list(flow.stream("ok", cfg(), stream_mode="custom")) == [
        {"progress": "start"},
        {"progress": "done"},
    ]
    modes = [m for m, _ in flow.stream("go", cfg(), stream_mode=["updates", "custom"])]
    assert modes == ["custom", "updates", "custom", "updates"]


def test_config_and_no_checkpointer() -> None:
    @entrypoint()
    def flow(x: int, *, config: dict[str, Any]) -> dict[str, Any]:
        return {"x": x, "user": config["configurable"].get("user")}

    assert flow.invoke(1, {"configurable": {"user": "ada"}}) == {"x": 1, "user": "ada"}
    assert flow.get_input_jsonschema() == {"type": "integer", "title": "LangGraphInput"}
    assert flow.get_output_jsonschema()["type"] == "object"


def test_bad_uses_name_the_fix() -> None:
    @task
    def alone() -> int:
        return 1

    with pytest.raises(ConfigError, match="inside an @entrypoint"):
        alone()
    with pytest.raises(NotImplementedError, match="generator"):

        @entrypoint()
        def gen(x: int) -> Any:
            yield x

    with pytest.raises(ConfigError, match="effect class"):
        task(reconcile=lambda r: None)(lambda: 1)
    with pytest.raises(ConfigError, match="effect="):
        task(effect="maybe")


def test_task_in_a_state_graph_node_is_recorded(checkpointer: Checkpointer) -> None:
    ran: list[int] = []

    @task
    def lookup(n: int) -> int:
        ran.append(n)
        return n * 10

    def node(state: dict[str, Any]) -> dict[str, Any]:
        found = lookup(state["n"]).result()
        answer = interrupt("ok?")
        return {"n": found + int(answer)}

    from typing_extensions import TypedDict

    class State(TypedDict):
        n: int

    app = StateGraph(State).add_node("node", node).add_edge(START, "node").add_edge("node", END)
    graph = app.compile(checkpointer=checkpointer)
    graph.invoke({"n": 4}, cfg())
    assert graph.invoke(Command(resume="2"), cfg()) == {"n": 42}
    assert ran == [4]


# -- under the ledger -------------------------------------------------------------------------


def test_each_task_call_is_an_effect_record(checkpointer: Checkpointer) -> None:
    keys: list[str] = []

    @task
    def plain(x: int) -> int:
        return x + 1

    @task(effect="write", recipient="payments")
    def charge(amount: int) -> dict[str, Any]:
        keys.append(current_effect().idempotency_key)
        return {"charged": amount}

    @task
    def outer(x: int) -> int:
        return plain(x).result() * 2  # a task inside a task: numbered inside its caller

    @entrypoint(checkpointer=checkpointer)
    def flow(x: int) -> Any:
        return [charge(x).result(), outer(x).result()]

    assert flow.invoke(5, cfg()) == [{"charged": 5}, 12]
    records = {r.effect_type: r for r in flow.effects(thread_id="t1")}
    assert set(records) == {"charge", "outer", "plain"}
    assert records["charge"].effect_class is EffectClass.WRITE
    assert records["charge"].recipient == "payments"
    assert records["charge"].effect_id == keys[0]  # the idempotency key is the effect id
    assert records["plain"].effect_class is EffectClass.READ
    assert records["plain"].command_id == records["outer"].command_id + "/0"
    assert all(r.status is EffectStatus.COMPLETED for r in records.values())


@pytest.mark.parametrize("path", PATHS)
def test_failed_run_resumes_without_redoing_finished_tasks(
    checkpointer: Checkpointer, path: str
) -> None:
    ran: list[str] = []
    keys: list[str] = []
    broken = threading.Event()
    broken.set()

    @task(effect="write")
    def pay(amount: int) -> str:
        ran.append("pay")
        keys.append(current_effect().idempotency_key)
        return f"paid {amount}"

    @task
    def notify(text: str) -> str:
        ran.append("notify")
        if broken.is_set():
            raise RuntimeError("mail server down")
        return f"sent: {text}"

    @entrypoint(checkpointer=checkpointer)
    def flow(amount: int) -> str:
        receipt = pay(amount).result()
        return notify(receipt).result()

    with pytest.raises(RuntimeError, match="mail server down"):
        drive(flow, 30, cfg(), path)
    broken.clear()
    assert drive(flow, None, cfg(), path) == "sent: paid 30"  # continue the failed run
    assert ran == ["pay", "notify", "notify"]  # the payment is never made twice
    assert len(keys) == 1


def test_changed_request_on_resume_is_refused(checkpointer: Checkpointer) -> None:
    """The n-th task call of a re-run node carries the request it recorded, or the
    ledger refuses it instead of sending something else under the same key."""
    from oncegraph.errors import RequestMismatchError

    amounts = iter([10, 99])

    @task(effect="irreversible")
    def transfer(amount: int) -> str:
        return f"sent {amount}"

    @entrypoint(checkpointer=checkpointer)
    def flow(_: Any) -> str:
        sent = transfer(next(amounts)).result()
        interrupt("confirm?")
        return sent

    flow.invoke("go", cfg())
    with pytest.raises(RequestMismatchError):
        flow.invoke(Command(resume="yes"), cfg())


def test_task_retry_policy_retries_inside_one_record(checkpointer: Checkpointer) -> None:
    from oncegraph.types import RetryPolicy

    tries: list[int] = []

    @task(retry_policy=RetryPolicy(max_attempts=3, initial_interval=0, retry_on=ValueError))
    def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ValueError("not yet")
        return "ok"

    @entrypoint(checkpointer=checkpointer)
    def flow(_: Any) -> str:
        return flaky().result()

    assert flow.invoke("x", cfg()) == "ok"
    assert len(tries) == 3
    (record,) = flow.effects(thread_id="t1")
    assert record.status is EffectStatus.COMPLETED


def test_an_async_task_retry_policy_retries_inside_one_record(
    checkpointer: Checkpointer,
) -> None:
    from oncegraph.types import RetryPolicy

    tries: list[int] = []

    @task(retry_policy=RetryPolicy(max_attempts=3, initial_interval=0, retry_on=ValueError))
    async def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ValueError("not yet")
        return "ok"

    @entrypoint(checkpointer=checkpointer)
    async def flow(_: Any) -> str:
        return await flaky()

    assert flow.invoke("x", cfg()) == "ok"
    assert len(tries) == 3
    (record,) = flow.effects(thread_id="t1")
    assert record.status is EffectStatus.COMPLETED


def test_a_served_result_comes_back_typed(checkpointer: Checkpointer) -> None:
    """After a restart (a new app on the same store), a task's recorded result is typed
    again by its return annotation."""
    seen: list[Any] = []

    def build() -> Any:
        @task
        def quote(item: str) -> Quote:
            return Quote(price=len(item))

        @entrypoint(checkpointer=checkpointer)
        def flow(item: str) -> int:
            got = quote(item).result()
            seen.append(got)
            return got.price + int(interrupt("extra?"))

        return flow

    build().invoke("apple", cfg())
    assert build().invoke(Command(resume="1"), cfg()) == 6
    assert [type(q) for q in seen] == [Quote, Quote]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_task_not_awaited_before_an_interrupt_is_recorded(
    checkpointer: Checkpointer, asynchronous: bool
) -> None:
    """The run's node ends only once the tasks it started ended: a task still running
    when the workflow interrupts is recorded then, and served on resume."""
    ran: list[str] = []
    gate = threading.Event()

    @task
    def slow(x: str) -> str:
        gate.wait(5)  # still running when the workflow asks its question
        ran.append(x)
        return x + "!"

    if asynchronous:

        @entrypoint(checkpointer=checkpointer)
        async def flow(x: str) -> str:
            pending = slow(x)
            answer = interrupt("go on?")
            return str(await pending) + answer

    else:

        @entrypoint(checkpointer=checkpointer)
        def flow(x: str) -> str:
            pending = slow(x)
            answer = interrupt("go on?")
            return pending.result() + answer

    threading.Timer(0.05, gate.set).start()
    assert "__interrupt__" in flow.invoke("hi", cfg())
    assert ran == ["hi"]  # it finished before the run answered
    assert [r.status for r in flow.effects(thread_id="t1")] == [EffectStatus.COMPLETED]
    assert flow.invoke(Command(resume="yes"), cfg()) == "hi!yes"
    assert ran == ["hi"]


def test_a_tool_as_a_task_keeps_its_class_and_hooks(checkpointer: Checkpointer) -> None:
    from oncegraph import Reconciled, tool

    def check(record: Any) -> Reconciled:
        return Reconciled.not_done()

    @tool(effect="irreversible", reconcile=check, recipient="bank")
    def wire(account: str, amount: int) -> str:
        """Wire money."""
        return f"{amount} to {account}"

    wire_task = task(wire)

    @entrypoint(checkpointer=checkpointer)
    def flow(x: int) -> str:
        return wire_task("acct-1", amount=x).result()

    assert flow.invoke(5, cfg()) == "5 to acct-1"
    (record,) = flow.effects(thread_id="t1")
    assert record.effect_type == "wire"
    assert record.effect_class is EffectClass.IRREVERSIBLE
    assert record.recipient == "bank"
    assert record.request["args"] == {"account": "acct-1", "amount": 5}


def test_replays_serve_tasks_and_block_irreversible_ones(checkpointer: Checkpointer) -> None:
    from oncegraph.errors import NeedsReviewError

    ran: list[str] = []

    @task
    def look(x: int) -> int:
        ran.append("look")
        return x * 2

    @task(effect="irreversible")
    def pay(x: int) -> str:
        ran.append("pay")
        return f"paid {x}"

    @entrypoint(checkpointer=checkpointer)
    def flow(x: int) -> list[Any]:
        return [look(x).result(), pay(x).result()]

    assert flow.invoke(3, cfg()) == [6, "paid 3"]
    (run,) = flow.runs(thread_id="t1")
    again = flow.replay(run.run_id, mode="evidence", reason="audit", actor="ops")
    assert again == [6, "paid 3"]
    assert ran == ["look", "pay"]  # an evidence replay calls nothing
    with pytest.raises(NeedsReviewError, match="allow_irreversible"):
        flow.replay(run.run_id, mode="live", reason="once more", actor="ops")
    assert ran == ["look", "pay", "look"]  # a live replay runs the read, not the payment


def test_a_cancelled_task_call_is_cancelled_and_waited_for(checkpointer: Checkpointer) -> None:
    cancels: list[int] = []
    started: list[int] = []  # the bodies under way: a call cancelled mid-way is left pending

    @task
    async def mapper(x: int) -> str:
        started.append(x)
        try:
            await asyncio.sleep(0 if x == 0 else 5)
        except asyncio.CancelledError:
            cancels.append(x)
            raise
        return str(x) * 2

    @entrypoint(checkpointer=checkpointer)
    async def flow(xs: list[int]) -> list[str]:
        futures = [mapper(x) for x in xs]
        for _ in range(3000):  # until the call to cancel is under way, however slow the store
            if 1 in started:
                break
            await asyncio.sleep(0.01)
        futures.pop().cancel()
        return list(await asyncio.gather(*futures))

    assert flow.invoke([0, 1], cfg()) == ["00"]
    assert cancels == [1]  # cancelled, and ended before the run answered
    # ... and recorded before it answered: the cancelled call's outcome is not claimed
    statuses = sorted(str(r.status) for r in flow.effects(thread_id="t1"))
    assert statuses == ["completed", "pending"]


def test_interrupt_inside_an_effect_task_is_refused_with_the_fix(
    checkpointer: Checkpointer,
) -> None:
    @task(effect="write")
    def pay(amount: int) -> str:
        if interrupt("sure?") != "yes":
            return "not paid"
        return f"paid {amount}"

    @entrypoint(checkpointer=checkpointer)
    def flow(amount: int) -> str:
        return pay(amount).result()

    with pytest.raises(ConfigError, match="Ask before the call"):
        flow.invoke(5, cfg())


def test_models_in_and_out_of_an_entrypoint(checkpointer: Checkpointer) -> None:
    """A pydantic input and saved value are stored as JSON and typed back by the
    annotations (after a restart too); the caller gets what the function returned."""
    seen: list[Any] = []

    def build() -> Any:
        @entrypoint(checkpointer=checkpointer)
        def flow(q: Quote, *, previous: Quote | None = None) -> entrypoint.final[dict, Quote]:
            seen.append((type(q), type(previous)))
            asked = interrupt("ok?")
            return entrypoint.final(value={"price": q.price, "ok": asked}, save=q)

        return flow

    build().invoke(Quote(price=3), cfg())
    assert build().invoke(Command(resume=True), cfg()) == {"price": 3, "ok": True}
    build().invoke({"price": 4}, cfg())  # a dict for a model-annotated input is taken as one
    assert seen == [(Quote, type(None)), (Quote, type(None)), (Quote, Quote)]


def test_an_entrypoint_called_inside_another_is_recorded_in_its_run(
    checkpointer: Checkpointer,
) -> None:
    ran: list[int] = []

    @task
    def tenfold(x: int) -> int:
        ran.append(x)
        return x * 10

    @entrypoint()
    def inner(x: int) -> int:
        return tenfold(x).result() + 1

    @entrypoint(checkpointer=checkpointer)
    def outer(x: int) -> list[Any]:
        return [inner.invoke(x), interrupt("and?")]

    outer.invoke(2, cfg())
    assert outer.invoke(Command(resume="z"), cfg()) == [21, "z"]
    assert ran == [2]  # the inner workflow's task is served on the outer's resume


def test_astream_events_of_an_entrypoint_take_its_own_input() -> None:
    import asyncio as _asyncio

    from oncegraph.func import entrypoint as _entrypoint
    from oncegraph.func import task as _task

    @_task()
    async def double(n: int) -> int:
        return n * 2

    @_entrypoint()
    async def flow(n: int) -> int:
        return await double(n) + 1

    async def events() -> list[tuple[str, Any]]:
        return [(e["event"], e["data"]) async for e in flow.astream_events(3)]

    got = _asyncio.run(events())
    assert got[0] == ("on_chain_start", {"input": 3})
    assert got[-1][0] == "on_chain_end"
    assert ("on_chain_stream", {"chunk": {"double": 6}}) in got
