"""The one SQL store: every protocol method written once, over a thin dialect.

:class:`SqlStore` joins the ports (:mod:`.store_runs`: threads, checkpoints and runs;
:mod:`.store_ledger`: effects, the audit log, idempotency keys) over the hooks of
:class:`~oncegraph.storage.sql.store_port.SqlPort`. :class:`SqliteCheckpointer` and
:class:`PgCheckpointer` subclass it and keep only what differs: connections,
transactions, locks, group commit, the step commit, the parameter style and the error map.
LangGraph's checkpointer API (``get_tuple``, ``list``, ``from_conn_string``, ...) comes
from :mod:`oncegraph.storage.saver_api`.
"""

from __future__ import annotations

from oncegraph.storage.doors import StoreDoors
from oncegraph.storage.saver_api import FromConnString, SaverMethods
from oncegraph.storage.sql.store_ledger import LedgerMethods
from oncegraph.storage.sql.store_runs import RunMethods


class SqlStore(SaverMethods, FromConnString, RunMethods, LedgerMethods, StoreDoors):
    """A :class:`~oncegraph.storage.protocols.Checkpointer` over one SQL dialect."""


__all__ = ["SqlStore"]
