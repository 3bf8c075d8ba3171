"""The approval names what it approves, and the answer is bound to it.

Each action of an approval request (:mod:`oncegraph.prebuilt.approval`) also carries:

* ``effect_id``: the id the call's effect will get (keys are deterministic: the run, the
  tool and ``<assistant message id>:<tool_call_id>``), which is also the idempotency key
  the recipient will see; the effect log finds the call by it;
* ``recipient``: who receives the call, as the tool declares it;
* ``masked_args``: the arguments with the tool's ``mask=`` fields shown as ``***``;
* ``request_hash``: a keyed hash (the store's request-hash key, as the ledger's own
  request hashes are) of the effect id, the tool and the REAL arguments; keyed, so the
  hash of a masked value cannot be guessed back from it.

The request has a ``request_hash`` of its own, over its actions' hashes in order.

The answer is bound to that hash. An answer may name it (``"request_hash"`` beside
``"decisions"``, or in one decision for that call): an answer that names another hash
(a stale approval of an earlier request, or of the call before an edit) is refused
(nothing runs; the request is asked again with the error saying so). An answer that names
no hash is accepted, because it can only answer the question pending at its position:
the node's interrupts are answered in order, and a question that changed since it was
asked is never given an earlier answer (:func:`oncegraph.runtime.interrupt.interrupt`).
An edit of the arguments makes a NEW request, with the edited call and a new hash, that
must itself be approved (or edited again, or rejected) before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph.ledger.keys import effect_id_for, request_hash, tool_command_id
from oncegraph.ledger.masks import MASK, mask_value
from oncegraph.messages import ToolCall

HASH = "request_hash"


@dataclass(frozen=True, slots=True)
class Binding:
    """What binds a request to the exact calls: the run's key id, the assistant message
    and the store's hash key."""

    run_id: str
    message_id: str
    key: bytes | None

    def effect_id(self, call: ToolCall) -> str:
        return effect_id_for(
            self.run_id, call["name"], tool_command_id(self.message_id, call["id"])
        )

    def action(self, call: ToolCall, tool: Any) -> dict[str, Any]:
        """The fields that name the call: effect id, recipient, masked args, hash."""
        effect_id = self.effect_id(call)
        args = call["args"]
        return {
            "effect_id": effect_id,
            "recipient": tool.recipient_for(args) if tool is not None else None,
            "masked_args": mask_value(args, tuple(getattr(tool, "mask", ()))),
            HASH: request_hash(
                {"effect_id": effect_id, "tool": call["name"], "args": args}, self.key
            ),
        }


def request_of(actions: Sequence[Mapping[str, Any]], key: bytes | None) -> str:
    """The whole request's hash: over its actions' hashes, in order."""
    return request_hash([a.get(HASH) for a in actions], key)


def stale(answer: Any, request: Mapping[str, Any]) -> str | None:
    """Why ``answer`` does not answer ``request`` (it names another hash), or None."""
    if not isinstance(answer, Mapping):
        return None
    named = answer.get(HASH)
    if named is not None and named != request.get(HASH):
        return (
            f"this answer approves request {_short(named)}, but the request waiting now is "
            f"{_short(request.get(HASH))} (its calls or their arguments are not the ones that "
            "answer was given for); nothing ran: decide on the request shown now"
        )
    decisions = answer.get("decisions")
    actions = request.get("action_requests") or []
    if isinstance(decisions, Sequence) and not isinstance(decisions, (str, bytes)):
        for n, (decision, action) in enumerate(zip(decisions, actions, strict=False), 1):
            if not isinstance(decision, Mapping) or decision.get(HASH) is None:
                continue
            if decision[HASH] != action.get(HASH):
                return (
                    f"decision {n} approves request {_short(decision[HASH])} of "
                    f"{action.get('name')}, but the call waiting now is "
                    f"{_short(action.get(HASH))}; nothing ran: decide on the call shown now"
                )
    return None


def _short(value: Any) -> str:
    text = str(value)
    return text.split(":", 1)[-1][:12] if text else "(none)"


__all__ = ["HASH", "MASK", "Binding", "request_of", "stale"]
