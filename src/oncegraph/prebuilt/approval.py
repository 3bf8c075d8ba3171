"""Approval before chosen tools: ``ReactAgent(interrupt_on=...)``.

The shape is LangChain's ``HumanInTheLoopMiddleware(interrupt_on=...)``::

    interrupt_on={
        "refund_order": True,                                  # approve, edit or reject
        "send_email": {"allowed_decisions": ["approve", "reject"]},
        "lookup_order": False,                                 # never asks
    }

When the model asks for calls of such tools, the agent's tools node calls
``interrupt(request)`` once for all of them (in call order) BEFORE any of the turn's
calls runs. The request is::

    {"action_requests": [{"name", "args", "description", "tool_call_id"}, ...],
     "review_configs": [{"action_name", "allowed_decisions", "args_schema"?}, ...]}

and the caller answers with ``Command(resume={"decisions": [...], "approver": "..."})``,
one decision per action request, in order::

    {"type": "approve"}
    {"type": "edit", "edited_action": {"name": "refund_order", "args": {...}}}
    {"type": "reject", "message": "why, for the model"}

Invariants:

* A rejected call never runs; the model gets an error tool message with the reason.
* Edited arguments are validated against the tool's parameters (as a model's would be)
  before anything runs; the assistant message then carries the edited arguments, so the
  conversation and the ledger show what really ran.
* An answer that does not fit (a wrong count, a decision the tool does not allow, edited
  arguments that do not validate, a missing approver when one is required) is never
  guessed at: the node asks again, with ``"error"`` in the request saying what was wrong.
* Every decision is kept in the run's state under ``approvals`` (an append-only list):
  the tool call, the decision, the proposed and the edited arguments, the reject
  message, the approver (``"approver"`` of the answer, or of one decision) and the run.
  ``<message_id>:<tool_call_id>`` of an entry is the ``command_id`` of the call's effect
  record, so the ledger entry of what ran and the decision that let it run meet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from oncegraph import _json
from oncegraph.errors import ConfigError, ToolArgumentsError
from oncegraph.ledger.keys import hash_key
from oncegraph.messages import Message, ToolCall
from oncegraph.prebuilt.approval_binding import HASH, Binding, request_of, stale
from oncegraph.runtime.context import TaskContext, current_task
from oncegraph.runtime.interrupt import interrupt
from oncegraph.state import lcmessages
from oncegraph.storage.records import EffectRecord
from oncegraph.tools.node import ToolNode, tool_reply
from oncegraph.tools.tool import Tool

DecisionType = Literal["approve", "edit", "reject"]
DECISION_TYPES: tuple[DecisionType, ...] = ("approve", "edit", "reject")
DEFAULT_PREFIX = "Tool execution requires approval"


class InterruptOnConfig(TypedDict):
    """How one tool is reviewed: the decisions allowed, and the text the reviewer reads
    (a string, or ``(tool_call) -> str``; default: ``description_prefix``, the tool and
    its arguments)."""

    allowed_decisions: list[DecisionType]
    description: NotRequired[str | Callable[[ToolCall], str]]


@dataclass(frozen=True, slots=True)
class _Review:
    allowed: tuple[DecisionType, ...]
    description: str | Callable[[ToolCall], str] | None


@dataclass(frozen=True, slots=True)
class Decision:
    """What the reviewer decided for one call. ``args`` are what runs (the proposed
    arguments, or the edited ones), ``kwargs`` the tool's validated values of them."""

    call: ToolCall
    type: DecisionType
    approver: str | None
    args: dict[str, Any]
    message: str | None = None

    def record(self, run_id: str, message_id: str) -> dict[str, Any]:
        """The entry kept in the state's ``approvals`` list."""
        entry: dict[str, Any] = {
            "run_id": run_id,
            "message_id": message_id,
            "tool_call_id": self.call["id"],
            "tool": self.call["name"],
            "decision": self.type,
            "approver": self.approver,
            "args": self.call["args"],
        }
        if self.type == "edit":
            entry["edited_args"] = self.args
        if self.type == "reject":
            entry["message"] = self.message
        return entry


class BadAnswer(Exception):
    """The reviewer's answer does not fit the request; the text says why."""


