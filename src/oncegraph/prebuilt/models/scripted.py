"""``ScriptedModel``: a deterministic chat model for tests and demos.

Invariant: the response for a call depends only on the call's input, never on what
this object saw before. By default the script position is the number of assistant
messages already in ``messages`` (turn 0 answers a conversation with no assistant
message yet, turn 1 the one after the first assistant reply, ...). A process that
crashed and resumed builds a fresh ``ScriptedModel`` and still gets the right answer
for the turn it is on. ``index_by="calls"`` switches to an in-memory call counter for
tests that really want "next response per call".

A script entry is a :class:`ModelResponse`, a dict in its JSON form (``{"content":
..., "tool_calls": [{"name", "args", "id"?}]}``), a plain string (content only), or a
callable ``(messages, tools) -> entry`` (sync or async) for data-dependent answers.
``responses`` itself may also be one such callable, used for every turn.

``generate_stream`` plays the same answer and hands its content to ``on_text`` in pieces
(a word with the whitespace after it), so token streaming can be tried offline.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from oncegraph.errors import ConfigError
from oncegraph.messages import Message, ToolSpec
from oncegraph.prebuilt.models.base import ModelResponse, OnText

ScriptEntry = ModelResponse | Mapping[str, Any] | str | Callable[..., Any]
IndexBy = Literal["assistant_messages", "calls"]


class ScriptedModel:
    """A :class:`~oncegraph.prebuilt.models.ChatModel` that plays back a script.

    ``calls`` holds a deep copy of the ``messages`` of every ``generate`` call, and
    ``tools_seen`` the tool specs of each call, in order, for assertions. Running out of
    script raises :class:`~oncegraph.errors.ConfigError` naming the turn.
    """

    __slots__ = ("_entries", "_index_by", "_produce", "calls", "name", "tools_seen")

    def __init__(
        self,
        responses: Sequence[ScriptEntry] | Callable[..., Any],
        name: str = "scripted",
        *,
        index_by: IndexBy = "assistant_messages",
    ) -> None:
        if index_by not in ("assistant_messages", "calls"):
            raise ConfigError(f"index_by must be 'assistant_messages' or 'calls', got {index_by!r}")
        self.name = name
        self._index_by: IndexBy = index_by
        self._produce: Callable[..., Any] | None = None
        self._entries: tuple[ScriptEntry, ...] = ()
        if callable(responses) and not isinstance(responses, ModelResponse):
            self._produce = responses
        elif isinstance(responses, (str, Mapping)) or not isinstance(responses, Sequence):
            raise ConfigError(
                "ScriptedModel takes a list of responses (or one callable), got "
                f"{type(responses).__name__}"
            )
        else:
            self._entries = tuple(responses)
            for index, entry in enumerate(self._entries):
                if not callable(entry) or isinstance(entry, ModelResponse):
                    _coerce(entry, index)  # fail at construction on a bad script
        self.calls: list[list[Message]] = []
        self.tools_seen: list[list[ToolSpec]] = []

    @classmethod
    def turns(cls, *responses: ScriptEntry, name: str = "scripted") -> ScriptedModel:
        """A script indexed by assistant turn (the default): ``turns(r0, r1, ...)``."""
        return cls(list(responses), name, index_by="assistant_messages")

    def turn_of(self, messages: Sequence[Message]) -> int:
        """The script position for ``messages`` under this model's indexing."""
        if self._index_by == "calls":
            return len(self.calls)
        return sum(1 for m in messages if m["role"] == "assistant")

    async def generate(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        turn = self.turn_of(messages)
        self.calls.append(copy.deepcopy(list(messages)))
        self.tools_seen.append(copy.deepcopy(list(tools)))
        if self._produce is not None:
            entry: Any = self._produce
        elif turn < len(self._entries):
            entry = self._entries[turn]
        else:
            raise ConfigError(
                f"ScriptedModel {self.name!r} has {len(self._entries)} response(s) but was "
                f"asked for turn {turn} ({_describe(self._index_by, turn)}); add responses "
                "to the script"
            )
        if callable(entry) and not isinstance(entry, ModelResponse):
            entry = entry(list(messages), list(tools))
            if inspect.isawaitable(entry):
                entry = await entry
        return _coerce(entry, turn)

    async def generate_stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec], on_text: OnText
    ) -> ModelResponse:
        """:meth:`generate`, with the content handed to ``on_text`` word by word."""
        response = await self.generate(messages, tools=tools)
        for piece in _PIECES.findall(response.content):
            on_text(piece)
        return response


_PIECES = re.compile(r"\s*\S+\s*|\s+")  # a word with its spaces; all of it joined is the text


def _coerce(entry: Any, index: int) -> ModelResponse:
    if isinstance(entry, ModelResponse):
        return entry
    if isinstance(entry, str):
        return ModelResponse(content=entry)
    if isinstance(entry, Mapping):
        try:
            return ModelResponse.from_json(entry)
        except ConfigError as exc:
            raise ConfigError(f"scripted response #{index}: {exc}") from exc
    raise ConfigError(
        f"scripted response #{index} must be a ModelResponse, a dict, a string or a "
        f"callable (messages, tools) -> response; got {type(entry).__name__}"
    )


def _describe(index_by: IndexBy, turn: int) -> str:
    if index_by == "calls":
        return f"call number {turn + 1}"
    return f"{turn} assistant message(s) already in the conversation"


__all__ = ["ScriptedModel"]
