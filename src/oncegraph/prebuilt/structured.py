"""Structured output: ``ReactAgent(response_format=...)``.

``response_format`` is a pydantic model (or any type pydantic validates: a dataclass, a
TypedDict) or a JSON schema (a dict; validated with ``jsonschema``). The agent offers
the model one more tool, named after the format (the class name, or the schema's
``title``), whose parameters are the format's JSON schema: the model gives its final
answer by calling it. A final text answer that is a JSON object of the format (bare or
in a ```json fence) is accepted too.

Invariants:

* The answer is validated (and coerced, as pydantic does) into the format before it is
  kept; the state's ``structured_response`` holds the validated value (a model instance
  for a model), decoded as that type after a restart.
* An answer that does not validate goes back to the model with the validation error (an
  error tool message for a call of the answer tool, else a user message), at most
  ``response_retries`` times in a run; then the run fails with
  :class:`~oncegraph.errors.StructuredOutputError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from oncegraph import _json
from oncegraph.errors import ConfigError
from oncegraph.messages import ToolSpec
from oncegraph.tools.schema import json_schema_problems

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*$", re.S)
_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class Invalid(Exception):
    """The answer does not fit the format; the text says why (for the model)."""


class ResponseFormat:
    """One response format: its answer tool, its state type and its validation."""

    __slots__ = ("_check", "name", "spec", "state_type")

    def __init__(self, fmt: Any) -> None:
        if isinstance(fmt, Mapping):
            self._from_schema(fmt)
        elif isinstance(fmt, type):
            self._from_type(fmt)
        else:
            raise ConfigError(
                "response_format must be a pydantic model (or a dataclass / TypedDict) or a "
                f"JSON schema dict; got {fmt!r}"
            )

    def _from_type(self, fmt: type) -> None:
        from pydantic import TypeAdapter, ValidationError

        from oncegraph.tools.schema import describe_validation_error

        try:
            adapter: TypeAdapter[Any] = TypeAdapter(fmt)
            schema = adapter.json_schema()
        except Exception as exc:
            raise ConfigError(
                f"response_format {fmt.__name__} cannot be validated or shown as a JSON "
                f"schema by pydantic: {exc}"
            ) from exc
        if schema.get("type") != "object":
            raise ConfigError(
                f"response_format {fmt.__name__} must describe a JSON object (a model, a "
                f"dataclass or a TypedDict); its schema is {schema!r}"
            )
        name = _tool_name(fmt.__name__)

        def check(value: Any) -> Any:
            try:
                return adapter.validate_python(value)
            except ValidationError as exc:
                raise Invalid(describe_validation_error(name, exc)) from exc

        self._check = check
        self.state_type: Any = fmt
        self.name = name
        description = schema.pop("description", None) or _default_description(name)
        schema.pop("title", None)
        self.spec: ToolSpec = {"name": name, "description": description, "parameters": schema}

    def _from_schema(self, fmt: Mapping[str, Any]) -> None:
        try:
            import jsonschema  # noqa: F401 - is it installed? (used by the check below)
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "a JSON-schema response_format is validated with jsonschema: pip install "
                "'oncegraph[structured]' (or pass a pydantic model)"
            ) from exc
        schema = dict(fmt)
        if schema.get("type") != "object":
            raise ConfigError(
                "a JSON-schema response_format must have \"type\": \"object\"; got "
                f"{schema.get('type')!r}"
            )
        problems_of = json_schema_problems(
            schema, "response_format is not a valid JSON schema", "(answer)"
        )
        name = _tool_name(str(schema.pop("title", "") or "final_answer"))

        def check(value: Any) -> Any:
            problems = problems_of(value)
            if problems:
                raise Invalid(f"invalid arguments for {name}: {problems}")
            return value

        self._check = check
        self.state_type = dict[str, Any]
        self.name = name
        description = schema.pop("description", None) or _default_description(name)
        self.spec = {"name": name, "description": description, "parameters": schema}

    def validate(self, value: Any) -> Any:
        """The validated answer, or :class:`Invalid`."""
        if not isinstance(value, Mapping):
            raise Invalid(f"the answer must be a JSON object for {self.name}; got {value!r}")
        return self._check(dict(value))

    def from_text(self, text: str) -> Any:
        """A final text answer as the format: a JSON object, bare or in a fence."""
        fenced = _FENCE.match(text)
        raw = fenced.group(1) if fenced else text
        try:
            value = _json.loads(raw.strip())
        except ValueError:
            raise Invalid(
                f"the final answer must be given by calling the tool {self.name} (or as a "
                "JSON object matching its parameters); the answer was plain text"
            ) from None
        return self.validate(value)


def _tool_name(name: str) -> str:
    return _NAME.sub("_", name)[:64] or "final_answer"


def _default_description(name: str) -> str:
    return (
        f"Give your final answer as {name}. Call this tool once, alone, when you have "
        "everything you need; its arguments are the answer."
    )


__all__ = ["Invalid", "ResponseFormat"]
