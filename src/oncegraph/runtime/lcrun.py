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

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from oncegraph.graph.io import INTERRUPT_KEY


@asynccontextmanager
async def chain_run(
    config: Mapping[str, Any] | None, name: str, input: Any
) -> AsyncIterator[Callable[[Any], Any]]:
    """Report the run inside to ``config``'s callbacks (nothing without any): the body
    hands its output to the function this gives (which returns it); an error leaving
    the body is reported as the run's."""
    callbacks = config.get("callbacks") if config else None
    if not callbacks or config is None:
        yield _same
        return
    from langchain_core.callbacks.manager import AsyncCallbackManager

    manager = AsyncCallbackManager.configure(
        callbacks,
        inheritable_tags=config.get("tags"),
        inheritable_metadata=config.get("metadata"),
    )
    run = await manager.on_chain_start(
        None, input, name=config.get("run_name") or name, run_id=config.get("run_id")
    )
    kept: list[Any] = []

    def ended(output: Any) -> Any:
        kept.append(output)
        return output

    try:
        yield ended
    except BaseException as exc:
        await run.on_chain_error(exc)
        raise
    output = kept[-1] if kept else None
    if isinstance(output, Mapping) and INTERRUPT_KEY in output:
        output = {k: v for k, v in output.items() if k != INTERRUPT_KEY}
    await run.on_chain_end(output)


def _same(output: Any) -> Any:
    return output


__all__ = ["chain_run"]