class Approvals:
    """The parsed ``interrupt_on`` policy over the agent's tools."""

    __slots__ = ("_reviews", "_tools", "prefix", "require_approver")

    def __init__(
        self,
        interrupt_on: Mapping[str, bool | InterruptOnConfig],
        tools: Mapping[str, Tool],
        *,
        description_prefix: str = DEFAULT_PREFIX,
        require_approver: bool = False,
    ) -> None:
        if not isinstance(interrupt_on, Mapping):
            raise ConfigError(
                "interrupt_on must map tool names to True, False or "
                "{'allowed_decisions': [...]}; got " + type(interrupt_on).__name__
            )
        self._tools = tools
        self.prefix = description_prefix
        self.require_approver = require_approver
        self._reviews: dict[str, _Review] = {}
        for name, config in interrupt_on.items():
            if name not in tools:
                raise ConfigError(
                    f"interrupt_on names {name!r}, which is not one of the agent's tools "
                    f"({sorted(tools)})"
                )
            review = _review_of(name, config)
            if review is not None:
                self._reviews[name] = review

    def __bool__(self) -> bool:
        return bool(self._reviews)

    def needs(self, call: ToolCall) -> bool:
        """Whether ``call`` needs a decision before anything runs."""
        return call.get("name") in self._reviews

    def reviewed(self, calls: Sequence[ToolCall]) -> list[ToolCall]:
        """The calls (in order) that need a decision before anything runs."""
        return [c for c in calls if self.needs(c)]

    def request(
        self,
        calls: Sequence[ToolCall],
        error: str | None = None,
        binding: Binding | None = None,
    ) -> dict[str, Any]:
        """The interrupt value the reviewer sees (LangChain's HITL request shape); with a
        ``binding``, each action also names its effect id, recipient, masked arguments
        and request hash, and the request its own hash
        (:mod:`oncegraph.prebuilt.approval_binding`)."""
        actions = []
        configs = []
        for call in calls:
            review = self._reviews[call["name"]]
            named = binding.action(call, self._tools.get(call["name"])) if binding else {}
            actions.append(
                {
                    "name": call["name"],
                    "args": call["args"],
                    "description": self._describe(call, review, named.get("masked_args")),
                    "tool_call_id": call["id"],
                    **named,
                }
            )
            config: dict[str, Any] = {
                "action_name": call["name"],
                "allowed_decisions": list(review.allowed),
            }
            if "edit" in review.allowed:
                config["args_schema"] = self._tools[call["name"]].parameters
            configs.append(config)
        request: dict[str, Any] = {"action_requests": actions, "review_configs": configs}
        if binding is not None:
            request[HASH] = request_of(actions, binding.key)
        if error is not None:
            request["error"] = error
        return request

    def _describe(self, call: ToolCall, review: _Review, masked: Any = None) -> str:
        if callable(review.description):
            return str(review.description(call))
        if review.description is not None:
            return review.description
        shown = call["args"] if masked is None else masked  # never a masked field's value
        return f"{self.prefix}\n\nTool: {call['name']}\nArgs: {_json.dumps_str(shown)}"

    def decide(
        self,
        answer: Any,
        calls: Sequence[ToolCall],
        request: Mapping[str, Any] | None = None,
    ) -> list[Decision]:
        """The reviewer's decisions for ``calls``, or :class:`BadAnswer` saying what to fix
        (an answer naming another ``request`` hash than ``request``'s is one)."""
        approver: Any = None
        if request is not None and (why := stale(answer, request)) is not None:
            raise BadAnswer(why)
        if isinstance(answer, Mapping):
            unknown = set(answer) - {"decisions", "approver", HASH}
            if unknown:
                raise BadAnswer(
                    f"unknown answer key(s) {sorted(unknown)}; answer with "
                    "{'decisions': [...], 'approver': '<who decided>'}"
                )
            approver = answer.get("approver")
            decisions = answer.get("decisions")
        else:
            decisions = answer
        if not isinstance(decisions, Sequence) or isinstance(decisions, (str, bytes)):
            raise BadAnswer(
                "answer with {'decisions': [{'type': 'approve'} | {'type': 'edit', "
                "'edited_action': {'name', 'args'}} | {'type': 'reject', 'message': ...}, "
                f"...], 'approver': '<who decided>'}}; got {answer!r}"
            )
        if len(decisions) != len(calls):
            raise BadAnswer(
                f"{len(calls)} call(s) await a decision but the answer has {len(decisions)}; "
                "give one decision per action request, in order"
            )
        if approver is not None and not isinstance(approver, str):
            raise BadAnswer(f"'approver' must be a string naming who decided; got {approver!r}")
        return [
            self._decision(index, raw, call, approver)
            for index, (raw, call) in enumerate(zip(decisions, calls, strict=True), 1)
        ]

    def _decision(
        self, index: int, raw: Any, call: ToolCall, default_approver: str | None
    ) -> Decision:
        where = f"decision {index} ({call['name']}, call {call['id']})"
        if not isinstance(raw, Mapping):
            raise BadAnswer(f"{where} must be an object with a 'type'; got {raw!r}")
        kind = raw.get("type")
        allowed = self._reviews[call["name"]].allowed
        if kind not in DECISION_TYPES:
            raise BadAnswer(f"{where}: unknown type {kind!r}; use one of {list(allowed)}")
        if kind not in allowed:
            raise BadAnswer(f"{where}: {kind!r} is not allowed for this tool; use {list(allowed)}")
        approver = raw.get("approver", default_approver)
        if approver is not None and not isinstance(approver, str):
            raise BadAnswer(f"{where}: 'approver' must be a string; got {approver!r}")
        if approver is None and self.require_approver:
            raise BadAnswer(
                f"{where}: name who decided ('approver' in the answer or the decision); "
                "this agent requires it"
            )
        if kind == "approve":
            return Decision(call, "approve", approver, dict(call["args"]))
        if kind == "reject":
            message = raw.get("message")
            if message is not None and not isinstance(message, str):
                raise BadAnswer(f"{where}: 'message' must be a string; got {message!r}")
            return Decision(call, "reject", approver, dict(call["args"]), message)
        edited = raw.get("edited_action")
        if not isinstance(edited, Mapping) or not isinstance(edited.get("args"), Mapping):
            raise BadAnswer(
                f"{where}: an edit needs 'edited_action': {{'name': {call['name']!r}, "
                "'args': {...}}"
            )
        if edited.get("name", call["name"]) != call["name"]:
            raise BadAnswer(
                f"{where}: an edit keeps the tool ({call['name']!r}), got "
                f"{edited.get('name')!r}; reject the call with a message instead"
            )
        try:  # the ledger records JSON arguments, as a model sends them
            args = _json.loads(_json.dumps(dict(edited["args"])))
        except (TypeError, ValueError) as exc:
            raise BadAnswer(f"{where}: the edited arguments are not JSON: {exc}") from exc
        try:
            self._tools[call["name"]].validate(args)
        except ToolArgumentsError as exc:
            raise BadAnswer(f"{where}: the edited arguments do not fit the tool: {exc}") from exc
        return Decision(call, "edit", approver, args)


