"""``ReactAgent``: a model that calls tools in a loop, every call through the ledger.

::

    app = ReactAgent(model="google/gemini-2.5-flash", provider="google",
                     system_prompt=[{"role": "system", "content": "..."}],
                     tools=[lookup_order, refund_order]).compile(checkpointer=...)

The graph is ``agent`` (one model turn) -> ``tools`` (the turn's tool calls) -> ``agent``
... until the model answers without tool calls.

Invariants:

* The model call is an effect of class ``model`` (:mod:`oncegraph.prebuilt.model_call`):
  its response is recorded, so a resumed run reuses the answer and the assistant message
  keeps its id, which keeps the tool calls' command ids, and so their ledger keys,
  stable. The recorded request names the state it was made from (checkpoint, message
  count, last message id) instead of copying the conversation, so storage per step stays
  flat. Retries with backoff and fallback models happen inside that one effect.
* The assistant message id is ``ai_<run tag>_<effect id>``: it names the run (a hash of
  its id) and the turn. The turns of the current run are the assistant messages with its
  tag, so ``max_turns`` counts model turns per run without any extra state.
* ``max_turns``: a turn that would need another (it asks for tools, or its structured
  answer must be retried) when ``max_turns`` turns were made already stops the run
  before anything else is called: ``on_max_turns="error"`` (the default) fails it with
  :class:`~oncegraph.errors.TurnLimitError` (the turn stays recorded: continuing the run
  after raising the limit runs its tools without asking the model again);
  ``"finish"`` ends it with a final assistant message instead.
* Approval (``interrupt_on``, :mod:`oncegraph.prebuilt.approval`) happens in the tools
  node before any call of the turn runs; decisions are kept in state (``approvals``).
* Structured output (``response_format``, :mod:`oncegraph.prebuilt.structured`) is kept
  in state (``structured_response``).
* Token streaming: when the caller streams ``"messages"`` (``ctx.streams("messages")``)
  and the model can stream, each text delta is emitted as ``("messages", (chunk,
  metadata))`` with ``chunk = {"role": "assistant", "content": delta, "id": <the
  id of the assistant message the turn becomes>}``; the recorded response is still the
  whole message. Otherwise the model is called without streaming.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired, TypedDict

from oncegraph import _json
from oncegraph.errors import (
    ConfigError,
    ModelCallError,
    StructuredOutputError,
    TurnLimitError,
)
from oncegraph.graph import END, START, StateGraph
from oncegraph.ledger.keys import effect_id_for, next_command_id
from oncegraph.ledger.perform import EffectCall, ToolFailed, perform
from oncegraph.ledger.retry import EffectRetry
from oncegraph.messages import Message, ToolCall, ToolSpec
from oncegraph.prebuilt.approval import (
    DEFAULT_PREFIX,
    Approvals,
    ApprovingToolNode,
    InterruptOnConfig,
)
from oncegraph.prebuilt.model_call import ModelChain, Tries
from oncegraph.prebuilt.models import ChatModel, ModelResponse, resolve_model
from oncegraph.prebuilt.models.base import OnText
from oncegraph.prebuilt.structured import Invalid, ResponseFormat
from oncegraph.runtime.context import TaskContext, current_task
from oncegraph.runtime.tasks import stream_metadata
from oncegraph.state import lcmessages
from oncegraph.state.reducers import add_messages, append
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectClass
from oncegraph.tools.limits import ToolLimits
from oncegraph.tools.node import ToolNode, tool_identity
from oncegraph.tools.tool import ToolLike, as_tool

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from oncegraph.app import CompiledGraph

DEFAULT_MAX_TURNS = 25
FINISH_TEXT = (
    "Sorry, I could not finish this request within {max_turns} steps. Please ask again, "
    "perhaps in smaller parts."
)
ANSWER_RECORDED = "Answer recorded."


class AgentState(TypedDict):
    """The state of a plain agent; with ``interrupt_on`` it also has ``approvals``, with
    ``response_format`` a ``structured_response``."""

    messages: Annotated[list[Message], add_messages]


def _system_messages(prompt: str | Sequence[Mapping[str, Any]] | None) -> list[Message]:
    if prompt is None:
        return []
    if isinstance(prompt, str):
        return [{"role": "system", "content": prompt}]
    out: list[Message] = []
    for item in prompt:
        if not isinstance(item, Mapping) or "content" not in item:
            raise ConfigError(
                "system_prompt must be a string or a list of {'role': 'system', 'content': ...}"
            )
        out.append({"role": item.get("role", "system"), "content": item["content"]})
    return out


def tools_condition(state: Any) -> str:
    """Route to ``tools`` when the last message asks for tool calls, else END."""
    last = lcmessages.last_message(state)
    return "tools" if last.get("role") == "assistant" and last.get("tool_calls") else END


def _run_tag(run_id: str) -> str:
    return hashlib.sha256(run_id.encode()).hexdigest()[:12]


def _id(message: Any) -> str:
    value = message.get("id") if isinstance(message, Mapping) else getattr(message, "id", None)
    return value or ""


class ReactAgent:
    """A tool-calling agent graph. ``model`` is a model id (``"openai/gpt-4o-mini"``, or
    LangChain's ``"openai:gpt-4o-mini"`` through ``init_chat_model``), a
    :class:`~oncegraph.prebuilt.models.ChatModel` or a LangChain chat model
    (``ChatOpenAI(...)``). ``tools`` are functions, :class:`Tool`\\ s (``@tool``, MCP
    tools) or LangChain ``BaseTool``\\ s.

    ``max_turns`` (default 25, ``None``: no limit) bounds the model turns of one run, and
    ``on_max_turns`` says what happens at the limit (``"error"`` or ``"finish"``).
    ``interrupt_on`` asks for approval before chosen tools (LangChain's
    ``HumanInTheLoopMiddleware`` shape; ``require_approver=True`` refuses answers that do
    not name who decided). ``response_format`` asks for a structured final answer, retried
    at most ``response_retries`` times. ``model_retry`` is the policy for model calls
    (default: 3 tries with backoff; the recorded retry layer: a LangChain model's own
    ``max_retries`` happen inside one recorded try); ``fallback_models`` are tried in
    order after the primary's tries all failed. ``model_options`` go to the primary
    model's adapter (or to ``init_chat_model``) when ``model`` is an id string.
    ``tool_limits`` bounds the tool calls a turn and a run may
    ask for and how many run at once (:class:`~oncegraph.tools.limits.ToolLimits`; the
    defaults refuse a 2,000-call turn and tell the model why).
    """

    def __init__(
        self,
        model: str | ChatModel | BaseChatModel,
        provider: str | None = None,
        system_prompt: str | Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[ToolLike] = (),
        *,
        name: str = "react_agent",
        version: str | int = "1",
        max_turns: int | None = DEFAULT_MAX_TURNS,
        on_max_turns: Literal["error", "finish"] = "error",
        interrupt_on: Mapping[str, bool | InterruptOnConfig] | None = None,
        description_prefix: str = DEFAULT_PREFIX,
        require_approver: bool = False,
        response_format: Any = None,
        response_retries: int = 2,
        model_retry: EffectRetry | None = None,
        fallback_models: Sequence[str | ChatModel | BaseChatModel] = (),
        tool_limits: ToolLimits | None = None,
        **model_options: Any,
    ) -> None:
        self.model = resolve_model(model, provider, **model_options)
        self.system = _system_messages(system_prompt)
        self.tools = [as_tool(t) for t in tools]
        self.name = name
        self.version = str(version)
        if max_turns is not None and (
            not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1
        ):
            raise ConfigError(f"max_turns must be a positive integer or None; got {max_turns!r}")
        if on_max_turns not in ("error", "finish"):
            raise ConfigError(f"on_max_turns must be 'error' or 'finish'; got {on_max_turns!r}")
        if not isinstance(response_retries, int) or response_retries < 0:
            raise ConfigError(f"response_retries must be an integer >= 0; got {response_retries!r}")
        self.max_turns = max_turns
        self.on_max_turns = on_max_turns
        self.response_retries = response_retries
        by_name = {t.name: t for t in self.tools}
        if len(by_name) != len(self.tools):
            raise ConfigError("two tools share a name; give each tool a unique name")
        self.approvals = Approvals(
            interrupt_on or {},
            by_name,
            description_prefix=description_prefix,
            require_approver=require_approver,
        )
        self.format = ResponseFormat(response_format) if response_format is not None else None
        if self.format is not None and self.format.name in by_name:
            raise ConfigError(
                f"response_format {self.format.name!r} has the name of a tool; rename one"
            )
        fallbacks = [resolve_model(m) for m in fallback_models]
        self.chain = ModelChain([self.model, *fallbacks], model_retry)
        self._specs: list[ToolSpec] = [t.spec for t in self.tools]
        if self.format is not None:
            self._specs.append(self.format.spec)
        self._tools = ApprovingToolNode(ToolNode(self.tools, limits=tool_limits), self.approvals)
        self._system_hash = hashlib.sha256(_json.canonical(self.system)).hexdigest()[:16]

    def __oncegraph_fingerprint__(self) -> list[str]:
        """What makes this agent itself, in its graph's fingerprint (its ``agent`` node's
        part): each model's class and name (fallbacks too), the system prompt and the
        tools (names, parameter schemas, effect classes), and the response format. Two
        agents that differ in any of these never share a fingerprint."""
        parts = [
            f"model:{type(m).__module__}.{type(m).__qualname__}:{m.name}"
            for m in self.chain.models
        ]
        parts.append("prompt:" + hashlib.sha256(_json.canonical(self.system)).hexdigest())
        parts.extend(tool_identity(self.tools))
        if self.format is not None:
            spec = _json.canonical(self.format.spec)
            parts.append("format:" + hashlib.sha256(spec).hexdigest())
        return parts

    # -- the model turn --------------------------------------------------------------------

    async def _agent(self, state: Mapping[str, Any]) -> dict[str, Any]:
        ctx = current_task()
        assert ctx is not None
        messages: list[Message] = list(state["messages"])
        own = f"ai_{_run_tag(ctx.key_run_id)}_"
        turn = 0  # this run's turns so far + this one; counted only when there is a limit
        if self.max_turns is not None:
            turn = 1 + sum(1 for m in messages if _id(m).startswith(own))
        model = self.model
        command_id = next_command_id(ctx)
        effect_type = f"model:{model.name}"
        message_id = own + effect_id_for(ctx.key_run_id, effect_type, command_id)[:20]
        request: dict[str, Any] = {
            "model": model.name,
            "checkpoint_id": ctx.checkpoint_id,
            "n_messages": len(messages),
            "last_message_id": _id(messages[-1]) if messages else None,
            "system": self._system_hash,
            "tools": [s["name"] for s in self._specs],
        }
        if len(self.chain.models) > 1:
            request["fallbacks"] = self.chain.fallback_names
        on_text = _token_sink(ctx, message_id) if ctx.streams("messages") else None
        call, tries = self.chain.attempt([*self.system, *messages], self._specs, on_text)
        try:
            performed = await perform(
                ctx,
                EffectCall(
                    effect_type=effect_type,
                    effect_class=EffectClass.MODEL,
                    command_id=command_id,
                    request=request,
                    fn=call,
                    retry=self.chain.policy,
                    fold=True,
                    commit_if_retried=True,
                ),
            )
        except ToolFailed as failed:
            raise ModelCallError(_failed_text(ctx, self.chain, tries)) from failed.error
        response = ModelResponse.from_json(performed.result)
        return self._after_model(ctx, messages, response, message_id, turn)

    def _after_model(
        self,
        ctx: TaskContext,
        messages: list[Message],
        response: ModelResponse,
        message_id: str,
        turn: int,
    ) -> dict[str, Any]:
        message = response.to_message(message_id)
        calls = list(response.tool_calls)
        fmt = self.format
        if fmt is not None:
            answers = [c for c in calls if c["name"] == fmt.name]
            if answers and len(calls) > 1:
                error = (
                    f"call {fmt.name} alone, once, after your other tools have answered; "
                    "none of this turn's calls ran"
                )
                return self._retry(ctx, messages, message, turn, error, calls)
            if answers:
                try:
                    value = fmt.validate(answers[0]["args"])
                except Invalid as exc:
                    return self._retry(ctx, messages, message, turn, str(exc), calls)
                done: Message = {
                    "role": "tool",
                    "content": ANSWER_RECORDED,
                    "tool_call_id": answers[0]["id"],
                    "name": fmt.name,
                    "status": "success",
                    "id": "ans_" + message_id.removeprefix("ai_"),
                }
                return {"messages": [message, done], "structured_response": value}
            if not calls:
                try:
                    value = fmt.from_text(response.content)
                except Invalid as exc:
                    return self._retry(ctx, messages, message, turn, str(exc), [])
                return {"messages": [message], "structured_response": value}
        if calls and self.max_turns is not None and turn >= self.max_turns:
            return self._at_limit(ctx, message, [c["name"] for c in calls])
        return {"messages": [message]}

    def _retry(
        self,
        ctx: TaskContext,
        messages: list[Message],
        message: Message,
        turn: int,
        error: str,
        calls: list[ToolCall],
    ) -> dict[str, Any]:
        """The answer does not fit ``response_format``: tell the model, or stop."""
        assert self.format is not None
        if self.max_turns is not None and turn >= self.max_turns:
            return self._at_limit(ctx, message, [self.format.name])
        fix = "fix_" + message["id"].removeprefix("ai_")
        tag = fix[: len("fix_") + 12]
        used = {_id(m)[: len(fix)] for m in messages if _id(m).startswith(tag)}
        if len(used) >= self.response_retries:
            raise StructuredOutputError(
                f"the model did not give an answer that fits {self.format.name} in "
                f"{len(used) + 1} tries (response_retries={self.response_retries}); last "
                f"problem: {error}. The run {ctx.run_id} failed; continue it with "
                "invoke(None, config) to ask again, or abandon it"
            )
        text = f"Error: {error}. Give the final answer again by calling {self.format.name}."
        if calls:
            replies: list[Message] = [
                {
                    "role": "tool",
                    "content": text,
                    "tool_call_id": call["id"],
                    "name": call["name"],
                    "status": "error",
                    "id": f"{fix}_{index}",
                }
                for index, call in enumerate(calls)
            ]
        else:
            replies = [{"role": "user", "content": text, "id": f"{fix}_0"}]
        return {"messages": [message, *replies]}

    def _at_limit(self, ctx: TaskContext, message: Message, wanted: list[str]) -> dict[str, Any]:
        if self.on_max_turns == "finish":
            final: Message = {
                "role": "assistant",
                "content": FINISH_TEXT.format(max_turns=self.max_turns),
                "id": message["id"],
            }
            return {"messages": [final]}
        raise TurnLimitError(
            f"agent {self.name!r} made max_turns={self.max_turns} model turns in run "
            f"{ctx.run_id} and the last one still asked for {', '.join(wanted)}, which did "
            f"not run. Raise the limit (ReactAgent(..., max_turns=N)) and continue the run "
            "with invoke(None, config) (the recorded turn is reused), pass "
            "on_max_turns='finish' to end such runs with a message, or abandon the run"
        )

    def _route(self, state: Any) -> str:
        last = lcmessages.last_message(state)
        if last.get("role") == "assistant" and last.get("tool_calls"):
            return "tools"
        if str(last.get("id") or "").startswith("fix_"):
            return "agent"
        return END

    # -- the graph -------------------------------------------------------------------------

    def state_schema(self) -> Any:
        """The graph's state: ``AgentState``, plus ``approvals`` with ``interrupt_on`` and
        ``structured_response`` with ``response_format``."""
        if not self.approvals and self.format is None:
            return AgentState
        fields: dict[str, Any] = {"messages": Annotated[list[Message], add_messages]}
        if self.approvals:
            fields["approvals"] = NotRequired[Annotated[list[dict[str, Any]], append]]
        if self.format is not None:
            fields["structured_response"] = NotRequired[self.format.state_type]
        return TypedDict("AgentState", fields)  # type: ignore[operator]

    def graph(self) -> StateGraph:
        g = StateGraph(self.state_schema(), name=self.name, version=self.version)
        g.add_node("agent", self._agent)
        g.add_edge(START, "agent")
        targets: dict[Hashable, str] = {END: END}
        if self.tools:
            g.add_node("tools", self._tools)
            g.add_edge("tools", "agent")
            targets["tools"] = "tools"
        if self.format is not None:
            targets["agent"] = "agent"
        if len(targets) == 1:
            g.add_edge("agent", END)
        else:
            g.add_conditional_edges("agent", self._route, targets)
        return g

    def compile(
        self, checkpointer: Checkpointer | None = None, *, strict: bool = False
    ) -> CompiledGraph:
        """The runnable app (``StateGraph.compile``; ``strict=True``: a ``write`` tool
        that never reads its idempotency key is a ``ConfigError``, not a warning)."""
        return self.graph().compile(checkpointer=checkpointer, strict=strict)


def _token_sink(ctx: TaskContext, message_id: str) -> OnText:
    emit: Callable[[str, Any], None] = ctx.emit
    metadata = {**stream_metadata(ctx), "run_id": ctx.run_id}

    def on_text(delta: str) -> None:
        if delta:
            emit("messages", ({"role": "assistant", "content": delta, "id": message_id}, metadata))

    return on_text


def _failed_text(ctx: TaskContext, chain: ModelChain, tries: Tries) -> str:
    names = ", ".join(m.name for m in chain.models)
    return (
        f"the model call failed on every try ({chain.per_model} per model; models: {names}): "
        f"{tries.describe()}. The run {ctx.run_id} failed; continue it with "
        "invoke(None, config) to try again"
    )


__all__ = ["AgentState", "ReactAgent", "tools_condition"]
