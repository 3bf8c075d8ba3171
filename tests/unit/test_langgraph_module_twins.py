"""Every public ``langgraph.X`` module a program imports has an ``oncegraph.X`` twin with
the same names, so porting is ``s/langgraph/oncegraph/`` on the imports."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest

import oncegraph
from oncegraph.app import CompiledGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer

TWINS = {
    "oncegraph.checkpoint.memory": ["MemorySaver", "InMemorySaver"],
    "oncegraph.checkpoint.sqlite": ["SqliteSaver"],
    "oncegraph.checkpoint.sqlite.aio": ["AsyncSqliteSaver"],
    "oncegraph.checkpoint.postgres": ["PostgresSaver"],
    "oncegraph.checkpoint.postgres.aio": ["AsyncPostgresSaver"],
    "oncegraph.checkpoint.base": ["BaseCheckpointSaver"],
    "oncegraph.graph": ["StateGraph", "START", "END", "MessagesState", "add_messages"],
    "oncegraph.graph.message": ["MessagesState", "add_messages"],
    "oncegraph.graph.state": ["StateGraph", "CompiledStateGraph"],
    "oncegraph.constants": ["START", "END"],
    "oncegraph.types": ["Command", "Send", "interrupt", "Interrupt", "RetryPolicy", "StateUpdate"],
    "oncegraph.config": ["get_stream_writer", "get_config"],
    "oncegraph.runtime": ["Runtime", "get_runtime", "ExecutionInfo"],
    "oncegraph.prebuilt": ["ToolNode", "tools_condition"],
    "oncegraph.prebuilt.tool_node": ["ToolNode", "tools_condition"],
    "oncegraph.errors": ["GraphRecursionError", "InvalidUpdateError", "NodeError"],
}


@pytest.mark.parametrize("module", sorted(TWINS))
def test_the_twin_module_exports_langgraphs_names(module: str) -> None:
    found = importlib.import_module(module)
    for name in TWINS[module]:
        assert name in found.__all__, f"{module}.{name} is not documented in __all__"
        assert getattr(found, name) is not None


def test_the_twins_are_oncegraphs_own_classes() -> None:
    from oncegraph.checkpoint.memory import InMemorySaver, MemorySaver
    from oncegraph.checkpoint.sqlite import SqliteSaver
    from oncegraph.graph.state import CompiledStateGraph
    from oncegraph.prebuilt import ToolNode

    assert MemorySaver is InMemorySaver is InMemoryCheckpointer
    assert SqliteSaver is SqliteCheckpointer
    assert CompiledStateGraph is CompiledGraph
    assert ToolNode is oncegraph.ToolNode


def test_a_program_ported_by_sed_runs(tmp_path: object) -> None:
    program = textwrap.dedent(
        """
        import operator
        from typing import Annotated, TypedDict
        from oncegraph.checkpoint.memory import MemorySaver
        from oncegraph.graph import StateGraph, START, END
        from oncegraph.types import Command, interrupt

        class State(TypedDict):
            steps: Annotated[list[str], operator.add]

        def ask(state: State) -> dict:
            return {"steps": [interrupt("go on?")]}

        builder = StateGraph(State)
        builder.add_node("ask", ask)
        builder.add_edge(START, "ask")
        builder.add_edge("ask", END)
        graph = builder.compile(checkpointer=MemorySaver())
        config = {"configurable": {"thread_id": "1"}}
        graph.invoke({"steps": []}, config)
        print(graph.invoke(Command(resume="yes"), config)["steps"])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "['yes']"
