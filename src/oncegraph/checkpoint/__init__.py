"""LangGraph's ``langgraph.checkpoint`` module paths, for code ported by replacing
``langgraph`` with ``oncegraph`` in its imports: ``oncegraph.checkpoint.memory``
(``MemorySaver`` / ``InMemorySaver``), ``.sqlite`` (``SqliteSaver``), ``.sqlite.aio``
(``AsyncSqliteSaver``), ``.postgres`` (``PostgresSaver``), ``.postgres.aio``
(``AsyncPostgresSaver``) and ``.base`` (``BaseCheckpointSaver``). Each name is
oncegraph's store of that kind (:mod:`oncegraph.storage.checkpointer`): one class serves
sync and async code alike, and each takes oncegraph's arguments (a file path for SQLite,
a DSN for PostgreSQL)."""
