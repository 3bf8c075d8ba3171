"""The one error tree of oncegraph, and the control-flow signals that live outside it.

Every error a user can meet derives from :class:`OnceGraphError`::

    OnceGraphError
    ├── ConfigError                  bad config, bad graph, bad input: fix the call
    │   ├── GraphValidationError     the graph cannot compile (names the node/edge)
    │   ├── InvalidUpdateError       a node returned something that is not a state update
    │   ├── ToolArgumentsError       a model's arguments do not fit the tool (told to the model)
    │   └── PayloadTooLargeError     a value is over the configured size limit
    ├── RunStateError                the run is not in a state that allows this call
    │   ├── UnfinishedRunError       new input on a thread whose run is unfinished
    │   ├── NoRunToResumeError       resume asked for, but nothing to resume
    │   ├── AmbiguousAnswerError     one answer for several open interrupts
    │   ├── RunNotFoundError         unknown run id
    │   │   └── ForeignRunError      the run belongs to another app or tenant (guarantee 15)
    │   ├── RunBusyError             another live process holds the run right now
    │   ├── RunClosedError           the run already stopped; nothing new starts in it
    │   ├── RunFailedError           a submitted run ended failed (its result() raises this)
    │   └── NeedsReviewError         the run is parked until an operator acts
    ├── IncompatibleVersionError     the stored run was made by another graph version
    ├── StorageError                 the store failed (driver errors are mapped here)
    │   ├── StaleStateError          compare-and-swap lost: another writer was first
    │   │   └── ThreadMovedOnError   another run of the thread moved its head: this run ends
    │   ├── LeaseLostError           a fenced writer lost its lease
    │   ├── LedgerUnavailableError   the effect ledger cannot be read (fails closed)
    │   ├── LedgerWriteError         an effect result could not be recorded
    │   ├── CorruptRecordError       a stored row cannot be read back (left untouched)
    │   ├── StorageFullError         the database's disk is full: the write was rolled back
    │   └── EncryptionKeyError       a stored value's key id is not in the key ring
    │       └── PlaintextError       a clear value where the store encrypts: seal it first
    ├── EffectError                  a side effect could not be carried out safely
    │   ├── RequestMismatchError     same effect id, different request (guarantee 6)
    │   ├── EffectOutcomeUnknownError outcome unknown and the policy says stop
    │   ├── MissingRecordError       evidence replay found no recorded result
    │   ├── NondeterminismError      a node's n-th effect is not what was recorded there
    │   └── EffectFailedError        a recorded failure that is not retried
    ├── NodeError                    a node raised; the run failed (resumable)
    │   ├── NodeTimeoutError         node_timeout elapsed
    │   └── InterruptSwallowedError  a node caught the interrupt signal
    ├── ToolTimeoutError             tool_timeout elapsed (an UNKNOWN outcome)
    ├── SyncThreadsExhaustedError    too many sync calls outlived their timeout; none started
    ├── WaitTimeoutError             result(timeout) elapsed; the run goes on in the workers
    └── AgentError                   a ReactAgent run cannot go on as configured
        ├── TurnLimitError           max_turns model turns did not finish the task
        ├── StructuredOutputError    no answer fit response_format within its retries
        └── ModelCallError           the model (and every fallback) failed its attempts

Warnings derive from :class:`OnceGraphWarning` (a ``UserWarning``): something that runs,
but not as safely as it could (:class:`UnkeyedToolWarning`: a ``write`` tool that never
hands its idempotency key to the recipient).

Control flow (:class:`GraphInterrupt`, :class:`_CrashSignal`) derives from
``BaseException`` so that a user's ``except Exception`` never swallows it by accident.
"""

from __future__ import annotations

from typing import Any


class OnceGraphError(Exception):
    """Root of every error oncegraph raises on purpose."""


class OnceGraphWarning(UserWarning):
    """Root of oncegraph's warnings: the program runs, but less safely than it could."""


class UnkeyedToolWarning(OnceGraphWarning):
    """A ``write`` tool never reads its idempotency key: after a crash it is called
    again, and the recipient cannot tell that call from a new one
    (:mod:`oncegraph.tools.keycheck`). ``compile(strict=True)`` makes it an error."""


class ConfigError(OnceGraphError, ValueError):
    """The call, config or graph is wrong; the message names the fix."""