def _review_of(name: str, config: Any) -> _Review | None:
    if config is True:
        return _Review(DECISION_TYPES, None)
    if config is False or config is None:
        return None
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"interrupt_on[{name!r}] must be True, False or {{'allowed_decisions': [...]}}; "
            f"got {config!r}"
        )
    unknown = set(config) - {"allowed_decisions", "description"}
    if unknown:
        raise ConfigError(
            f"interrupt_on[{name!r}] has unknown key(s) {sorted(unknown)}; allowed: "
            "'allowed_decisions', 'description'"
        )
    allowed = config.get("allowed_decisions", list(DECISION_TYPES))
    if (
        isinstance(allowed, (str, bytes))
        or not isinstance(allowed, Sequence)
        or not allowed
        or any(a not in DECISION_TYPES for a in allowed)
    ):
        raise ConfigError(
            f"interrupt_on[{name!r}]['allowed_decisions'] must be a non-empty list of "
            f"{list(DECISION_TYPES)}; got {allowed!r}"
        )
    description = config.get("description")
    if description is not None and not (isinstance(description, str) or callable(description)):
        raise ConfigError(
            f"interrupt_on[{name!r}]['description'] must be a string or a function of the "
            f"tool call; got {description!r}"
        )
    return _Review(tuple(dict.fromkeys(allowed)), description)


