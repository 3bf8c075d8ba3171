"""The one SQL schema, as append-only migrations.

The position of a migration in :data:`MIGRATIONS` is its version; never edit or
reorder a shipped migration, only append. The DDL uses types that SQLite and
PostgreSQL both accept (TEXT, BIGINT, INTEGER, DOUBLE PRECISION); JSON is stored as
TEXT written by orjson. Dialect modules only differ in placeholders and locking. A step
one text cannot write for both (SQLite cannot drop a table's constraint, PostgreSQL can
without copying the table) is a :class:`PerDialect`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SCHEMA_TABLE = "oncegraph_schema_version"

Dialect = Literal["sqlite", "postgres"]


@dataclass(frozen=True, slots=True)
class PerDialect:
    """One step of a migration, written for each dialect."""

    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]

    def statements(self, dialect: Dialect) -> tuple[str, ...]:
        return self.sqlite if dialect == "sqlite" else self.postgres


Step = str | PerDialect

# The effects table's column definitions as migration 1 made them (migration 7's copy
# of the table repeats them, then migration 2's row_version). Frozen, as the migrations
# that use them are.
_EFFECT_V1_DEFS = ", ".join(
    (
        "effect_id TEXT PRIMARY KEY",
        "effect_type TEXT NOT NULL",
        "effect_class TEXT NOT NULL",
        "command_id TEXT NOT NULL",
        "run_id TEXT NOT NULL",
        "thread_id TEXT NOT NULL",
        "checkpoint_id TEXT",
        "node TEXT NOT NULL",
        "request_hash TEXT NOT NULL",
        "request TEXT",
        "recipient TEXT",
        "status TEXT NOT NULL",
        "attempts TEXT NOT NULL",
        "provider_reference TEXT",
        "result TEXT",
        "error TEXT",
        "created_at DOUBLE PRECISION NOT NULL",
        "updated_at DOUBLE PRECISION NOT NULL",
    )
)

# The effects table's columns as migration 7 leaves it: migration 1's and migration 2's
# row_version, keyed by effect_id alone. Frozen here, not statements.EFFECT_COLUMNS: a
# later migration may add a column that a database at version 6 does not have yet.
_EFFECT_COLUMNS = (
    "effect_id, effect_type, effect_class, command_id, run_id, thread_id, checkpoint_id, "
    "node, request_hash, request, recipient, status, attempts, provider_reference, result, "
    "error, created_at, updated_at, row_version"
)

MIGRATIONS: tuple[tuple[Step, ...], ...] = (
    # 1: threads, runs, checkpoints, logs, task writes, effects
    (
        """CREATE TABLE IF NOT EXISTS oncegraph_threads (
            thread_id TEXT PRIMARY KEY,
            version BIGINT NOT NULL,
            head_checkpoint_id TEXT,
            updated_at DOUBLE PRECISION NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS oncegraph_runs (
            run_id TEXT PRIMARY KEY,
            thread_id TEXT NOT NULL,
            status TEXT NOT NULL,
            workflow_name TEXT NOT NULL,
            workflow_version TEXT NOT NULL,
            state_schema_version INTEGER NOT NULL,
            graph_fingerprint TEXT NOT NULL,
            parent_run_id TEXT,
            parent_checkpoint_id TEXT,
            launch_reason TEXT NOT NULL,
            mode TEXT,
            input TEXT,
            config TEXT NOT NULL,
            error TEXT,
            lease_owner TEXT,
            lease_expires_at DOUBLE PRECISION,
            fencing_token BIGINT NOT NULL DEFAULT 0,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS oncegraph_runs_thread ON oncegraph_runs (thread_id, run_id)",
        "CREATE INDEX IF NOT EXISTS oncegraph_runs_status ON oncegraph_runs (status, run_id)",
        """CREATE TABLE IF NOT EXISTS oncegraph_checkpoints (
            thread_id TEXT NOT NULL,
            checkpoint_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            parent_checkpoint_id TEXT,
            step INTEGER NOT NULL,
            version BIGINT NOT NULL,
            channel_values TEXT NOT NULL,
            logs TEXT NOT NULL,
            next_nodes TEXT NOT NULL,
            metadata TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_id)
        )""",
        "CREATE INDEX IF NOT EXISTS oncegraph_checkpoints_run "
        "ON oncegraph_checkpoints (run_id, checkpoint_id)",
        """CREATE TABLE IF NOT EXISTS oncegraph_log (
            thread_id TEXT NOT NULL,
            channel TEXT NOT NULL,
            seq BIGINT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (thread_id, channel, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS oncegraph_task_writes (
            thread_id TEXT NOT NULL,
            checkpoint_id TEXT NOT NULL,
            task TEXT NOT NULL,
            kind TEXT NOT NULL,
            idx INTEGER NOT NULL,
            value TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_id, task, kind, idx)
        )""",
        f"""CREATE TABLE IF NOT EXISTS oncegraph_effects (
            {_EFFECT_V1_DEFS},
            UNIQUE (effect_type, effect_id)
        )""",
        "CREATE INDEX IF NOT EXISTS oncegraph_effects_run "
        "ON oncegraph_effects (run_id, created_at)",
        "CREATE INDEX IF NOT EXISTS oncegraph_effects_thread "
        "ON oncegraph_effects (thread_id, created_at)",
    ),
    # 2: effect rows are written by compare-and-set on a row version (guarantee 13)
    ("ALTER TABLE oncegraph_effects ADD COLUMN row_version BIGINT NOT NULL DEFAULT 0",),
    # 3: the per-database secret that keyed digests derive from (storage/sql/dbsecret.py);
    # its one row is written on first need, never by a migration
    (
        """CREATE TABLE IF NOT EXISTS oncegraph_secrets (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL
        )""",
    ),
    # 4: the append-only audit log of operator actions and interrupt answers (guarantee 14)
    (
        """CREATE TABLE IF NOT EXISTS oncegraph_audit (
            audit_id TEXT PRIMARY KEY,
            at DOUBLE PRECISION NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            target_kind TEXT NOT NULL,
            target_id TEXT NOT NULL,
            run_id TEXT,
            thread_id TEXT,
            reason TEXT,
            details TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS oncegraph_audit_run ON oncegraph_audit (run_id, at)",
        "CREATE INDEX IF NOT EXISTS oncegraph_audit_thread ON oncegraph_audit (thread_id, at)",
        "CREATE INDEX IF NOT EXISTS oncegraph_audit_target ON oncegraph_audit (target_id, at)",
    ),
    # 5: every run belongs to an app and, optionally, a tenant (guarantee 15). Existing rows
    # belong to the app that named them (workflow_name is the compiled graph's name);
    # a row written later by an older oncegraph (app_id NULL) is read the same way.
    (
        "ALTER TABLE oncegraph_runs ADD COLUMN app_id TEXT",
        "ALTER TABLE oncegraph_runs ADD COLUMN tenant TEXT",
        "UPDATE oncegraph_runs SET app_id = workflow_name WHERE app_id IS NULL",
        "CREATE INDEX IF NOT EXISTS oncegraph_runs_app "
        "ON oncegraph_runs (app_id, status, created_at)",
    ),
    # 6: a worker's claim walks its app's claimable runs in queue order and stops at its
    # limit (oncegraph.worker.queue.CLAIM): without this index it read and sorted every
    # queued run first (~1.4 ms per claim with 1,000 queued, ~0.15 ms with it). Partial:
    # it holds only the runs that may be claimed, so finished runs cost it nothing.
    (
        "CREATE INDEX IF NOT EXISTS oncegraph_runs_claimable "
        "ON oncegraph_runs ((COALESCE(app_id, workflow_name)), created_at, run_id) "
        "WHERE status IN ('queued', 'running')",
    ),
    # 7: effect rows kept a second unique index, (effect_type, effect_id), that no
    # statement reads and that effect_id (the key) already makes unique; every intent and
    # result write paid for it (on SQLite one more page per step commit, about a tenth of
    # a step). PostgreSQL drops the constraint; SQLite, which cannot, copies the table.
    (
        PerDialect(
            sqlite=(
                f"""CREATE TABLE oncegraph_effects_v7 (
                    {_EFFECT_V1_DEFS},
                    row_version BIGINT NOT NULL DEFAULT 0
                )""",
                f"INSERT INTO oncegraph_effects_v7 ({_EFFECT_COLUMNS}) "
                f"SELECT {_EFFECT_COLUMNS} FROM oncegraph_effects",
                "DROP TABLE oncegraph_effects",
                "ALTER TABLE oncegraph_effects_v7 RENAME TO oncegraph_effects",
                "CREATE INDEX oncegraph_effects_run ON oncegraph_effects (run_id, created_at)",
                "CREATE INDEX oncegraph_effects_thread "
                "ON oncegraph_effects (thread_id, created_at)",
            ),
            postgres=(
                "ALTER TABLE oncegraph_effects "
                "DROP CONSTRAINT IF EXISTS oncegraph_effects_effect_type_effect_id_key",
            ),
        ),
    ),
    # 8: a thread's latest run (read when a run starts on it: statements.THREAD_OPENING)
    # came from (thread_id, run_id): every run of the thread was read and sorted by
    # created_at, so on a chat thread with 3,000 runs starting one more took 1.2 ms for
    # this read (13 us in order), and a run twice as long as on a new thread. Migration
    # 5's (app_id, status, created_at) goes: runs are listed by app where
    # COALESCE(app_id, workflow_name) is the app (statements.RUN_APP), which an index on
    # the column cannot serve, so no statement read it and every status change rewrote
    # it. (An index on that expression would serve the listing, but its statistics made
    # PostgreSQL sort the whole queue in a worker's claim, whose ordered subquery is
    # planned without the claim's LIMIT: oncegraph.worker.queue.CLAIM.)
    (
        "DROP INDEX IF EXISTS oncegraph_runs_thread",
        "CREATE INDEX IF NOT EXISTS oncegraph_runs_thread "
        "ON oncegraph_runs (thread_id, created_at, run_id)",
        "DROP INDEX IF EXISTS oncegraph_runs_app",
    ),
    # 9: an app's runs are listed newest first (RunService.runs: the operator's list, the
    # API's, the CLI's) from this index, in its order, and cut at the limit
    # (statements.run_list): the listing filtered on COALESCE(app_id, workflow_name),
    # which no index served, so it read and sorted every run (81 ms for 50 runs of
    # 200,000 on PostgreSQL). It is on the column, not that expression: the expression's
    # statistics would change a worker's claim plan (see 8); a row an older oncegraph
    # wrote with no app_id is under NULL here, read by the listing's second arm. Built
    # in the migration's transaction (writes to the runs wait for it).
    (
        "CREATE INDEX IF NOT EXISTS oncegraph_runs_app_created "
        "ON oncegraph_runs (app_id, created_at, run_id)",
    ),
    # 10: a worker's claim walks its app's queued runs and, apart, the running runs whose
    # lease expired, merged in queue order (oncegraph.worker.queue.CLAIM). Migration 6's
    # index held both queued and running runs, so every claim walked past each running
    # run of the app before the first queued one (4.5 ms a claim with 5,000 running, 1.4
    # ms with these two). SQLite has no claim: it only drops the index nothing reads.
    (
        PerDialect(
            sqlite=("DROP INDEX IF EXISTS oncegraph_runs_claimable",),
            postgres=(
                "CREATE INDEX IF NOT EXISTS oncegraph_runs_queued "
                "ON oncegraph_runs ((COALESCE(app_id, workflow_name)), created_at, run_id) "
                "WHERE status = 'queued'",
                "CREATE INDEX IF NOT EXISTS oncegraph_runs_leases "
                "ON oncegraph_runs (lease_expires_at) WHERE status = 'running'",
                "DROP INDEX IF EXISTS oncegraph_runs_claimable",
            ),
        ),
    ),
    # 11: runs of a status are listed newest first across the apps (an operator's list
    # of failed or needs_review runs: statements.run_list) from this index, one walk a
    # status, cut at the limit; the index on (status, run_id) it replaces found them but
    # not in that order, so a listing read every run of the status and sorted them. It
    # serves every read that filtered on the status before.
    (
        "CREATE INDEX IF NOT EXISTS oncegraph_runs_status_created "
        "ON oncegraph_runs (status, created_at, run_id)",
        "DROP INDEX IF EXISTS oncegraph_runs_status",
    ),
    # 12: a run's replays and branches (the runs whose parent_run_id it is: the
    # operator's run page, list_runs(parent_run_id=...)), found from this index, which
    # holds only runs that have a parent (an ordinary run writes nothing to it); they
    # were looked for among the newest 1,000 runs, read and filtered.
    (
        "CREATE INDEX IF NOT EXISTS oncegraph_runs_parent "
        "ON oncegraph_runs (parent_run_id, created_at, run_id) "
        "WHERE parent_run_id IS NOT NULL",
    ),
    # 13: the idempotency keys of requests (the HTTP server's ``Idempotency-Key``; see
    # oncegraph.storage.requests): one row per (scope, key), claimed by one insert that
    # a second request with the key cannot also win; ``run_id`` is the run the request
    # starts, bound before it starts; ``status_code`` and ``response`` are NULL while it
    # is in flight. Pruned by ``expires_at``.
    (
        """CREATE TABLE IF NOT EXISTS oncegraph_requests (
            scope TEXT NOT NULL,
            idem_key TEXT NOT NULL,
            request_hash TEXT NOT NULL,
            run_id TEXT,
            status_code INTEGER,
            response TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (scope, idem_key)
        )""",
        "CREATE INDEX IF NOT EXISTS oncegraph_requests_expiry "
        "ON oncegraph_requests (expires_at)",
    ),
    # 14: the audit log is a chain (oncegraph.storage.auditchain): each record appended
    # from now on carries its number and a MAC over itself and the previous record's MAC,
    # checked by ``oncegraph db verify``. Records written before keep NULL in both and
    # are reported as unchained. The unique index finds the last link (and refuses a
    # second record with the same number).
    (
        "ALTER TABLE oncegraph_audit ADD COLUMN chain_seq BIGINT",
        "ALTER TABLE oncegraph_audit ADD COLUMN chain_mac TEXT",
        "CREATE UNIQUE INDEX IF NOT EXISTS oncegraph_audit_chain ON oncegraph_audit (chain_seq)",
    ),
    # 15: a run's place in its thread comes from the database, never from the clock of
    # the process that submitted it (created_at, and the run id, are that clock's): the
    # thread's latest run and a worker's claim order runs by ``seq``, given by the insert
    # (PostgreSQL: a sequence, the column's default; SQLite: one more than the thread's
    # largest, set by a trigger in the insert's transaction, which SQLite serializes).
    # Existing runs are numbered in the order they were listed in (created_at, run_id).
    # The (thread_id, seq) index finds a thread's latest run and its runs in order; it
    # replaces migration 8's (thread_id, created_at, run_id), which no statement reads now.
    (
        PerDialect(
            sqlite=(
                "ALTER TABLE oncegraph_runs ADD COLUMN seq BIGINT",
                "UPDATE oncegraph_runs SET seq = (SELECT count(*) FROM oncegraph_runs o "
                "WHERE o.thread_id = oncegraph_runs.thread_id "
                "AND (o.created_at, o.run_id) <= "
                "(oncegraph_runs.created_at, oncegraph_runs.run_id))",
                "CREATE INDEX IF NOT EXISTS oncegraph_runs_thread_seq "
                "ON oncegraph_runs (thread_id, seq)",
                "DROP INDEX IF EXISTS oncegraph_runs_thread",
                """CREATE TRIGGER IF NOT EXISTS oncegraph_runs_seq
                AFTER INSERT ON oncegraph_runs WHEN NEW.seq IS NULL
                BEGIN
                    UPDATE oncegraph_runs SET seq = (
                        SELECT COALESCE(MAX(o.seq), 0) + 1 FROM oncegraph_runs o
                        WHERE o.thread_id = NEW.thread_id
                    ) WHERE run_id = NEW.run_id;
                END""",
            ),
            postgres=(
                "CREATE SEQUENCE IF NOT EXISTS oncegraph_runs_seq",
                "ALTER TABLE oncegraph_runs ADD COLUMN IF NOT EXISTS seq BIGINT",
                # the index before the numbering: built after it in the same transaction,
                # over the rows it changed, it could not be used until every transaction
                # older than this one ended (PostgreSQL's broken HOT chains)
                "CREATE INDEX IF NOT EXISTS oncegraph_runs_thread_seq "
                "ON oncegraph_runs (thread_id, seq)",
                "UPDATE oncegraph_runs r SET seq = o.n FROM (SELECT run_id, "
                "row_number() OVER (ORDER BY created_at, run_id) AS n FROM oncegraph_runs) o "
                "WHERE r.run_id = o.run_id",
                "SELECT setval('oncegraph_runs_seq', "
                "COALESCE((SELECT MAX(seq) FROM oncegraph_runs), 0) + 1, false)",
                "ALTER TABLE oncegraph_runs "
                "ALTER COLUMN seq SET DEFAULT nextval('oncegraph_runs_seq')",
                "ALTER TABLE oncegraph_runs ALTER COLUMN seq SET NOT NULL",
                "ALTER SEQUENCE oncegraph_runs_seq OWNED BY oncegraph_runs.seq",
                "DROP INDEX IF EXISTS oncegraph_runs_thread",
            ),
        ),
    ),
)

LATEST_VERSION = len(MIGRATIONS)
