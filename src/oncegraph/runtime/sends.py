"""``Send`` payloads as a checkpoint stores them, and typed again when read back."""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from oncegraph._json import dumps_state, loads, untag
from oncegraph.errors import GraphValidationError, InvalidUpdateError
from oncegraph.graph.spec import GraphSpec
from oncegraph.graph.timeouts import TimeoutPolicy
from oncegraph.hitl.send import Send
from oncegraph.state.channels import StateSchema


def _send_schema(spec: GraphSpec, node: str) -> StateSchema:
    return spec.nodes[node].input_schema or spec.schema


def send_policy(send: Send) -> TimeoutPolicy | None:
    """A send's ``timeout`` as a policy (a number or ``timedelta``: its run timeout)."""
    try:
        return TimeoutPolicy.coerce(send.timeout)
    except Exception as exc:
        raise GraphValidationError(f"Send({send.node!r}, ..., timeout=...): {exc}") from exc


def _timeout(spec: GraphSpec, send: Send) -> dict[str, Any] | None:
    """A send's timeout as stored (None: it has none, the node's own applies)."""
    policy = send_policy(send)
    if policy is None:
        return None
    node = spec.nodes[send.node]
    if node.subgraph is not None:
        raise GraphValidationError(
            f"Send({send.node!r}, ..., timeout=...): {send.node!r} is a subgraph, whose "
            "steps keep their own nodes' timeouts; give those nodes a timeout instead"
        )
    if policy.idle_seconds is not None and not node.is_async:
        raise GraphValidationError(
            f"Send({send.node!r}, ..., timeout={send.timeout!r}): an idle timeout needs an "
            "async node (it cancels the attempt); give a number of seconds instead"
        )
    return {
        "run": policy.run_seconds,
        "idle": policy.idle_seconds,
        "refresh_on": policy.refresh_on,
    }


def _policy(stored: Any) -> TimeoutPolicy | None:
    if not isinstance(stored, Mapping):
        return None
    return TimeoutPolicy(
        run_timeout=stored.get("run"),
        idle_timeout=stored.get("idle"),
        refresh_on=stored.get("refresh_on", "auto"),
    )


# A send's untracked values (``UntrackedValue`` fields of its payload) are never stored:
# the process that sent them keeps them here, by a token the stored send names, for the
# task it runs; a resumed run in another process (or after these were let go) runs the
# task without them, as LangGraph does.
_HELD: OrderedDict[str, dict[str, Any]] = OrderedDict()
_HELD_MAX = 1024
_HELD_LOCK = threading.Lock()


def _hold(values: dict[str, Any]) -> str:
    token = secrets.token_hex(12)
    with _HELD_LOCK:
        _HELD[token] = values
        while len(_HELD) > _HELD_MAX:
            _HELD.popitem(last=False)
    return token


def encode_send(spec: GraphSpec, send: Send) -> dict[str, Any]:
    """``send`` as stored in a checkpoint: its payload encoded by the target node's input
    schema when it is state-shaped (a dict of the schema's fields, or an instance of the
    schema's class), else as JSON that comes back as itself (or a clear error); its
    timeout, when it has one, under ``"timeout"``."""
    if send.node not in spec.nodes:
        raise GraphValidationError(
            f"Send({send.node!r}, ...) names no node of the graph; nodes: {sorted(spec.nodes)}"
        )
    stored = _payload(spec, send)
    timeout = _timeout(spec, send)
    if timeout is not None:
        stored["timeout"] = timeout
    return stored


def _payload(spec: GraphSpec, send: Send) -> dict[str, Any]:
    schema = _send_schema(spec, send.node)
    arg = send.arg
    try:
        if schema.kind in ("dataclass", "pydantic") and isinstance(arg, schema.source):
            update = schema.to_update(send.node, arg)
            return {"node": send.node, "as": "instance", "arg": schema.encode_update(update)}
        if (
            isinstance(arg, Mapping)
            and arg
            and all(
                isinstance(k, str) and (k in schema.channels or schema.kind == "dict") for k in arg
            )
        ):
            # as JSON gives it back, so this process hands the task what a resumed one would
            stored = loads(dumps_state(schema.encode_update(arg)))
            out = {"node": send.node, "as": "state", "arg": stored}
            if schema.untracked and any(k in schema.untracked for k in arg):
                out["held"] = _hold({k: v for k, v in arg.items() if k in schema.untracked})
            return out
        plain = loads(dumps_state(arg))
    except InvalidUpdateError as exc:
        raise InvalidUpdateError(f"the payload of Send({send.node!r}, ...): {exc}") from exc
    return {"node": send.node, "as": "json", "arg": plain}


def decode_send(spec: GraphSpec, stored: Mapping[str, Any]) -> Send:
    """A send stored by :func:`encode_send`, with its payload typed again."""
    node = str(stored["node"])
    kind = stored.get("as", "json")
    arg = stored.get("arg")
    if kind in ("state", "instance") and node in spec.nodes:
        schema = _send_schema(spec, node)
        arg = schema.decode_update(arg or {})
        held = _HELD.get(str(stored.get("held", "")))
        if held is not None and kind == "state":  # this process still holds them
            arg = {**arg, **held}
        if kind == "instance":
            arg = schema.source(**arg)
    elif kind == "json":  # a Command or a message in it comes back as itself
        arg = untag(arg)
    return Send(node, arg, timeout=_policy(stored.get("timeout")))


__all__ = ["decode_send", "encode_send", "send_policy"]
