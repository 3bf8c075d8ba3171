"""What a run accepts and returns: the graph's input and output schemas (pure helpers).

``StateGraph(State, input_schema=In, output_schema=Out)``: :func:`input_update` turns
the caller's input into the START update and refuses fields ``In`` does not declare;
:func:`output_values` keeps the fields ``Out`` declares (and ``__interrupt__``) of the
final state. Without those schemas both are the state schema's behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncegraph.errors import InvalidUpdateError
from oncegraph.graph.constants import START
from oncegraph.graph.spec import GraphSpec
from oncegraph.state.channels import ROOT, StateSchema

INTERRUPT_KEY = "__interrupt__"


def _name(schema: StateSchema) -> str:
    return str(getattr(schema.source, "__name__", schema.source))


def input_update(spec: GraphSpec, value: Any) -> Mapping[str, Any]:
    """The caller's ``value`` as the update the run starts with."""
    schema = spec.input_schema or spec.schema
    if schema.is_root:  # the state is one value: the input is that value
        return {ROOT: value}
    is_instance = schema.kind in ("dataclass", "pydantic") and isinstance(value, schema.source)
    if not isinstance(value, Mapping) and not is_instance:
        raise InvalidUpdateError(
            f"input must be a dict of state fields (or None to continue a run); got "
            f"{type(value).__name__}"
        )
    update = schema.to_update(START, value)
    # as LangGraph: state fields outside the input schema are not input (a field only a
    # node's schema added, one the input schema leaves out): dropped. A key the state
    # lacks altogether is still refused where the update is encoded.
    if (
        spec.input_schema is not None
        and schema.kind != "dict"
        and any(k not in schema.channels for k in update)
    ):
        state = spec.schema.channels
        update = {k: v for k, v in update.items() if k in schema.channels or k not in state}
    return update


def output_values(spec: GraphSpec, values: Mapping[str, Any]) -> Any:
    """The part of the final state a run returns (``__interrupt__`` always included);
    a root-value state's value itself."""
    schema = spec.output_schema
    if (schema or spec.schema).is_root:
        return values.get(ROOT)
    if schema is None:
        return dict(values)
    out = {k: v for k, v in values.items() if k in schema.channels}
    if INTERRUPT_KEY in values:
        out[INTERRUPT_KEY] = values[INTERRUPT_KEY]
    return out


__all__ = ["input_update", "output_values"]
