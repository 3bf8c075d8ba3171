"""JSON log lines say where they were logged: a tool's own ``logging`` call, made while
the agent runs it, carries the run, thread, node and effect ids, on every run path.
Outside a run a line carries none of them."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from oncegraph import current_effect, tool
from oncegraph.observe import JsonFormatter
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer

LOGGER = "shop.payments"


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield out
    finally:
        logger.removeHandler(handler)


def _agent(db: str) -> Any:
    @tool(effect="write")
    def pay(order_id: str) -> str:
        """Pay an order."""
        logging.getLogger(LOGGER).info("paying %s", order_id, extra={"amount": 5})
        return f"paid {current_effect().idempotency_key[:8]}"

    call = {"id": "c1", "name": "pay", "args": {"order_id": "77"}}
    model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Paid.")
    return ReactAgent(model=model, tools=[pay]).compile(checkpointer=SqliteCheckpointer(db))


ASK = {"messages": [{"role": "user", "content": "pay 77"}]}


def _run(path: str, app: Any, config: dict[str, Any]) -> None:
    if path == "invoke":
        app.invoke(ASK, config)
    elif path == "stream":
        list(app.stream(ASK, config))
    elif path == "ainvoke":
        asyncio.run(app.ainvoke(ASK, config))
    else:

        async def go() -> None:
            async for _ in app.astream(ASK, config):
                pass

        asyncio.run(go())


@pytest.mark.parametrize("path", ["invoke", "stream", "ainvoke", "astream"])
def test_a_tools_log_line_carries_the_run_thread_and_effect_ids(
    path: str, lines: io.StringIO, tmp_path: Any
) -> None:
    app = _agent(str(tmp_path / "runs.db"))
    _run(path, app, {"thread_id": f"t-{path}"})
    (line,) = [json.loads(x) for x in lines.getvalue().splitlines()]
    run = app.runs(thread_id=f"t-{path}")[0]
    (effect,) = [e for e in app.effects(run_id=run.run_id) if e.effect_type == "pay"]
    assert line["message"] == "paying 77" and line["amount"] == 5
    assert line["run_id"] == run.run_id and line["thread_id"] == f"t-{path}"
    assert line["effect_id"] == effect.effect_id and line["effect_type"] == "pay"
    assert line["node"] == "tools" and isinstance(line["step"], int)


def test_outside_a_run_a_line_has_no_ids(lines: io.StringIO) -> None:
    logging.getLogger(LOGGER).info("idle", extra={"run_id": "given"})
    (line,) = [json.loads(x) for x in lines.getvalue().splitlines()]
    assert line["run_id"] == "given"  # an extra field is kept as given
    assert not {"thread_id", "effect_id", "node"} & line.keys()
