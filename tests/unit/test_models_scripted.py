"""The chat-model port without a provider: ModelResponse, ScriptedModel, resolve_model.

ScriptedModel is what the agent tests and the demo run on, so its determinism across a
"process restart" (a fresh object fed the persisted conversation) is pinned here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import pytest

from oncegraph import _json
from oncegraph.errors import ConfigError
from oncegraph.messages import Message, ToolSpec
from oncegraph.prebuilt.models import ChatModel, ModelResponse, ScriptedModel, resolve_model

TOOLS: list[ToolSpec] = [
    {
        "name": "refund_order",
        "description": "Refund an order.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["order_id", "amount"],
        },
    }
]

SCRIPT: list[Any] = [
    {
        "content": "",
        "tool_calls": [{"name": "refund_order", "args": {"order_id": "1042", "amount": 59.0}}],
    },
    "Refunded 59.00 for order 1042.",
]


def _user(text: str) -> Message:
    return {"role": "user", "content": text, "id": "m-user"}


# -- ModelResponse -------------------------------------------------------------------


def test_response_json_round_trip_through_bytes() -> None:
    response = ModelResponse(
        content="checking",
        tool_calls=({"id": "call_9", "name": "lookup_order", "args": {"order_id": "7"}},),
        provider_message_id="resp-1",
        usage={"input_tokens": 10, "output_tokens": 3, "total_tokens": 13},
        raw_finish_reason="tool_calls",
    )
    stored = _json.dumps(response.to_json())
    assert ModelResponse.from_json(stored) == response
    assert ModelResponse.from_json(_json.loads(stored)) == response


def test_to_message_builds_the_assistant_message_with_its_id() -> None:
    args = {"order_id": "1042", "nested": {"amount": 59.0}}
    response = ModelResponse(tool_calls=({"id": "call_1", "name": "refund_order", "args": args},))
    message = response.to_message("msg-7")
    assert message == {
        "role": "assistant",
        "content": "",
        "id": "msg-7",
        "tool_calls": [{"id": "call_1", "name": "refund_order", "args": args}],
    }
    message["tool_calls"][0]["args"]["nested"]["amount"] = 0
    assert response.tool_calls[0]["args"]["nested"]["amount"] == 59.0  # no aliasing


def test_to_message_without_tool_calls_has_no_tool_calls_key() -> None:
    assert ModelResponse(content="hi").to_message("m1") == {
        "role": "assistant",
        "content": "hi",
        "id": "m1",
    }


def test_from_json_fills_defaults_and_positional_ids() -> None:
    response = ModelResponse.from_json(
        {"tool_calls": [{"name": "a"}, {"name": "b", "args": {"x": 1}, "id": "given"}]}
    )
    assert response.content == ""
    assert [c["id"] for c in response.tool_calls] == ["call_1", "given"]
    assert response.tool_calls[0]["args"] == {}
    assert response.usage == {}
    assert response.provider_message_id is None


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"contnet": "typo"}, "unknown model response field"),
        ({"content": 3}, "'content' must be a string"),
        ({"tool_calls": "refund"}, "'tool_calls' must be a list"),
        ({"tool_calls": [{"args": {}}]}, "non-empty string 'name'"),
        ({"tool_calls": [{"name": "a", "arguments": "{}"}]}, "unknown field"),
        ({"tool_calls": [{"name": "a", "args": "{}"}]}, "'args' must be an object"),
        ({"tool_calls": [{"name": "a", "id": "x"}, {"name": "b", "id": "x"}]}, "appears twice"),
        ({"usage": {"input_tokens": "3"}}, "'usage' must map str to int"),
        ({"raw_finish_reason": 1}, "'raw_finish_reason' must be a string"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_from_json_rejects_bad_data_naming_the_field(data: Any, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        ModelResponse.from_json(data)


# -- ScriptedModel -------------------------------------------------------------------


async def test_script_position_is_the_number_of_assistant_messages() -> None:
    model = ScriptedModel(SCRIPT)
    conversation: list[Message] = [_user("refund order 1042")]
    first = await model.generate(conversation, tools=TOOLS)
    assert first.tool_calls == (
        {"id": "call_1", "name": "refund_order", "args": {"order_id": "1042", "amount": 59.0}},
    )
    conversation.append(first.to_message("m-a1"))
    conversation.append(
        {"role": "tool", "content": "Refunded", "tool_call_id": "call_1", "id": "m-t1"}
    )
    second = await model.generate(conversation, tools=TOOLS)
    assert second == ModelResponse(content="Refunded 59.00 for order 1042.")
    # asking again for the same conversation gives the same answer (no hidden counter)
    assert await model.generate(conversation, tools=TOOLS) == second


async def test_a_fresh_model_after_a_restart_answers_the_persisted_turn() -> None:
    before_crash = ScriptedModel(SCRIPT)
    first = await before_crash.generate([_user("refund")], tools=TOOLS)
    persisted: list[Message] = [
        _user("refund"),
        first.to_message("m-a1"),
        {"role": "tool", "content": "ok", "tool_call_id": "call_1", "id": "m-t1"},
    ]
    after_restart = ScriptedModel(SCRIPT)  # new process, new object, empty history
    response = await after_restart.generate(persisted, tools=TOOLS)
    assert response.content == "Refunded 59.00 for order 1042."
    assert len(after_restart.calls) == 1


async def test_turns_constructor_matches_the_default() -> None:
    model = ScriptedModel.turns("one", "two", name="demo")
    assert model.name == "demo"
    assert (await model.generate([_user("x")], tools=[])).content == "one"
    assistant: Message = {"role": "assistant", "content": "one", "id": "a"}
    assert (await model.generate([_user("x"), assistant], tools=[])).content == "two"


async def test_index_by_calls_counts_calls_in_memory() -> None:
    model = ScriptedModel(["one", "two"], index_by="calls")
    assert (await model.generate([_user("x")], tools=[])).content == "one"
    assert (await model.generate([_user("x")], tools=[])).content == "two"
    with pytest.raises(ConfigError, match=r"call number 3"):
        await model.generate([_user("x")], tools=[])


async def test_exhausted_script_raises_a_clear_error() -> None:
    model = ScriptedModel(["only"], name="demo")
    conversation: list[Message] = [
        _user("a"),
        {"role": "assistant", "content": "only", "id": "a1"},
        _user("b"),
    ]
    with pytest.raises(ConfigError, match=r"'demo' has 1 response\(s\) but was asked for turn 1"):
        await model.generate(conversation, tools=[])


async def test_callable_entries_see_messages_and_tools() -> None:
    def decide(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        order = str(messages[-1]["content"]).split()[-1]
        return {"tool_calls": [{"name": tools[0]["name"], "args": {"order_id": order}, "id": "c1"}]}

    async def summarize(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
        return f"done: {messages[-1]['content']}"

    model = ScriptedModel([decide, summarize])
    first = await model.generate([_user("refund 77")], tools=TOOLS)
    assert first.tool_calls[0]["args"] == {"order_id": "77"}
    conversation = [
        _user("refund 77"),
        first.to_message("a1"),
        {"role": "tool", "content": "refunded", "tool_call_id": "c1"},
    ]
    second = await model.generate(conversation, tools=TOOLS)  # type: ignore[arg-type]
    assert second.content == "done: refunded"


async def test_one_callable_serves_every_turn() -> None:
    model = ScriptedModel(lambda messages, tools: f"seen {len(messages)}")
    assert (await model.generate([_user("a"), _user("b")], tools=[])).content == "seen 2"


async def test_calls_record_deep_copies_of_what_the_model_received() -> None:
    model = ScriptedModel(["ok"])
    conversation: list[Message] = [_user("hello")]
    await model.generate(conversation, tools=TOOLS)
    conversation[0]["content"] = "changed later"
    conversation.append(_user("more"))
    assert model.calls == [[_user("hello")]]
    assert model.tools_seen == [TOOLS]


def test_a_bad_script_fails_at_construction() -> None:
    with pytest.raises(ConfigError, match=r"scripted response #1: unknown model response field"):
        ScriptedModel(["fine", {"text": "typo"}])
    with pytest.raises(ConfigError, match="scripted response #0 must be"):
        ScriptedModel([42])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="takes a list of responses"):
        ScriptedModel("not a list")
    with pytest.raises(ConfigError, match="index_by"):
        ScriptedModel([], index_by="turns")  # type: ignore[arg-type]


async def test_a_callable_returning_garbage_is_reported_with_its_turn() -> None:
    model = ScriptedModel([lambda messages, tools: 3.5])
    with pytest.raises(ConfigError, match="scripted response #0 must be"):
        await model.generate([_user("x")], tools=[])


def test_scripted_model_is_a_chat_model() -> None:
    assert isinstance(ScriptedModel([]), ChatModel)


# -- resolve_model -------------------------------------------------------------------


def test_an_instance_passes_through() -> None:
    model = ScriptedModel(["x"])
    assert resolve_model(model, None) is model
    assert resolve_model(model, "google") is model


def test_options_with_an_instance_are_refused() -> None:
    with pytest.raises(ConfigError, match="only apply when the model is given by name"):
        resolve_model(ScriptedModel([]), None, timeout=3)


def test_scripted_is_not_resolvable_from_a_string() -> None:
    with pytest.raises(ConfigError, match=r"model=ScriptedModel"):
        resolve_model("demo", "scripted")


def test_unknown_provider_names_the_valid_choices() -> None:
    with pytest.raises(ConfigError, match=r"\['anthropic', 'google', 'openai'\]"):
        resolve_model("llama3", "ollama")


def test_a_string_without_provider_needs_a_known_prefix() -> None:
    with pytest.raises(ConfigError, match="cannot tell the provider"):
        resolve_model("gemini-2.5-flash", None)
    with pytest.raises(ConfigError, match="cannot tell the provider"):
        resolve_model("meta/llama", None)


def test_not_a_model_is_refused() -> None:
    with pytest.raises(ConfigError, match="got int"):
        resolve_model(42, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="empty"):
        resolve_model("", "openai")


@pytest.mark.parametrize(
    ("provider", "sdk_modules", "extra"),
    [
        ("openai", ["openai"], "openai"),
        ("anthropic", ["anthropic"], "anthropic"),
        ("google", ["google.genai", "google"], "google"),
    ],
)
def test_a_missing_sdk_gives_the_install_command(
    monkeypatch: pytest.MonkeyPatch, provider: str, sdk_modules: list[str], extra: str
) -> None:
    # Hide the SDK the way an uninstalled package looks to `import`, and drop any
    # cached adapter module so it is imported afresh.
    for name in sdk_modules:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, f"oncegraph.prebuilt.models.{provider}", raising=False)
    with pytest.raises(ImportError) as info:
        resolve_model("some-model", provider)
    assert str(info.value).endswith(f'pip install "oncegraph[{extra}]"')
