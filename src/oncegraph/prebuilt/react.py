"""``create_react_agent``: LangGraph's function that builds a tool-calling agent, made
of oncegraph's :class:`~oncegraph.prebuilt.agent.ReactAgent` (the same graph: ``agent``
-> ``tools`` -> ``agent`` ... until the model answers without tool calls)::

    app = create_react_agent(model, [search], prompt="Be brief.", checkpointer=saver)

So a program that builds its agent with LangGraph's call runs with every model turn and
tool call through the effect ledger. The parts of LangGraph's signature that hand the
agent code to run around the model (``pre_model_hook``, ``post_model_hook``, a callable
or Runnable ``prompt``, a model chosen per call, a custom ``state_schema``) are refused
with an error naming the graph to build instead: a ``StateGraph`` with a node of your own
before or after a ``ReactAgent``'s graph (``ReactAgent(...).graph()``).

The agent's turns are bounded by the run's ``recursion_limit``, as in LangGraph (no
``max_turns`` of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from oncegraph.errors import ConfigError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.tools.node import ToolNode

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

    from oncegraph.app import CompiledGraph
    from oncegraph.storage.protocols import Checkpointer

_BUILD_INSTEAD = (
    "build the graph instead: a StateGraph with your own node before or after the "
    "agent's graph (ReactAgent(model, tools=...).graph())"
)


def _system_prompt(prompt: Any) -> str | list[dict[str, Any]] | None:
    """``prompt`` as the agent's system prompt: a string, or a system message (a
    LangChain ``SystemMessage`` or a ``{"role": "system", ...}`` dict)."""
    if prompt is None or isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Mapping) and "content" in prompt:
        return [{"role": "system", "content": prompt["content"]}]
    if getattr(prompt, "type", None) == "system" and hasattr(prompt, "content"):
        return [{"role": "system", "content": prompt.content}]
    raise ConfigError(
        f"create_react_agent(prompt={prompt!r}): a prompt is a string or a system message; "
        f"a callable or Runnable prompt runs code before each model call, so {_BUILD_INSTEAD}"
    )


def _tools(tools: Sequence[Any] | ToolNode) -> list[Any]:
    if isinstance(tools, ToolNode):
        return list(tools.tools.values())
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise ConfigError(
            f"create_react_agent(model, tools={tools!r}): tools is a list of tools (functions, "
            "@tool tools, LangChain tools) or a ToolNode"
        )
    return list(tools)


def create_react_agent(
    model: Any,
    tools: Sequence[Any] | ToolNode,
    *,
    prompt: str | Mapping[str, Any] | BaseMessage | None = None,
    response_format: type[Any] | Mapping[str, Any] | None = None,
    pre_model_hook: Callable[..., Any] | None = None,
    post_model_hook: Callable[..., Any] | None = None,
    state_schema: type[Any] | None = None,
    context_schema: type[Any] | None = None,
    checkpointer: Checkpointer | None = None,
    store: Any = None,
    interrupt_before: Sequence[str] | None = None,
    interrupt_after: Sequence[str] | None = None,
    debug: bool = False,
    version: Literal["v1", "v2"] = "v2",
    name: str | None = None,
) -> CompiledGraph:
    """A compiled tool-calling agent, as LangGraph's ``create_react_agent`` builds it
    (see the module docstring for what is refused). ``model`` is a LangChain chat model,
    a :class:`~oncegraph.prebuilt.models.ChatModel` or a model id; ``tools`` a list of
    tools or a ``ToolNode``; ``prompt`` a string or system message; ``response_format``
    a pydantic model or JSON schema for a structured final answer
    (``structured_response`` in the state). ``version`` (``"v1"`` / ``"v2"``) is
    LangGraph's way of fanning tool calls out; both run a turn's calls in one
    ``tools`` step here."""
    for given, what in (
        (pre_model_hook, "pre_model_hook"),
        (post_model_hook, "post_model_hook"),
        (state_schema, "state_schema"),
    ):
        if given is not None:
            raise ConfigError(
                f"create_react_agent({what}=...) is not supported: it runs code of yours "
                f"inside the agent's loop; {_BUILD_INSTEAD}"
            )
    if callable(model) and not hasattr(model, "invoke") and not hasattr(model, "generate"):
        raise ConfigError(
            "create_react_agent(model=<function>): a model chosen per call is not "
            f"supported; pass the chat model itself, or {_BUILD_INSTEAD}"
        )
    if version not in ("v1", "v2"):
        raise ConfigError(f"create_react_agent(version={version!r}): 'v1' or 'v2'")
    agent = ReactAgent(
        model,
        system_prompt=_system_prompt(prompt),
        tools=_tools(tools),
        name=name or "LangGraph",
        max_turns=None,
        response_format=response_format,
    )
    graph = agent.graph()
    if context_schema is not None:
        graph.context_schema = context_schema
    return graph.compile(
        checkpointer=checkpointer,
        store=store,
        interrupt_before=interrupt_before,
        interrupt_after=interrupt_after,
        debug=debug,
    )


__all__ = ["create_react_agent"]