class GraphValidationError(ConfigError):
    """The graph cannot be compiled."""


class InvalidUpdateError(ConfigError):
    """A node returned a value that is not a valid state update."""


class EmptyChannelError(OnceGraphError):
    """A channel of a Pregel app was read before anything was written to it."""


class ToolArgumentsError(ConfigError):
    """The arguments a model sent do not fit the tool's parameters.

    :class:`~oncegraph.tools.ToolNode` never raises it: it sends the message back to the
    model as an error tool message, which names each bad argument so the model can
    correct the call. Nothing was recorded or called.
    """

    def __init__(self, tool_name: str, message: str) -> None:
        super().__init__(message)
        self.tool_name = tool_name


class PayloadTooLargeError(ConfigError):
    """A value to be stored is over the configured size limit."""


class RunStateError(OnceGraphError):
    """The run is not in a state that allows this operation."""


class UnfinishedRunError(RunStateError):
    """New input was sent to a thread whose latest run has not finished."""


class NoRunToResumeError(RunStateError):
    """A resume was asked for, but the thread has no unfinished run."""


class AmbiguousAnswerError(RunStateError, RuntimeError):
    """One answer (``Command(resume=value)``) for a run waiting on several interrupts:
    which question it answers is not said, so nothing is answered (a ``RuntimeError``,
    as LangGraph raises it)."""


class RunNotFoundError(RunStateError, LookupError):
    """No run with that id exists."""


