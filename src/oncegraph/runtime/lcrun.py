"""A graph's run as LangChain's callback handlers see it.

A compiled graph is called like a LangChain runnable: given ``config["callbacks"]``
(a tracer, a handler), ``invoke`` reports its run to them as one chain run:
``on_chain_start`` with the input, then ``on_chain_end`` with the state it returns (a
question asked is no error: the state without its ``__interrupt__``) or
``on_chain_error`` with the error raised. ``run_name``, ``run_id``, ``tags`` and
``metadata`` of the config name the run, as LangChain reads them. Nothing is imported
unless callbacks are given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncegraph.graph.io import INTERRUPT_KEY


async def chain_started(config: Mapping[str, Any] | None, name: str, input: Any) -> Any:
    """The LangChain run manager of a run started with ``config``'s callbacks (None when
    it has none)."""
    callbacks = config.get("callbacks") if config else None
    if not callbacks or config is None:
        return None
    from langchain_core.callbacks.manager import AsyncCallbackManager

    manager = AsyncCallbackManager.configure(
        callbacks,
        inheritable_tags=config.get("tags"),
        inheritable_metadata=config.get("metadata"),
    )
    return await manager.on_chain_start(
        None, input, name=config.get("run_name") or name, run_id=config.get("run_id")
    )


async def chain_ended(run: Any, output: Any) -> None:
    """Report the run's output (the state, without its questions)."""
    if run is None:
        return
    if isinstance(output, Mapping) and INTERRUPT_KEY in output:
        output = {k: v for k, v in output.items() if k != INTERRUPT_KEY}
    await run.on_chain_end(output)


async def chain_failed(run: Any, error: BaseException) -> None:
    """Report the error the run raised."""
    if run is not None:
        await run.on_chain_error(error)


__all__ = ["chain_ended", "chain_failed", "chain_started"]
