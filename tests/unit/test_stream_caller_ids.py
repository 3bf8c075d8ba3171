"""The ids a caller puts in ``configurable``, read as LangGraph reads them: a ``run_id``
with new input names the run that input starts (a stored run's id is refused, never
continued or overwritten), and a ``messages`` chunk's metadata carries the caller's ids
(``checkpoint_id``, ``task_id``, ``assistant_id``, ``graph_id``, ...) but nothing else of
``configurable``."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from oncegraph import START, MessagesState, StateGraph
from oncegraph.errors import ConfigError
from oncegraph.storage.protocols import Checkpointer


def _app(checkpointer: Checkpointer) -> Any:
    def speak(state: MessagesState) -> dict[str, Any]:
        return {"messages": HumanMessage(content="hello")}

    return (
        StateGraph(MessagesState)
        .add_node("speak", speak)
        .add_edge(START, "speak")
        .compile(checkpointer=checkpointer)
    )


def test_a_run_id_with_new_input_names_the_new_run(checkpointer: Checkpointer) -> None:
    app = _app(checkpointer)
    config = {"configurable": {"thread_id": "t", "run_id": "run-from-caller"}}
    app.invoke({"messages": []}, config)
    (run,) = app.runs(thread_id="t")
    assert run.run_id == "run-from-caller"
    with pytest.raises(ConfigError, match="names a stored run"):  # never a second run of it
        app.invoke({"messages": []}, config)
    assert [r.run_id for r in app.runs(thread_id="t")] == ["run-from-caller"]


def test_a_messages_chunk_carries_the_callers_ids_only(checkpointer: Checkpointer) -> None:
    app = _app(checkpointer)
    config = {
        "configurable": {
            "thread_id": "m",
            "checkpoint_id": "ckpt-1",  # none yet on this new thread: the input starts it
            "checkpoint_ns": "ns-1",
            "task_id": "task-1",
            "run_id": "run-1",
            "assistant_id": "asst-1",
            "graph_id": "graph-1",
            "api_key": "secret",
        }
    }
    ((_, meta),) = list(app.stream({"messages": []}, config, stream_mode="messages"))
    assert {k: meta[k] for k in ("thread_id", "checkpoint_id", "checkpoint_ns", "task_id")} == {
        "thread_id": "m",
        "checkpoint_id": "ckpt-1",
        "checkpoint_ns": "ns-1",
        "task_id": "task-1",
    }
    assert (meta["run_id"], meta["assistant_id"], meta["graph_id"]) == (
        "run-1",
        "asst-1",
        "graph-1",
    )
    assert "api_key" not in meta and "secret" not in str(meta)


def test_a_run_id_taken_elsewhere_is_refused_without_saying_whose(
    checkpointer: Checkpointer,
) -> None:
    app = _app(checkpointer)
    other = (
        StateGraph(MessagesState)
        .add_node("speak", lambda state: {"messages": HumanMessage(content="hi")})
        .add_edge(START, "speak")
        .compile(checkpointer=checkpointer, name="other-app")
    )
    other.invoke({"messages": []}, {"configurable": {"thread_id": "o", "run_id": "run-shared"}})
    config = {"configurable": {"thread_id": "t", "run_id": "run-shared"}}
    with pytest.raises(ConfigError, match="the id is taken") as refused:
        app.invoke({"messages": []}, config)
    assert "other-app" not in str(refused.value) and "'o'" not in str(refused.value)
    assert app.runs(thread_id="t") == []
