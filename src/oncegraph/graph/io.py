"""What a run accepts and returns: the graph's input and output schemas (pure helpers).

``StateGraph(State, input_schema=In, output_schema=Out)``: :func:`input_update` turns
the caller's input into the START update and drops fields ``In`` does not declare;
:func:`output_values` keeps the fields ``Out`` declares (and ``__interrupt__``) of the
final state. Without those schemas both are the state schema's behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import InvalidUpdateError
from oncegraph.graph.constants import START
from oncegraph.graph.spec import GraphSpec
from oncegraph.state.channels import ROOT, StateSchema

INTERRUPT_KEY = "__interrupt__"


@dataclass(frozen=True, slots=True)
class ChannelIO:
    """What a Pregel app (:mod:`oncegraph.pregel`) reads and returns: one channel (the
    input is its value, the output the channel's value) or several (a dict of them).
    ``topics``: channels whose empty list means "nothing written"."""

    input: str | tuple[str, ...]
    output: str | tuple[str, ...]
    topics: frozenset[str] = frozenset()
    stream: str | tuple[str, ...] | None = None  # what "values" streams (None: the output)

    def update(self, value: Any) -> Mapping[str, Any]:
        if isinstance(self.input, str):
            return {self.input: value}
        if not isinstance(value, Mapping):
            raise InvalidUpdateError(
                f"input must be a dict of the input channels {list(self.input)}; got "
                f"{type(value).__name__}"
            )
        return {k: value[k] for k in self.input if k in value}

    def values(self, values: Mapping[str, Any], output: str | tuple[str, ...] | None = None) -> Any:
        out = self.output if output is None else output
        if isinstance(out, str):
            return values.get(out) if self._has(values, out) else None
        picked = {k: values[k] for k in out if self._has(values, k)}
        if INTERRUPT_KEY in values:
            picked[INTERRUPT_KEY] = values[INTERRUPT_KEY]
        return picked

    def _has(self, values: Mapping[str, Any], key: str) -> bool:
        return key in values and not (key in self.topics and values[key] == [])


def _name(schema: StateSchema) -> str:
    return str(getattr(schema.source, "__name__", schema.source))


def input_update(spec: GraphSpec, value: Any) -> Mapping[str, Any]:
    """The caller's ``value`` as the update the run starts with."""
    if spec.io is not None:
        return spec.io.update(value)  # type: ignore[no-any-return]
    schema = spec.input_schema or spec.schema
    if schema.is_root:  # the state is one value: the input is that value
        return {ROOT: value}
    is_instance = schema.kind in ("dataclass", "pydantic") and isinstance(value, schema.source)
    if not isinstance(value, Mapping) and not is_instance:
        raise InvalidUpdateError(
            f"input must be a dict of state fields (or None to continue a run); got "
            f"{type(value).__name__}"
        )
    # as LangGraph: keys outside the input schema (without one, outside the state
    # schema's own fields) are not input: dropped, each logged once
    update = schema.to_update(START, value)
    if schema is not spec.schema:  # and what the state has no field for either
        update = spec.schema.known(START, update)
    return update


def output_values(spec: GraphSpec, values: Mapping[str, Any], *, invoked: bool = False) -> Any:
    """The part of the final state a run returns (``__interrupt__`` always included);
    a root-value state's value itself, but what ``invoke`` returns of a paused one
    (``invoked``): as LangGraph, ``{"__interrupt__": [...]}`` (merged into a dict value)."""
    if spec.io is not None:
        return spec.io.values(values)
    schema = spec.output_schema
    if (schema or spec.schema).is_root:
        value = values.get(ROOT)
        if invoked and INTERRUPT_KEY in values:
            asked = values[INTERRUPT_KEY]
            return (
                {**value, INTERRUPT_KEY: asked}
                if isinstance(value, dict)
                else {INTERRUPT_KEY: asked}
            )
        return value
    if schema is None:
        return dict(values)
    out = {k: v for k, v in values.items() if k in schema.channels}
    if INTERRUPT_KEY in values:
        out[INTERRUPT_KEY] = values[INTERRUPT_KEY]
    return out


def picked_output(spec: GraphSpec, values: Mapping[str, Any], keys: str | Sequence[str]) -> Any:
    """``invoke(output_keys=...)``: one key's value, or a dict of those keys."""
    chosen = keys if isinstance(keys, str) else tuple(keys)
    if spec.io is not None:
        return spec.io.values(values, chosen)
    if isinstance(chosen, str):
        return values.get(chosen)
    return {k: values[k] for k in chosen if k in values}


__all__ = ["ChannelIO", "input_update", "output_values", "picked_output"]