class ForeignRunError(RunNotFoundError):
    """The run (or thread, or effect) belongs to another app or tenant; nothing was read
    or done (guarantee 15). A :class:`RunNotFoundError`, so a surface that answers "not found"
    for unknown ids does the same here and does not reveal that the id exists."""

    def __init__(
        self, message: str, *, run_id: str = "", app_id: str = "", owner_app: str = ""
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.app_id = app_id
        self.owner_app = owner_app


class RunBusyError(RunStateError):
    """Another live process holds the run (guarantee 13); nothing was done here."""

    def __init__(self, message: str, *, run_id: str = "", owner: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.owner = owner


class RunClosedError(RunStateError):
    """The run already stopped; an attempt started after that is refused (guarantee 13)."""


class RunFailedError(RunStateError):
    """A submitted run ended ``failed`` (a node raised, a timeout); it can be continued."""

    def __init__(self, message: str, *, run_id: str = "") -> None:
        super().__init__(message)
        self.run_id = run_id


class GraphDrained(RunStateError):
    """The caller's ``RunControl`` asked the run to drain: the step that was running
    finished and was committed, no later step started. The run is unfinished and
    resumable: ``invoke(None, config)`` goes on from where it stopped."""

    def __init__(self, reason: str = "shutdown") -> None:
        super().__init__(
            f"the run was drained ({reason}) before its next step; continue it with "
            "invoke(None, config) on the same thread"
        )
        self.reason = reason


class NeedsReviewError(RunStateError):
    """The run is parked as ``needs_review``; an operator must act before it goes on."""

    def __init__(self, message: str, *, run_id: str = "", effect_id: str = "") -> None:
        super().__init__(message)
        self.run_id = run_id
        self.effect_id = effect_id


class IncompatibleVersionError(OnceGraphError):
    """The stored run was made by a graph whose version or shape differs from this one."""


class StorageError(OnceGraphError):
    """The store failed. Driver errors are mapped to this at the storage boundary."""


class StaleStateError(StorageError):
    """A compare-and-swap on the thread version lost; nothing was written."""


class ThreadMovedOnError(StaleStateError):
    """Another run of the thread committed first, so the thread's head is not this run's:
    the run is failed and never goes on from the other run's state."""

    def __init__(self, message: str, *, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class LeaseLostError(StorageError):
    """The writer's lease (fencing token) is no longer current; nothing was written."""


class LedgerUnavailableError(StorageError):
    """The effect ledger cannot be read; risky tools do not run (guarantee 7)."""


class LedgerWriteError(StorageError):
    """An effect result could not be recorded after retries (guarantee 7)."""


class CorruptRecordError(StorageError):
    """A stored row cannot be read back. It was left untouched and nothing re-ran.

    ``table``, ``key`` and ``column`` name what is damaged (``column`` is ``""`` when the
    row as a whole is). For an effect row whose damage an operator's resolution replaces
    (its outcome columns), ``salvage`` is the record with those columns unread, so that
    ``resolve_effect`` can record what the operator found at the recipient."""

    def __init__(
        self,
        message: str,
        *,
        table: str = "",
        key: Any = None,
        column: str = "",
        salvage: Any = None,
    ) -> None:
        super().__init__(message)
        self.table = table
        self.key = key
        self.column = column
        self.salvage = salvage


def corrupt(
    table: str,
    key: object,
    detail: str,
    *,
    thread_id: str | None = None,
    run_id: str | None = None,
) -> CorruptRecordError:
    """The error for a stored row that cannot be read back (guarantee 12): names the table, the
    row, its thread and run, and says nothing was changed or re-executed."""
    where = [f"key {key!r}"]
    if thread_id is not None:
        where.append(f"thread {thread_id!r}")
    if run_id is not None:
        where.append(f"run {run_id!r}")
    return CorruptRecordError(
        f"corrupt row in {table} ({', '.join(where)}): {detail}. The row was left untouched "
        "and nothing was re-executed; check the database was written by a compatible "
        "oncegraph version (`oncegraph db verify`) or repair the row by hand."
    )


class StorageFullError(StorageError):
    """The database's disk (or its size limit) is full. The write was rolled back, so
    nothing of it was stored; the message says what that means for the run and its tools
    (did a tool run, can the run be resumed) and what to do."""


class EncryptionKeyError(StorageError):
    """A stored value was encrypted with a key id this store's key ring lacks (or the store
    has no keys). Nothing was changed; add the key to read it."""


class PlaintextError(EncryptionKeyError):
    """A column the store encrypts holds a value that is not encrypted, while the store has
    keys (a database written before the keys were configured, or a value written by
    hand). Nothing was changed; ``oncegraph db encrypt`` seals such values in place.
    ``place`` says where (``table:column:row key``)."""

    def __init__(self, message: str, *, place: str = "") -> None:
        super().__init__(message)
        self.place = place


class EffectError(OnceGraphError):
    """A side effect could not be carried out safely."""


class RequestMismatchError(EffectError):
    """The same effect id was used with a different request (guarantee 6)."""

    def __init__(self, effect_id: str, recorded_hash: str, new_hash: str) -> None:
        super().__init__(
            f"effect {effect_id} was recorded with request hash {recorded_hash} but is now "
            f"called with request hash {new_hash}; nothing was sent. The same command must "
            "carry the same arguments; fix the caller or start a new run."
        )
        self.effect_id = effect_id
        self.recorded_hash = recorded_hash
        self.new_hash = new_hash


class EffectOutcomeUnknownError(EffectError):
    """The outcome of an effect is unknown and its policy forbids guessing."""


class EffectFailedError(EffectError):
    """The effect failed earlier and its class forbids an automatic retry."""


class NondeterminismError(EffectError):
    """A re-run node made its effects in another order than recorded (a deploy?)."""


class MissingRecordError(EffectError):
    """An evidence replay needed a recorded result that does not exist."""


class NodeError(OnceGraphError):
    """A node raised; the run is marked failed and can be resumed.

    An error handler (``add_node(..., error_handler=fn)``) is given one through a
    parameter annotated ``NodeError``: ``.node`` names the node that failed for good,
    ``.error`` is what it raised."""

    def __init__(self, message: str, *, node: str = "", error: BaseException | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.error = error


class NodeTimeoutError(NodeError, TimeoutError):
    """The node ran longer than ``node_timeout``, or an attempt hit its
    ``TimeoutPolicy``: ``.kind`` is ``"run"`` (the wall-clock cap) or ``"idle"`` (no
    progress for ``idle_timeout``)."""

    def __init__(
        self,
        message: str,
        *,
        node: str = "",
        error: BaseException | None = None,
        kind: str = "run",
        run_timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        super().__init__(message, node=node, error=error)
        self.kind = kind
        self.run_timeout = run_timeout
        self.idle_timeout = idle_timeout


class NodeCancelledError(NodeError):
    """A node's own code raised ``asyncio.CancelledError`` while nobody cancelled the run:
    a failure of that node (the run is failed and can be continued), not a silent stop."""


class InterruptSwallowedError(NodeError):
    """A node caught oncegraph's interrupt signal instead of letting it propagate."""


class ToolTimeoutError(OnceGraphError, TimeoutError):
    """A tool ran longer than ``tool_timeout``; its outcome is UNKNOWN, not failed."""


class SyncThreadsExhaustedError(OnceGraphError):
    """A sync node or tool was not started: too many sync calls are still running after
    their timeout (their threads cannot be stopped). The call was not made."""


class WaitTimeoutError(OnceGraphError, TimeoutError):
    """Waiting for a submitted run's result timed out; the run itself goes on."""


class RecursionLimitError(NodeError, RecursionError):
    """The run took more steps than ``recursion_limit`` in one call (LangGraph's
    ``GraphRecursionError``, also importable under that name)."""


GraphRecursionError = RecursionLimitError


class AgentError(OnceGraphError):
    """A :class:`~oncegraph.prebuilt.agent.ReactAgent` run cannot go on as configured.
    The run is failed and can be continued (``invoke(None, config)``) once the cause is
    fixed, or abandoned."""


class TurnLimitError(AgentError):
    """The agent used its ``max_turns`` model turns and still wanted more."""


class StructuredOutputError(AgentError):
    """The model's answers did not fit ``response_format`` within ``response_retries``."""


class ModelCallError(AgentError):
    """Every attempt at the model call failed, on the model and on each fallback."""


# -- control flow, outside the error tree -------------------------------------------------


class GraphInterrupt(BaseException):
    """Raised by :func:`oncegraph.interrupt` to pause the run. Never catch it."""

    def __init__(self, value: Any, index: int) -> None:
        super().__init__(value)
        self.value = value
        self.index = index


class ParentCommand(Exception):
    """A node of a subgraph returned ``Command(graph=Command.PARENT, ...)``: the subgraph
    stops, and the task of the parent graph that ran it ends with that command (its
    update applied to the parent's state, its ``goto`` routing the parent). ``args[0]``
    is the command. It reaches the caller only when the graph that got it has no parent.
    """

    def __init__(self, command: Any) -> None:
        super().__init__(command)
        self.command = command

    def __str__(self) -> str:
        return (
            f"{self.command!r} was returned by a node of a graph that does not run as a "
            "subgraph, so there is no parent graph to update or route: add this graph to "
            "a parent as a node (or call it inside a parent's node), or return the "
            "Command without graph=Command.PARENT"
        )


class _ParkSignal(BaseException):
    """Raised by the ledger to park the run as ``needs_review`` (guarantee 5)."""

    def __init__(self, effect_id: str, reason: str) -> None:
        super().__init__(reason)
        self.effect_id = effect_id
        self.reason = reason


class _CrashSignal(BaseException):
    """Raised by an in-process FaultPlan to simulate a crash at a named point."""

    def __init__(self, point: str) -> None:
        super().__init__(point)
        self.point = point


__all__ = [
    "AmbiguousAnswerError",
    "ConfigError",
    "CorruptRecordError",
    "EffectError",
    "EffectFailedError",
    "EffectOutcomeUnknownError",
    "EmptyChannelError",
    "EncryptionKeyError",
    "GraphDrained",
    "GraphInterrupt",
    "GraphRecursionError",
    "GraphValidationError",
    "IncompatibleVersionError",
    "InterruptSwallowedError",
    "InvalidUpdateError",
    "LeaseLostError",
    "LedgerUnavailableError",
    "LedgerWriteError",
    "MissingRecordError",
    "NeedsReviewError",
    "NoRunToResumeError",
    "NodeCancelledError",
    "NodeError",
    "NodeTimeoutError",
    "NondeterminismError",
    "OnceGraphError",
    "OnceGraphWarning",
    "ParentCommand",
    "PayloadTooLargeError",
    "PlaintextError",
    "RecursionLimitError",
    "RequestMismatchError",
    "RunBusyError",
    "RunClosedError",
    "RunFailedError",
    "RunNotFoundError",
    "RunStateError",
    "StaleStateError",
    "StorageError",
    "StorageFullError",
    "SyncThreadsExhaustedError",
    "ThreadMovedOnError",
    "ToolTimeoutError",
    "UnfinishedRunError",
    "UnkeyedToolWarning",
    "WaitTimeoutError",
]
