"""How a run's failure reads: the status text, the error the caller gets, and the error of
a run whose thread moved on to another run's state."""

from __future__ import annotations

from oncegraph.errors import OnceGraphError, ThreadMovedOnError
from oncegraph.runtime.decisions import Fail
from oncegraph.storage.records import RunRecord


def failure_text(decision: Fail) -> str:
    if decision.applying:
        return f"applying the writes of {', '.join(decision.nodes)} failed: {decision.description}"
    return f"node {decision.node!r} raised {decision.description}"


def as_raised(decision: Fail, run: RunRecord) -> BaseException:
    """The error the caller gets: oncegraph's own errors as they are; a node's own
    exception as itself (``except ValueError`` around ``invoke`` catches it, as in
    LangGraph), with the run id attached as ``oncegraph_run_id`` and a note saying the
    run is failed and how to continue it."""
    error = decision.error
    if isinstance(error, OnceGraphError):
        return error
    if getattr(error, "oncegraph_run_id", None) != run.run_id:
        where = (
            f"applying the writes of {', '.join(decision.nodes)}"
            if decision.applying
            else f"node {decision.node!r}"
        )
        try:
            error.oncegraph_run_id = run.run_id  # type: ignore[attr-defined]
            error.oncegraph_node = decision.node  # type: ignore[attr-defined]
        except AttributeError:  # an exception class with __slots__: the note still says it
            pass
        error.add_note(
            f"oncegraph: {where} raised this; run {run.run_id} on thread "
            f"{run.thread_id!r} is failed and can be continued with invoke(None, config) "
            "or abandoned with app.abandon(config)"
        )
    return error


def moved_on_error(run_id: str, thread_id: str, what: str) -> ThreadMovedOnError:
    """The error of a run whose thread moved on to another run's state (see
    :class:`ThreadMovedOnError`); ``what``: what was not done."""
    return ThreadMovedOnError(
        f"run {run_id} stopped: another run of thread {thread_id!r} committed after this "
        f"run's last step, so {what} (nothing of it was written). The run is failed and "
        "never goes on from the other run's state, which would redo its work there; its "
        "effect log keeps what it did. Abandon it (app.abandon({'thread_id': "
        f"{thread_id!r}, 'run_id': {run_id!r}}}, reason=...)) and send its input again, or "
        "replay it from its own checkpoints (app.replay(run_id, ...)).",
        run_id=run_id,
    )


__all__ = ["as_raised", "failure_text", "moved_on_error"]
