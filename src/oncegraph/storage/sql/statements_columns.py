"""Column orders (the INSERT parameter order is the SELECT row order) and the small
builders of statement text every table family uses.

Written for SQLite and PostgreSQL alike with ``?`` placeholders (the contract: :mod:`.statements`).
"""

from __future__ import annotations

from oncegraph.storage.records import AUDIT_FIELDS

# -- column orders (INSERT parameter order == SELECT row order) ----------------------

THREAD_COLUMNS = ("thread_id", "version", "head_checkpoint_id", "updated_at")

RUN_COLUMNS = (
    "run_id",
    "thread_id",
    "status",
    "workflow_name",
    "workflow_version",
    "state_schema_version",
    "graph_fingerprint",
    "parent_run_id",
    "parent_checkpoint_id",
    "launch_reason",
    "mode",
    "input",
    "config",
    "error",
    "lease_owner",
    "lease_expires_at",
    "fencing_token",
    "created_at",
    "updated_at",
    "app_id",
    "tenant",
)

CHECKPOINT_COLUMNS = (
    "checkpoint_id",
    "thread_id",
    "run_id",
    "step",
    "version",
    "parent_checkpoint_id",
    "channel_values",
    "logs",
    "next_nodes",
    "metadata",
    "created_at",
)

LOG_COLUMNS = ("thread_id", "channel", "seq", "value")

TASK_WRITE_COLUMNS = ("thread_id", "checkpoint_id", "task", "kind", "idx", "value", "created_at")

EFFECT_COLUMNS = (
    "effect_id",
    "effect_type",
    "effect_class",
    "command_id",
    "run_id",
    "thread_id",
    "node",
    "request_hash",
    "status",
    "checkpoint_id",
    "request",
    "recipient",
    "attempts",
    "provider_reference",
    "result",
    "error",
    "created_at",
    "updated_at",
    "row_version",
)

AUDIT_COLUMNS = AUDIT_FIELDS  # the record's fields, in their stored order

# Columns an effect result may change (guarantee 3); identity and request are fixed at insert.
EFFECT_MUTABLE_COLUMNS = (
    "status",
    "attempts",
    "provider_reference",
    "result",
    "error",
    "updated_at",
    "row_version",
)


def cols(columns: tuple[str, ...], prefix: str = "") -> str:
    return ", ".join(prefix + c for c in columns)


def marks(columns: tuple[str, ...]) -> str:
    return ", ".join("?" for _ in columns)


def where(*conditions: tuple[str, object]) -> str:
    """`` WHERE`` and the conditions whose flag is set, joined by ``AND`` (``""`` when
    none is): each ``(condition, flag)``, in order, as their parameters come."""
    chosen = [c for c, on in conditions if on]
    return f" WHERE {' AND '.join(chosen)}" if chosen else ""


def any_of(column: str, n: int) -> str:
    """``column IN (?, ?, ...)`` for ``n`` parameters."""
    return f"{column} IN ({', '.join('?' for _ in range(n))})"


def insert_into(table: str, columns: tuple[str, ...]) -> str:
    return f"INSERT INTO {table} ({cols(columns)}) VALUES ({marks(columns)})"


# A LIMIT that means "all rows" in both dialects (PostgreSQL rejects negative limits).
NO_LIMIT = 2**62
