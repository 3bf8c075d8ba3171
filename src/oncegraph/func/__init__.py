"""LangGraph's functional API on oncegraph's engine: ``@entrypoint`` and ``@task``.

An entrypoint runs as a one-node graph (:mod:`oncegraph.func.entrypoint`); each task
call inside it is a recorded step of that node (:mod:`oncegraph.func.tasks`): a task
that finished is never run again on resume, and a task that declares a side effect
(``@task(effect="write" | "irreversible")`` or a ``@tool``) gets the ledger's
guarantees: its intent is recorded before the call, it carries one idempotency key on
every attempt, and an irreversible one whose outcome is unknown is reconciled, never
sent again blindly.
"""

from oncegraph.func.entrypoint import Entrypoint, entrypoint
from oncegraph.func.futures import TaskFuture
from oncegraph.func.tasks import TaskFunction, task

__all__ = ["Entrypoint", "TaskFunction", "TaskFuture", "entrypoint", "task"]