class ApprovingToolNode:
    """The agent's tools step: asks for the decisions ``approvals`` requires (one
    ``interrupt`` for the turn), then runs the approved and edited calls through
    :class:`~oncegraph.tools.ToolNode` (so through the ledger, under the same command ids
    as without approval) and answers rejected ones itself."""

    __slots__ = ("__name__", "approvals", "node")

    def __init__(self, node: ToolNode, approvals: Approvals) -> None:
        self.node = node
        self.approvals = approvals
        self.__name__ = "tools"

    @property
    def effect_masks(self) -> dict[str, tuple[str, ...]]:
        return self.node.effect_masks

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools it runs (operator commands find a tool by name here)."""
        return self.node.tools

    def plan_intents(self, state: Any, **where: Any) -> list[EffectRecord]:
        """The tool node's planned intents (:mod:`oncegraph.ledger.planned`), unless a
        call of the turn needs a decision first: a call a reviewer may reject or edit is
        not planned."""
        calls = list(lcmessages.last_message(state).get("tool_calls") or ())
        if self.approvals and self.approvals.reviewed(calls):
            return []
        return self.node.plan_intents(state, **where)

    def __oncegraph_fingerprint__(self) -> list[str]:
        """Its tools, as :class:`~oncegraph.tools.ToolNode` gives them."""
        return self.node.__oncegraph_fingerprint__()

    async def __call__(self, state: Any) -> Any:
        messages = lcmessages.messages_of(state)
        last = lcmessages.last_message(messages)
        calls: list[ToolCall] = list(last.get("tool_calls") or ())
        reviewed = self.approvals.reviewed(calls) if self.approvals else []
        if not reviewed:
            return await self.node(state)
        ctx = current_task()
        assert ctx is not None
        message_id = str(last.get("id") or "")
        if not message_id:
            raise ConfigError("the assistant message has no id; store messages via add_messages")
        refused = self.node.refuse(ctx, messages, message_id, list(calls))
        if refused is not None:  # over a limit: nobody is asked to review what cannot run
            return {"messages": refused}
        binding = Binding(ctx.key_run_id, message_id, await hash_key(ctx.store))
        answers = iter(ask(self.approvals, reviewed, binding))
        decisions = [next(answers) if self.approvals.needs(c) else None for c in calls]
        edits = [d.args if d is not None and d.type == "edit" else None for d in decisions]
        final_calls = [
            call if args is None else {**call, "args": args}
            for call, args in zip(calls, edits, strict=True)
        ]
        replies = await self._replies(ctx, message_id, final_calls, decisions)
        edited = [{**last, "tool_calls": final_calls}] if any(a is not None for a in edits) else []
        return {
            "messages": [*edited, *replies],
            "approvals": [d.record(ctx.run_id, message_id) for d in decisions if d is not None],
        }

    async def _replies(
        self,
        ctx: TaskContext,
        message_id: str,
        calls: list[Any],
        decisions: list[Decision | None],
    ) -> list[Any]:
        """One reply per call, in order: the tool node's for those that run (all at once),
        the reviewer's rejection for the others."""
        rejected = [d is not None and d.type == "reject" for d in decisions]
        to_run = [call for call, no in zip(calls, rejected, strict=True) if not no]
        results = iter(await self.node.run_calls(ctx, message_id, to_run) if to_run else [])
        return [
            _rejected(ctx, message_id, d) if d is not None and no else next(results)
            for d, no in zip(decisions, rejected, strict=True)
        ]


def ask(
    approvals: Approvals, reviewed: list[ToolCall], binding: Binding | None = None
) -> list[Decision]:
    """Interrupt until the reviewer's answer fits; each misfit is asked again with why.

    With a ``binding``, an edit is not the final word: the edited call is asked about
    again as a new request (its own hash), and only its approval lets it run; its
    rejection rejects the call; another edit asks again."""
    error: str | None = None
    pending = list(reviewed)
    original = {c["id"]: c for c in reviewed}
    final: dict[Any, Decision] = {}
    while True:
        request = approvals.request(pending, error, binding)
        answer = interrupt(request)
        try:
            decisions = approvals.decide(answer, pending, request if binding else None)
        except BadAnswer as exc:
            error = str(exc)
            continue
        error = None
        again: list[ToolCall] = []
        for decision in decisions:
            call_id = decision.call["id"]
            first = original[call_id]
            if decision.type == "edit" and binding is not None:
                again.append({**decision.call, "args": decision.args})  # a new request
            elif decision.call is first:  # decided on as the model proposed it
                final[call_id] = decision
            elif decision.type == "approve":  # the edited call, approved as edited
                final[call_id] = Decision(first, "edit", decision.approver, decision.args)
            else:  # the edited call, rejected
                final[call_id] = Decision(
                    first, "reject", decision.approver, dict(first["args"]), decision.message
                )
        if not again:
            return [final[c["id"]] for c in reviewed]
        pending = again


def _rejected(ctx: TaskContext, message_id: str, decision: Decision) -> Message:
    reply = tool_reply(ctx, message_id, decision.call, "error", rejection_message(decision))
    return reply  # type: ignore[return-value]


def rejection_message(decision: Decision) -> str:
    """What the model reads for a rejected call."""
    call = decision.call
    if decision.message:
        return f"Rejected by the reviewer: {decision.message}"
    return (
        f"Rejected by the reviewer: the call of {call['name']} (id {call['id']}) was not "
        "approved and did not run."
    )


__all__ = [
    "DECISION_TYPES",
    "Approvals",
    "ApprovingToolNode",
    "BadAnswer",
    "Decision",
    "DecisionType",
    "InterruptOnConfig",
]
