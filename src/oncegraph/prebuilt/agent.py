"""``ReactAgent``: a model that calls tools in a loop, every call through the ledger.

::

    app = ReactAgent(model="google/gemini-2.5-flash", provider="google",
                     system_prompt=[{"role": "system", "content": "..."}],
                     tools=[lookup_order, refund_order]).compile(checkpointer=...)

The model call is an effect of class ``model``: its response is recorded (folded into
the step's checkpoint), so a resumed run reuses the answer and the assistant message keeps
its id, which keeps the tool calls' command ids, and so their ledger keys, stable.
The recorded request names the state it was made from (checkpoint, message count, last
message id) instead of copying the conversation, so storage per step stays flat.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypedDict

from oncegraph import _json
from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError
from oncegraph.graph import END, START, StateGraph
from oncegraph.ledger.keys import next_command_id
from oncegraph.ledger.perform import EffectCall, perform
from oncegraph.messages import Message
from oncegraph.prebuilt.models import ChatModel, ModelResponse, resolve_model
from oncegraph.runtime.context import current_task
from oncegraph.state import lcmessages
from oncegraph.state.reducers import add_messages
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectClass
from oncegraph.tools.node import ToolNode
from oncegraph.tools.tool import Tool, as_tool


class AgentState(TypedDict):
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
    if isinstance(state, list):
        messages: Any = state
    elif isinstance(state, Mapping):
        messages = state.get("messages") or []
    else:
        messages = getattr(state, "messages", None) or []
    last = messages[-1] if messages else {}
    if lcmessages.is_message(last):
        last = lcmessages.to_message_dict(last)
    return "tools" if last.get("role") == "assistant" and last.get("tool_calls") else END


class ReactAgent:
    def __init__(
        self,
        model: str | ChatModel,
        provider: str | None = None,
        system_prompt: str | Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Tool | Callable[..., Any]] = (),
        *,
        name: str = "react_agent",
        version: str | int = "1",
        **model_options: Any,
    ) -> None:
        self.model = resolve_model(model, provider, **model_options)
        self.system = _system_messages(system_prompt)
        self.tools = [as_tool(t) for t in tools]
        self.name = name
        self.version = str(version)
        self._system_hash = hashlib.sha256(_json.canonical(self.system)).hexdigest()[:16]

    async def _agent(self, state: Mapping[str, Any]) -> dict[str, Any]:
        ctx = current_task()
        assert ctx is not None
        messages: list[Message] = list(state["messages"])
        specs = [t.spec for t in self.tools]
        model = self.model
        prompt = [*self.system, *messages]
        request = {
            "model": model.name,
            "checkpoint_id": ctx.checkpoint_id,
            "n_messages": len(messages),
            "last_message_id": messages[-1].get("id") if messages else None,
            "system": self._system_hash,
            "tools": [s["name"] for s in specs],
        }
        async def call() -> Any:
            response = await model.generate(prompt, tools=specs)
            return response.to_json()

        performed = await perform(
            ctx,
            EffectCall(
                effect_type=f"model:{model.name}",
                effect_class=EffectClass.MODEL,
                command_id=next_command_id(ctx),
                request=request,
                fn=call,
                fold=True,
            ),
        )
        response = ModelResponse.from_json(performed.result)
        return {"messages": [response.to_message("ai_" + performed.effect_id[:32])]}

    def graph(self) -> StateGraph:
        g = StateGraph(AgentState, name=self.name, version=self.version)
        g.add_node("agent", self._agent)
        g.add_edge(START, "agent")
        if self.tools:
            g.add_node("tools", ToolNode(self.tools))
            g.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
            g.add_edge("tools", "agent")
        else:
            g.add_edge("agent", END)
        return g

    def compile(self, checkpointer: Checkpointer | None = None) -> CompiledGraph:
        return self.graph().compile(checkpointer=checkpointer)
