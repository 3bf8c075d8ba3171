"""Request bodies are checked with the pydantic models the OpenAPI document is made from:
a bad field is a 400 naming the field and what it should be, after the role check, and
the document's request schemas are those models' own."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, get_args

import pytest
from shop import ADMIN, OPERATOR, USER, VIEWER, Shop, auth
from starlette.testclient import TestClient

from oncegraph.runtime.config import RunConfig as RuntimeConfig
from oncegraph.server import bodies, openapi, operations, schemas
from oncegraph.server.problems import ApiError


def _message(shape: type[Any], body: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as caught:
        bodies.model(shape, body)
    assert caught.value.status == 400
    return caught.value.message


@pytest.mark.parametrize(
    ("shape", "body", "said"),
    [
        (schemas.ResolveBody, {"outcome": "maybe", "reason": "r"}, "'outcome' must be 'done'"),
        (schemas.ResolveBody, {"outcome": "done"}, "'reason' is required"),
        (schemas.ResolveBody, {"outcome": "done", "reason": 7}, "'reason' must be a string"),
        (schemas.ResolveBody, {"outcome": "done", "reason": " "}, "'reason' must not be empty"),
        (schemas.AbandonBody, {"reason": "a\x00b"}, "'reason' must not contain control"),
        (schemas.AbandonBody, {"reason": "r" * 10_001}, "'reason' must have at most 10000"),
        (schemas.AbandonBody, {"reason": "r", "why": 1}, "unknown field(s) 'why'; this request"),
        (schemas.BranchBody, {"reason": "r", "patch": [1]}, "'patch' must be a JSON object"),
        (schemas.ReplayBody, {"reason": "r", "mode": "yolo"}, "got 'yolo'"),
        (schemas.ReplayBody, {"reason": "r", "allow_irreversible": [1]}, "allow_irreversible.0"),
        (schemas.StartBody, {"wait": "yes"}, "'wait' must be true or false; got a string"),
        (schemas.StartBody, {"input": [1]}, "'input' must be a JSON object; got an array"),
        (schemas.StartBody, {"config": {"x": 1}}, "takes node_timeout, tool_timeout"),
        (schemas.StartBody, {"config": {"recursion_limit": 0}}, "'config.recursion_limit'"),
        (schemas.StartBody, {"config": {"tool_grace": True}}, "must be a number; got a boolean"),
        (schemas.RedeliverBody, {"reason": "r", "new_key": None}, "'new_key' must be true or"),
    ],
)
def test_a_bad_field_is_named_with_its_fix(
    shape: type[Any], body: dict[str, Any], said: str
) -> None:
    assert said in _message(shape, body)


def test_what_the_commands_accept_passes() -> None:
    bodies.model(schemas.ContinueBody, {})
    bodies.model(schemas.ContinueBody, {"reason": None, "answer": [1, "x"]})
    bodies.model(schemas.StartBody, {"input": None, "config": None})
    bodies.model(schemas.StartBody, {"config": {"node_timeout": 0, "tool_timeout": 2}})
    bodies.model(schemas.ResolveBody, {"outcome": "not_done", "reason": "r", "result": None})


def test_the_models_take_what_the_commands_read() -> None:
    mode = schemas.ReplayBody.model_fields["mode"].annotation
    assert get_args(mode) == operations.REPLAY_MODES
    assert tuple(schemas.RunConfig.model_fields) == operations.CONFIG_KEYS
    runtime = {f.name: f.default for f in fields(RuntimeConfig)}
    for name, field in schemas.RunConfig.model_fields.items():
        if name != "configurable":
            assert field.default == runtime[name], name  # the document shows the real default


def test_the_document_uses_the_models() -> None:
    doc = openapi.document()
    found = doc["components"]["schemas"]
    assert found["ReplayBody"] == schemas.ReplayBody.model_json_schema(ref_template=schemas.REF)
    replay = doc["paths"]["/api/runs/{run_id}/replay"]["post"]["requestBody"]
    assert replay["content"]["application/json"]["schema"] == schemas.ref(schemas.ReplayBody)
    for schema in found.values():
        for ref in _refs(schema):
            assert ref.removeprefix("#/components/schemas/") in found, ref


def _refs(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        own = [schema["$ref"]] if "$ref" in schema else []
        return own + [r for v in schema.values() for r in _refs(v)]
    if isinstance(schema, list):
        return [r for v in schema for r in _refs(v)]
    return []


def test_a_caller_without_the_role_is_refused_before_its_fields_are_read(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    run_id, effect_id = sqlite_shop.parked("t-models")
    bad = {"reason": 7, "surprise": True}
    resolve = f"/api/runs/{run_id}/effects/{effect_id}/resolve"
    redeliver = f"/api/runs/{run_id}/effects/{effect_id}/redeliver"
    client = sqlite_client
    assert client.post(resolve, headers=auth(VIEWER), json=bad).status_code == 403
    assert client.post(redeliver, headers=auth(OPERATOR), json=bad).status_code == 403
    assert client.post("/api/threads/t-x/runs", headers=auth(VIEWER), json=bad).status_code == 403
    refused = client.post(redeliver, headers=auth(ADMIN), json=bad)
    assert refused.status_code == 400 and "'reason'" in refused.json()["error"]["message"]
    started = client.post(
        "/api/threads/t-x/runs", headers=auth(OPERATOR), json={"input": USER, "wait": 1}
    )
    assert started.status_code == 400
    assert "'wait' must be true or false" in started.json()["error"]["message"]
