"""``add_messages(format="langchain-openai")``: messages rewritten to OpenAI's shape.

Content blocks in another provider's shape (an image ``source``, ``tool_use``, a
``tool_result`` inside a user message) become OpenAI's (``image_url``, ``tool_calls``, a
tool message), through LangChain's own converters, so the list a model reads is in one
shape whoever wrote it. Each message keeps the id it came with when the conversion maps
one message to one; a message the conversion splits gets new ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from oncegraph.errors import ConfigError

FORMATS = ("langchain-openai",)


def check_format(format: str) -> None:
    if format not in FORMATS:
        raise ConfigError(
            f"add_messages(format={format!r}) is not a known format; use "
            f"format='langchain-openai' or leave format out"
        )


def _convert(messages: Sequence[Any]) -> list[Any]:
    from oncegraph.state import lcmessages as lc

    core = lc._require()
    return list(core.convert_to_messages(core.convert_to_openai_messages(list(messages))))


def formatted(format: str, messages: Sequence[Any]) -> list[Any]:
    """``messages`` in ``format`` (one message at a time, so ids stay put)."""
    check_format(format)
    from oncegraph.state import lcmessages as lc

    out: list[Any] = []
    for message in messages:
        if not lc.is_message(message):
            message = lc.to_langchain(message)
        if getattr(message, "type", None) == "remove":
            out.append(message)
            continue
        converted = _convert([message])
        if len(converted) == 1:
            out.append(lc.with_id(converted[0], message.id) if message.id else converted[0])
        else:
            out.extend(lc.with_id(m, str(uuid.uuid4())) for m in converted)
    return out


__all__ = ["FORMATS", "check_format", "formatted"]
