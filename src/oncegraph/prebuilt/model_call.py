"""One model turn as one ledger effect: retries with backoff, then fallback models.

The agent's model call is ONE effect of class ``model`` (``effect_type`` names the
primary model, so its effect id does not depend on which model answered). Its attempts
are the ledger's: each try is an attempt in the effect record, with its error, and the
wait between tries is the policy's backoff, slept through ``RunConfig.sleep`` (the
``sleep`` config key), so tests never wait. The adapters' own SDK retries are off by
default, so this is the one retry layer.

The order of tries is fixed: ``model_retry.max_attempts`` tries of the primary model,
then as many of each fallback in turn; switching model does not wait. The first answer
is the turn's answer; it is recorded (``model`` names who answered when there are
fallbacks) and a resumed run reuses it, never asking any model again. A turn that
needed more than one try is committed as soon as it is answered
(``EffectCall.commit_if_retried``), so a crash before its step's commit does not make the
resume pay for those tries again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph import observe
from oncegraph.ledger.outcomes import Completed
from oncegraph.ledger.retry import DEFAULT_POLICIES, EffectRetry
from oncegraph.messages import Message, ToolSpec
from oncegraph.prebuilt.models import ChatModel
from oncegraph.prebuilt.models.base import OnText
from oncegraph.storage.records import EffectClass


@dataclass(frozen=True, slots=True, kw_only=True)
class _FallbackRetry(EffectRetry):
    """``per_model`` tries of each model in turn: the model's own backoff between tries
    of one model, no wait when the next model takes over."""

    per_model: int = 1

    def delay(self, attempt: int) -> float:
        within = attempt % self.per_model
        if within == 0:  # the next try is the next model's first
            return 0.0
        return EffectRetry.delay(self, within)


@dataclass(slots=True)
class Tries:
    """The tries of one turn in this process: which model failed how, in order."""

    failures: list[tuple[str, BaseException]] = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        return "; ".join(f"{name}: {type(exc).__name__}: {exc}" for name, exc in self.failures)


class ModelChain:
    """The primary model, its fallbacks and the retry policy over them."""

    __slots__ = ("models", "per_model", "policy", "streaming")

    def __init__(self, models: Sequence[ChatModel], retry: EffectRetry | None) -> None:
        base = retry or DEFAULT_POLICIES[EffectClass.MODEL]
        self.models = tuple(models)
        self.per_model = base.max_attempts
        self.streaming = tuple(callable(getattr(m, "generate_stream", None)) for m in models)
        if len(self.models) == 1:
            self.policy = base
        else:
            fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(EffectRetry)}
            fields["max_attempts"] = base.max_attempts * len(self.models)
            self.policy = _FallbackRetry(per_model=base.max_attempts, **fields)

    @property
    def fallback_names(self) -> list[str]:
        return [m.name for m in self.models[1:]]

    def attempt(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], on_text: OnText | None
    ) -> tuple[Callable[[], Awaitable[Any]], Tries]:
        """The ``fn`` of the turn's effect (called once per try, returns the response's
        JSON) and the record of its failed tries."""
        tries = Tries()
        count = 0

        async def call() -> Any:
            nonlocal count
            index = min(count // self.per_model, len(self.models) - 1)
            count += 1
            model = self.models[index]
            try:
                with observe.model_span(model, count) as span:
                    if on_text is not None and self.streaming[index]:
                        stream: Any = model
                        response = await stream.generate_stream(
                            messages, tools=tools, on_text=on_text
                        )
                    else:
                        response = await model.generate(messages, tools=tools)
                    observe.model_response(span, response)
            except Exception as exc:
                tries.failures.append((model.name, exc))
                raise
            if len(self.models) > 1:
                response = dataclasses.replace(response, model=model.name)
            if response.model_version is not None:  # the model the provider served
                return Completed(response.to_json(), source_version=response.model_version)
            return response.to_json()

        return call, tries


__all__ = ["ModelChain", "Tries"]
