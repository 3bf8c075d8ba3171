"""The shapes of the REST API as pydantic models: each command's request body (checked
with :func:`oncegraph.server.bodies.model`) and the main response shapes (errors, runs,
effects, snapshots, audit records, as :mod:`oncegraph.server.encode` writes them).

The OpenAPI document (:mod:`oncegraph.server.openapi`) takes its schemas from these
models (:func:`components`), so what is checked and what is documented are one thing.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic.json_schema import models_json_schema
from pydantic_core import PydanticCustomError

from oncegraph.runtime.config import (
    DEFAULT_NODE_TIMEOUT,
    DEFAULT_RECURSION_LIMIT,
    DEFAULT_TOOL_GRACE,
    DEFAULT_TOOL_TIMEOUT,
)

MAX_TEXT = 10_000
"""The longest text a request field may hold (characters)."""

REF = "#/components/schemas/{model}"


def _plain(value: str) -> str:
    """Text with no control character (tab and line breaks aside), valid Unicode."""
    if any(ord(c) < 32 and c not in "\t\n\r" for c in value) or "\x7f" in value:
        raise PydanticCustomError("control_characters", "must not contain control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError("not_unicode", "is not valid Unicode text") from None
    return value


def _filled(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("empty", "must not be empty")
    return value


Text = Annotated[str, StringConstraints(max_length=MAX_TEXT), AfterValidator(_plain)]
"""An optional text field: a string of at most :data:`MAX_TEXT` characters."""
Reason = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_TEXT),
    AfterValidator(_plain),
    AfterValidator(_filled),
]
"""A required text field (a reason): as :data:`Text`, and not blank."""
Seconds = Annotated[float, Field(ge=0)] | None


class _Body(BaseModel):
    """A request body: JSON types as they are (no coercion), no unknown field."""

    model_config = ConfigDict(extra="forbid", strict=True)


class RunConfig(_Body):
    """A run's settings (``config`` of a start). 0 or null disables a timeout."""

    node_timeout: Seconds = DEFAULT_NODE_TIMEOUT
    tool_timeout: Seconds = DEFAULT_TOOL_TIMEOUT
    tool_grace: Seconds = DEFAULT_TOOL_GRACE
    recursion_limit: int = Field(DEFAULT_RECURSION_LIMIT, ge=1)
    configurable: dict[str, Any] = Field(default_factory=dict)


class StartBody(_Body):
    """Start a run (``input``: state updates), or continue the thread's (``input: null``)."""

    input: dict[str, Any] | None = None
    config: RunConfig | None = None
    wait: bool = False


class ContinueBody(_Body):
    reason: Text | None = None
    answer: Any = Field(None, description="the answer to the run's interrupt, if it asks one")


class ReplayBody(_Body):
    mode: Literal["evidence", "simulation", "live"] = "evidence"
    reason: Reason
    checkpoint_id: Text | None = None
    allow_irreversible: list[str] = Field(default_factory=list)


class BranchBody(_Body):
    patch: dict[str, Any]
    reason: Reason
    checkpoint_id: Text | None = None
    as_node: Text | None = None


class AbandonBody(_Body):
    reason: Reason


class ResolveBody(_Body):
    outcome: Literal["done", "not_done"]
    reason: Reason
    result: Any = None
    provider_reference: Text | None = None


class CheckBody(_Body):
    reason: Text | None = None


class RedeliverBody(_Body):
    reason: Reason
    new_key: bool = False
    confirm: Text | None = Field(None, description="the preview's token: send it now")
    past_dedup_window: bool = Field(
        False,
        description="send with the same key although the recipient's dedup window has "
        "passed or is unknown (the preview's past_dedup_window says when this is needed)",
    )


class AguiMessage(BaseModel):
    id: str
    role: Literal["user", "system", "developer", "assistant", "tool"]
    content: str


class AguiRun(BaseModel):
    """The ids of an AG-UI run (checked first; the messages are read one by one)."""

    model_config = ConfigDict(strict=True)

    threadId: Reason
    runId: Reason


class AguiInput(AguiRun):
    """AG-UI's RunAgentInput (the fields this server reads)."""

    model_config = ConfigDict(strict=False)

    messages: list[AguiMessage]
    state: Any = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    context: list[dict[str, Any]] = Field(default_factory=list)
    forwardedProps: Any = None


# -- responses --------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    status: int
    code: str
    message: str


class Error(BaseModel):
    """A 4xx/5xx answer (problem+json)."""

    error: ErrorDetail


class Outcome(BaseModel):
    """How a run a command ran stopped (its error code and message)."""

    code: str
    message: str


class Run(BaseModel):
    run_id: str
    thread_id: str
    status: str
    parent_run_id: str | None = None
    parent_checkpoint_id: str | None = None
    launch_reason: str = Field(
        "",
        description="why it was made: the operator's reason for a replay or branch; "
        "invoke, submit or time_travel otherwise",
    )
    made_as: str = Field(
        "", description="replay, branch or time_travel (a run made from another), or invoke"
    )
    started_by: str | None = Field(
        None,
        description="who started it over the API (api:<key name>); null for a run a "
        "program started",
    )
    mode: str | None = None
    error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0


class Effect(BaseModel):
    effect_id: str
    effect_type: str
    effect_class: str = ""
    status: str
    request_hash: str
    recipient: str | None = None
    provider_reference: str | None = None
    attempts: list[dict[str, Any]]
    compensates: str | None = Field(None, description="the effect this one compensates")


class Snapshot(BaseModel):
    values: dict[str, Any]
    next: list[str]
    config: dict[str, Any]
    run_id: str | None = None
    checkpoint_id: str | None = None


class Audit(BaseModel):
    audit_id: str
    actor: str
    action: str
    target_id: str
    reason: str | None = None
    at: float


class CompensateBody(_Body):
    """Undo a completed effect with its tool's compensating tool (a new effect)."""

    reason: Reason
    allow_again: bool = Field(
        False, description="compensate an effect that was already compensated"
    )
    args: dict[str, Any] = Field(
        default_factory=dict, description="the compensating tool's own arguments"
    )


REQUESTS: tuple[type[BaseModel], ...] = (
    StartBody,
    ContinueBody,
    ReplayBody,
    BranchBody,
    AbandonBody,
    ResolveBody,
    CheckBody,
    RedeliverBody,
    AguiInput,
    CompensateBody,
)
RESPONSES: tuple[type[BaseModel], ...] = (Error, Outcome, Run, Effect, Snapshot, Audit)


def ref(model: type[BaseModel]) -> dict[str, Any]:
    """A reference to ``model``'s schema in the document's components."""
    return {"$ref": REF.format(model=model.__name__)}


def components() -> dict[str, Any]:
    """The document's component schemas: every model above and the models they use."""
    _, found = models_json_schema(
        [(m, "validation") for m in (*REQUESTS, *RESPONSES)],
        ref_template=REF,
    )
    schemas: dict[str, Any] = found["$defs"]
    return schemas


__all__ = [
    "MAX_TEXT",
    "REQUESTS",
    "RESPONSES",
    "AbandonBody",
    "AguiInput",
    "AguiRun",
    "Audit",
    "BranchBody",
    "CheckBody",
    "CompensateBody",
    "ContinueBody",
    "Effect",
    "Error",
    "Outcome",
    "RedeliverBody",
    "ReplayBody",
    "ResolveBody",
    "Run",
    "RunConfig",
    "Snapshot",
    "StartBody",
    "components",
    "ref",
]
