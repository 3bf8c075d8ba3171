"""Map-reduce with parallel nodes, each branch's side effect under the ledger.

The order lists its regional warehouses; ``Send`` (LangGraph's map) starts one
``hold`` task per region in the same step, decided at run time, and each asks its
warehouse to hold stock through the ledger (``aeffect``). The branches' findings are
reduced into the state, and ``report`` runs after all of them. A child process runs the
graph and is SIGKILLed right after the first branch's effect was recorded
(``ONCEGRAPH_CRASH_AT``); this process then continues the run. The sends are part of
the checkpoint, so the same three tasks run again: a branch whose effect was recorded is
not asked again, one whose call was cut off is asked again with the SAME idempotency key
(a ``write`` whose outcome is unknown), so each warehouse holds stock once, and the
report has each branch once. Runs offline: python examples/map_reduce.py
"""

from __future__ import annotations

import operator
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, TypedDict

from oncegraph import END, START, Send, StateGraph, aeffect, current_effect
from oncegraph.storage.checkpointer import SqliteCheckpointer

REGIONS = ("eu", "us", "apac")
WORKDIR = Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="oncegraph-mr-"))
WAREHOUSES = WORKDIR / "warehouses.log"  # what the warehouses saw (your real systems' side)


class State(TypedDict):
    order_id: str
    regions: list[str]
    findings: Annotated[list[str], operator.add]
    report: str


def hold_stock(region: str, order_id: str) -> str:
    """The side effect: a warehouse reserves stock. It deduplicates on the key it gets."""
    with open(WAREHOUSES, "a") as log:
        log.write(f"{region} {current_effect().idempotency_key}\n")
    return f"{region}: stock held for {order_id}"


def warehouses() -> str:
    lines = [line.split() for line in WAREHOUSES.read_text().splitlines()]
    requests = Counter(region for region, _ in lines)
    holds = Counter(region for region, _ in set(map(tuple, lines)))
    return ", ".join(f"{r}: {requests[r]} request(s), {holds[r]} hold" for r in sorted(requests))


class Hold(TypedDict):
    """What one branch gets: its own payload, not the whole state."""

    order_id: str
    region: str


async def hold(branch: Hold) -> dict[str, Any]:
    region = branch["region"]
    finding = await aeffect(hold_stock, region, branch["order_id"], effect_type="hold_stock")
    return {"findings": [finding]}


def fan_out(state: State) -> list[Send]:
    """The map: one ``hold`` task per region of the order."""
    return [Send("hold", {"order_id": state["order_id"], "region": r}) for r in state["regions"]]


def report(state: State) -> dict[str, Any]:
    return {"report": "; ".join(sorted(state["findings"]))}


graph = StateGraph(State, name="stock_check")
graph.add_node("hold", hold)
graph.add_node("report", report)
graph.add_conditional_edges(START, fan_out, ["hold"])
graph.add_edge("hold", "report")  # the reduce: after every branch of the step
graph.add_edge("report", END)


def main() -> None:
    app = graph.compile(checkpointer=SqliteCheckpointer(WORKDIR / "runs.db"))
    config = {"thread_id": "order-1042"}
    if sys.argv[1:2] == ["--child"]:
        app.invoke({"order_id": "1042", "regions": list(REGIONS)}, config)
        return
    env = {**os.environ, "ONCEGRAPH_CRASH_AT": "after_effect_record"}
    child = subprocess.run([sys.executable, __file__, "--child", str(WORKDIR)], env=env)
    print(f"child exit {child.returncode} (-9: SIGKILL); warehouses: {warehouses()}")
    print(f"next nodes of the cut-short run: {sorted(app.get_state(config).next)}")
    out = app.invoke(None, config)  # continue the same run
    print(f"after the resume, warehouses: {warehouses()}")
    print(f"report: {out['report']}")
    effects = [e for e in app.effects(thread_id="order-1042") if e.effect_type == "hold_stock"]
    print(f"ledger: {len(effects)} hold_stock effects, all {effects[0].status}")


if __name__ == "__main__":
    try:
        main()
    finally:
        if sys.argv[1:2] != ["--child"]:  # the parent made the directory: it removes it
            shutil.rmtree(WORKDIR, ignore_errors=True)
