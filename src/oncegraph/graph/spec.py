"""The compiled, immutable shape of a graph and its fingerprint."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oncegraph.state.channels import StateSchema


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    fn: Callable[..., Any]
    is_async: bool
    takes_config: bool
    timeout: float | None = None  # overrides the run's node_timeout when set
    inline: bool = False  # a sync node called on the event loop thread (no hand-off)

    @classmethod
    def of(
        cls,
        name: str,
        fn: Callable[..., Any],
        timeout: float | None = None,
        inline: bool = False,
    ) -> NodeSpec:
        target = fn if inspect.isroutine(fn) else type(fn).__call__
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(target)
        try:
            params = [
                p
                for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        except (TypeError, ValueError):
            params = []
        return cls(name, fn, is_async, len(params) >= 2, timeout, inline)


@dataclass(frozen=True, slots=True)
class BranchSpec:
    source: str
    router: Callable[..., Any]
    path_map: Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class GraphSpec:
    schema: StateSchema
    nodes: Mapping[str, NodeSpec]
    edges: Mapping[str, tuple[str, ...]]  # source -> targets (static)
    branches: Mapping[str, tuple[BranchSpec, ...]]
    name: str
    version: str
    state_schema_version: int
    input_schema: StateSchema | None = None  # None: the state schema
    output_schema: StateSchema | None = None  # None: the state schema
    context_schema: Any = None

    @property
    def order(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.nodes)}

    def fingerprint(self) -> str:
        """sha256 over nodes, static edges, branch sources and path maps, state fields."""
        parts = ["nodes:" + ",".join(self.nodes)]
        for src in sorted(self.edges):
            parts.append(f"edge:{src}->{','.join(sorted(self.edges[src]))}")
        for src in sorted(self.branches):
            for b in self.branches[src]:
                pm = ",".join(f"{k}={v}" for k, v in sorted((b.path_map or {}).items()))
                parts.append(f"branch:{src}:{pm}")
        parts.append("state:" + ",".join(sorted(self.schema.channels)))
        return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()
