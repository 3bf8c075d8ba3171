"""The component schemas of the OpenAPI document (:mod:`oncegraph.server.openapi`): the
shapes of errors, runs, effects, snapshots, audit records and run configs, as
:mod:`oncegraph.server.encode` writes them."""

from __future__ import annotations

from typing import Any

_OBJ: dict[str, Any] = {"type": "object"}


def _array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


def components() -> dict[str, Any]:
    nullable_text = {"type": ["string", "null"]}
    return {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["status", "code", "message"],
                    "properties": {
                        "status": {"type": "integer"},
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                    },
                }
            },
        },
        "Outcome": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        },
        "RunConfig": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "node_timeout": {"type": ["number", "null"], "exclusiveMinimum": 0},
                "tool_timeout": {"type": ["number", "null"], "exclusiveMinimum": 0},
                "tool_grace": {"type": ["number", "null"], "minimum": 0},
                "recursion_limit": {"type": "integer", "minimum": 1},
                "configurable": _OBJ,
            },
        },
        "Run": {
            "type": "object",
            "required": ["run_id", "thread_id", "status"],
            "properties": {
                "run_id": {"type": "string"},
                "thread_id": {"type": "string"},
                "status": {"type": "string"},
                "parent_run_id": nullable_text,
                "parent_checkpoint_id": nullable_text,
                "launch_reason": {"type": "string"},
                "started_by": {
                    **nullable_text,
                    "description": "who started it over the API (api:<key name>); null for "
                    "a run a program started",
                },
                "mode": nullable_text,
                "error": nullable_text,
                "created_at": {"type": "number"},
                "updated_at": {"type": "number"},
            },
        },
        "Effect": {
            "type": "object",
            "required": ["effect_id", "effect_type", "status", "request_hash", "attempts"],
            "properties": {
                "effect_id": {"type": "string"},
                "effect_type": {"type": "string"},
                "effect_class": {"type": "string"},
                "status": {"type": "string"},
                "request_hash": {"type": "string"},
                "recipient": nullable_text,
                "provider_reference": nullable_text,
                "attempts": _array(_OBJ),
            },
        },
        "Snapshot": {
            "type": "object",
            "required": ["values", "next", "config"],
            "properties": {
                "values": _OBJ,
                "next": _array({"type": "string"}),
                "config": _OBJ,
                "run_id": nullable_text,
                "checkpoint_id": nullable_text,
            },
        },
        "Audit": {
            "type": "object",
            "required": ["audit_id", "actor", "action", "target_id", "at"],
            "properties": {
                "audit_id": {"type": "string"},
                "actor": {"type": "string"},
                "action": {"type": "string"},
                "target_id": {"type": "string"},
                "reason": nullable_text,
                "at": {"type": "number"},
            },
        },
    }


__all__ = ["components"]
