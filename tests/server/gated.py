"""A graph whose one node waits for the test to open its gate (a run that stays in
flight as long as a test needs), and a real uvicorn serving it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from shop import KEYS

from conftest import free_port
from oncegraph import END, START, StateGraph
from oncegraph.server import create_app
from oncegraph.storage.protocols import Checkpointer


class Gate:
    """``app``: one node, ``work``, that waits (in its thread) until :attr:`opened`."""

    def __init__(self, store: Checkpointer) -> None:
        self.opened = threading.Event()
        self.entered = threading.Event()
        gate = self

        def work(state: dict[str, Any]) -> dict[str, Any]:
            gate.entered.set()
            assert gate.opened.wait(60), "the test never opened the gate"
            return {"done": state.get("done", 0) + 1}

        graph: StateGraph[Any] = StateGraph(dict)
        graph.add_node("work", work)
        graph.add_edge(START, "work")
        graph.add_edge("work", END)
        self.app = graph.compile(checkpointer=store, name="gated")


@contextlib.contextmanager
def serve_gated(store: Checkpointer, **options: Any) -> Iterator[tuple[Gate, str]]:
    """The gated app served by uvicorn on a free port (no recovery pass unless asked);
    yields the gate and the base URL. The gate is opened on the way out."""
    gate = Gate(store)
    port = free_port()
    options.setdefault("recover", False)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(gate.app, keys=KEYS, **options),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, name="uvicorn-gated", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield gate, f"http://127.0.0.1:{port}"
    finally:
        gate.opened.set()
        server.should_exit = True
        thread.join(timeout=30)
