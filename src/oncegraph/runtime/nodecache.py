"""Serving and storing a node's cached result (``add_node(cache_policy=...)``).

A node with a cache policy in a graph compiled with ``cache=`` first looks its input's
key up; a hit is the node's result (its update and routing, flagged ``cached``) and the
node does not run. A result is stored only when the node's run performed no effect,
ran no subgraph and asked no question: what the ledger must record (or serve on a
resume) is never replaced by a cached copy. See :mod:`oncegraph.cache.base`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from oncegraph import _json
from oncegraph.cache.base import BaseCache, CacheKey, CachePolicy
from oncegraph.graph.spec import GraphSpec, NodeSpec
from oncegraph.runtime.context import TaskContext
from oncegraph.runtime.engine import TaskResult, decode_result, encode_result


def cache_key(spec: GraphSpec, node: NodeSpec, value: Any) -> CacheKey | None:
    """The cache entry of ``node`` for input ``value`` (None: the node is not cached)."""
    policy = node.cache_policy
    if spec.cache is None or not isinstance(policy, CachePolicy) or node.subgraph is not None:
        return None
    return (namespace(spec, node.name), policy.key(value))


def namespace(spec: GraphSpec, node: str) -> tuple[str, ...]:
    return (spec.name, node)


async def lookup(spec: GraphSpec, entry: CacheKey, key: str, node: str) -> TaskResult | None:
    cache: BaseCache = spec.cache
    found = (await cache.aget([entry])).get(entry)
    if found is None:
        return None
    result = decode_result(spec, key or node, node, _json.loads(found))
    return dataclasses.replace(result, cached=True)


async def store(
    spec: GraphSpec, node: NodeSpec, entry: CacheKey, ctx: TaskContext, result: TaskResult
) -> None:
    if ctx.effect_count or ctx.subgraph_calls or ctx.interrupt_count or ctx.staged_effects:
        return  # the ledger's record stands for this run, not a cached copy
    policy = node.cache_policy
    assert isinstance(policy, CachePolicy)
    text = _json.dumps_state_str(encode_result(spec, result))
    await spec.cache.aset({entry: (text, policy.ttl)})


__all__ = ["cache_key", "lookup", "namespace", "store"]
