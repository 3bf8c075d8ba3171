"""The run config: the familiar ``config={"thread_id": ...}`` turned into a typed value.

Three kinds of top-level keys, and nothing else (a misspelt key is a ``ConfigError``
naming the closest valid one, never a silent default):

* **identity** (``thread_id``, ``run_id``, ``checkpoint_id``), read from the top level or
  from ``config["configurable"]`` as LangGraph writes them. Ids a caller gives are
  checked by :func:`caller_id`: no control, format or line-separator character;
* **control** (timeouts, grace, ``recursion_limit``, ``fault_plan``, ``sleep``), read from
  the TOP LEVEL only. An app that forwards a client's ``configurable`` to ``invoke``
  therefore never lets that client turn a timeout off or plant a fault plan: inside
  ``configurable`` those names are plain values handed to nodes, nothing more;
* **passed on** (LangChain's ``RunnableConfig`` keys ``tags``, ``metadata``,
  ``callbacks``, ``run_name``, ``max_concurrency``, and ``actor``, who answers an
  interrupt): accepted so that LangGraph code runs unchanged, and handed to nodes.

Everything in ``configurable`` is free-form and reaches nodes that take a ``config``
parameter.

Continuing a stored run (``invoke(None, config)``, ``app.resume(run_id)``, a worker):
the timeouts and ``recursion_limit`` this call names explicitly win, the others are the
run's stored ones, never the defaults (:meth:`RunConfig.going_on`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import time
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError

if TYPE_CHECKING:
    from oncegraph.runtime.faults import FaultPlan

DEFAULT_NODE_TIMEOUT = 900.0
DEFAULT_TOOL_TIMEOUT = 300.0
DEFAULT_TOOL_GRACE = 30.0
DEFAULT_RECURSION_LIMIT = 100

Sleep = Callable[[float], Awaitable[Any]]

_IDENTITY = frozenset({"thread_id", "run_id"})
# The settings stored with a run, which a continue of it keeps unless the call names them.
STORED = ("node_timeout", "tool_timeout", "tool_grace", "recursion_limit")
NODE_FINISHED = "on_node_finished"
"""``config["configurable"]["on_node_finished"]``: a callable this call hands each node's
name to when the node finishes (returns; not when it interrupts or fails), at every depth
of subgraphs; an observer only (it is never stored, and its errors are the caller's)."""
_CONTROL = frozenset({*STORED, "fault_plan", "sleep"})
# LangChain's RunnableConfig keys (``recursion_limit``, ``configurable`` and ``run_id``
# are read above) and oncegraph's ``actor`` (who answers an interrupt): handed to nodes.
_PASSED_ON = frozenset(
    {"tags", "metadata", "callbacks", "run_name", "max_concurrency", "actor", "checkpoint_id"}
)
TOP_LEVEL = frozenset({*_IDENTITY, *_CONTROL, *_PASSED_ON, "configurable"})
"""Every key a run config may hold at its top level."""

# Characters no id may hold: controls (C0, DEL, C1 such as U+0085), format characters
# (bidi overrides, zero-width), line and paragraph separators, lone surrogates. No store
# keeps NUL; the others split log lines (``splitlines()`` breaks at U+0085 and U+2028)
# or make a shown id read as another.
_REFUSED = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_MISSING: Any = object()


# Controls have no Unicode name; these are the ones people meet.
_CONTROL_NAMES = {
    "\x00": "NUL",
    "\t": "TAB",
    "\n": "LINE FEED",
    "\r": "CARRIAGE RETURN",
    "\x1b": "ESCAPE",
    "\x7f": "DELETE",
    "\x85": "NEXT LINE",
}


def _character(ch: str) -> str:
    """``U+2028 LINE SEPARATOR``: a character named for an error message."""
    name = unicodedata.name(ch, "") or _CONTROL_NAMES.get(ch, "")
    code = f"U+{ord(ch):04X}"
    if name:
        return f"{code} {name}"
    kind = {"Cc": "a control character", "Cs": "a lone surrogate"}.get(
        unicodedata.category(ch), "an invisible character"
    )
    return f"{code} ({kind})"


def caller_id(name: str, value: Any) -> str:
    """``value`` as an id taken from a caller (a config, an HTTP path, the CLI): a
    non-empty string (an int or UUID is taken as its text) with no character of the
    Unicode categories Cc, Cf, Zl, Zp or Cs. Anything else is a ``ConfigError`` naming
    the id, the character and its position."""
    if isinstance(value, bool) or not isinstance(value, (str, int, uuid.UUID)):
        raise ConfigError(f"{name} must be a string (or an int or UUID); got {value!r}")
    text = value if type(value) is str else str(value)
    if text.isprintable() and text:  # the common case: no control, format or separator
        return text
    if not text:
        raise ConfigError(f"{name} must not be empty")
    for at, ch in enumerate(text):
        if unicodedata.category(ch) in _REFUSED:
            raise ConfigError(
                f"{name} must not contain control characters, format characters or line "
                f"separators; {text!r} holds {_character(ch)} at position {at}. They forge "
                "log lines and hide text on screens, and no store keeps NUL: keep the "
                f"{name} to visible characters"
            )
    return text


def lookup_id(name: str, value: Any) -> str:
    """``value`` as an id to look up (a listing's filter): a non-empty string, an int or a
    UUID, its characters unchecked. A read names rows already kept, and an id stored
    before :func:`caller_id` refused its characters must stay reachable to be inspected."""
    if isinstance(value, bool) or not isinstance(value, (str, int, uuid.UUID)):
        raise ConfigError(f"{name} must be a string (or an int or UUID); got {value!r}")
    text = value if type(value) is str else str(value)
    if not text:
        raise ConfigError(f"{name} must not be empty")
    return text


def _thread_id(value: Any) -> str | None:
    """A thread id as stored: a string (ints and UUIDs are written as their text)."""
    return None if value is None else caller_id("thread_id", value)


def _check_keys(config: Mapping[Any, Any]) -> None:
    """Refuse a top-level key that is no run option (a misspelt ``tool_timout`` would
    otherwise leave the default timeout on, silently)."""
    for key in config:
        if key in TOP_LEVEL:
            continue
        if not isinstance(key, str):
            raise ConfigError(f"config keys must be strings; got {key!r}")
        close = difflib.get_close_matches(key, sorted(TOP_LEVEL), n=1)
        hint = f": did you mean {close[0]!r}?" if close else "."
        raise ConfigError(
            f"config key {key!r} is not a run option{hint} The top level takes "
            f"{', '.join(sorted(TOP_LEVEL))}; values for your own nodes go in "
            f"config['configurable'], e.g. {{'configurable': {{{key!r}: ...}}}}"
        )


def _seconds(name: str, value: Any, default: float) -> float | None:
    if value is _MISSING:
        return default
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(
            f"{name} must be a number of seconds, or None/0 to disable; got {value!r}"
        )
    return float(value)


def step_seconds(value: Any) -> float:
    """A graph's ``step_timeout``, checked: a positive number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(
            f"step_timeout must be a positive number of seconds (or None for no limit); "
            f"got {value!r}"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class RunConfig:
    thread_id: str | None
    node_timeout: float | None = DEFAULT_NODE_TIMEOUT
    tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT
    # After a timeout, how long to wait for the call to actually end (a sync tool's
    # thread cannot be stopped) before treating it as still in flight (guarantee 13).
    tool_grace: float | None = DEFAULT_TOOL_GRACE
    recursion_limit: int = DEFAULT_RECURSION_LIMIT
    fault_plan: FaultPlan | None = None
    configurable: Mapping[str, Any] = field(default_factory=dict)
    run_id: str | None = None  # continue exactly this run; None: the thread's latest
    sleep: Sleep = asyncio.sleep  # waits between retries (tests inject a fake)
    # invoke(..., interrupt_before=[...], interrupt_after=[...]): this call's breakpoints,
    # on top of the compiled graph's (node names, or ("*",) for every node)
    interrupt_before: tuple[str, ...] = ()
    interrupt_after: tuple[str, ...] = ()
    # The stored settings (STORED) this call named; the others are defaults, which a
    # continue of a stored run replaces with the run's own (going_on).
    given: frozenset[str] = frozenset()
    # invoke(..., context=...): the run's static context (a node's ``runtime.context``);
    # this call's only, never stored, as in LangGraph
    context: Any = None
    # invoke(..., control=RunControl()): this call's drain switch (oncegraph.runtime.control)
    control: Any = None
    # compile(store=...): the key-value store a node's ``store`` parameter gets
    store: Any = None
    # the graph's ``step_timeout`` (LangGraph's attribute): seconds a step of the run may
    # take before its running tasks are cancelled and the run fails with TimeoutError
    step_timeout: float | None = None
    # False: the thread is the run's own (no checkpointer, none named): not shown as one
    named_thread: bool = True

    @classmethod
    def parse(cls, config: Mapping[str, Any] | None) -> RunConfig:
        if config is None:
            return cls(thread_id=None)
        if not isinstance(config, Mapping):
            raise ConfigError(f"config must be a dict like {{'thread_id': 't1'}}; got {config!r}")
        _check_keys(config)
        inner = config.get("configurable")
        if inner is not None and not isinstance(inner, Mapping):
            raise ConfigError(f"config['configurable'] must be a dict; got {inner!r}")
        # one pass over each level: identity from either (the top level wins), the rest
        # of ``configurable`` and the top level's non-control keys for nodes
        identity: dict[str, Any] = {}
        configurable: dict[str, Any] = {}
        if inner:
            for k, v in inner.items():
                if k in _IDENTITY:
                    identity[k] = v
                else:
                    configurable[k] = v
        for k, v in config.items():
            if k in _IDENTITY:
                identity[k] = v
            elif k not in _CONTROL and k != "configurable":
                configurable[k] = v
        checkpoint = configurable.get("checkpoint_id")
        if checkpoint:  # an old checkpoint asked for: an id, checked as the others
            configurable["checkpoint_id"] = caller_id("checkpoint_id", checkpoint)
        width = configurable.get("max_concurrency")
        if width is not None and (type(width) is not int or width < 1):
            raise ConfigError(
                "max_concurrency must be a positive integer (or None for no limit); "
                f"got {width!r}"
            )
        top = config
        limit = top.get("recursion_limit", DEFAULT_RECURSION_LIMIT)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigError(f"recursion_limit must be a positive integer; got {limit!r}")
        sleep = top.get("sleep", asyncio.sleep)
        if not callable(sleep):
            raise ConfigError(f"sleep must be an async function of seconds; got {sleep!r}")
        plan = top.get("fault_plan")
        if plan is not None:
            from oncegraph.runtime.faults import FaultPlan

            if not isinstance(plan, FaultPlan):
                raise ConfigError(f"fault_plan must be a FaultPlan; got {plan!r}")
        run_id = identity.get("run_id")
        return cls(
            thread_id=_thread_id(identity.get("thread_id")),
            node_timeout=_seconds(
                "node_timeout", top.get("node_timeout", _MISSING), DEFAULT_NODE_TIMEOUT
            ),
            tool_timeout=_seconds(
                "tool_timeout", top.get("tool_timeout", _MISSING), DEFAULT_TOOL_TIMEOUT
            ),
            tool_grace=_seconds("tool_grace", top.get("tool_grace", _MISSING), DEFAULT_TOOL_GRACE),
            recursion_limit=limit,
            fault_plan=plan,
            configurable=configurable,
            run_id=caller_id("run_id", run_id) if run_id else None,
            sleep=sleep,
            given=frozenset(k for k in STORED if k in top),
        )

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any], thread_id: str) -> RunConfig:
        """The config a stored run goes on with: its timeouts and limits (see
        :meth:`to_json`), nothing else it keeps beside them (its graph shape, a replay's
        policy)."""
        keep = {k: stored[k] for k in STORED if k in stored}
        return cls.parse({**keep, "thread_id": thread_id})

    def going_on(self, stored: Mapping[str, Any]) -> RunConfig:
        """This call's config for continuing a run whose stored config is ``stored``:
        the settings this call named win (``invoke(None, {"thread_id": t,
        "tool_timeout": 5})`` uses 5), each one it did not name is the run's stored
        value, not the default. What is stored is not changed: a later continue that
        names nothing (a worker, an operator's Continue) uses the stored values again."""
        if not isinstance(stored, Mapping):
            return self
        keep = {k: stored[k] for k in STORED if k in stored and k not in self.given}
        if not keep:
            return self
        from_run = RunConfig.parse({**keep, "thread_id": self.thread_id})
        changes: dict[str, Any] = {k: getattr(from_run, k) for k in keep}
        going: RunConfig = dataclasses.replace(self, **changes)
        return going

    def to_json(self) -> dict[str, Any]:
        """What is stored with the run (timeouts; not the fault plan or the sleeper)."""
        return {
            "node_timeout": self.node_timeout,
            "tool_timeout": self.tool_timeout,
            "tool_grace": self.tool_grace,
            "recursion_limit": self.recursion_limit,
        }


async def thread_sleep(seconds: float) -> None:
    """A sync run's wait between retries: ``time.sleep`` in a worker thread (as
    LangGraph's sync runs wait), so the event loop goes on serving other runs."""
    if seconds > 0:
        await asyncio.to_thread(time.sleep, seconds)


__all__ = [
    "DEFAULT_NODE_TIMEOUT",
    "DEFAULT_RECURSION_LIMIT",
    "DEFAULT_TOOL_GRACE",
    "DEFAULT_TOOL_TIMEOUT",
    "NODE_FINISHED",
    "STORED",
    "TOP_LEVEL",
    "RunConfig",
    "Sleep",
    "caller_id",
    "lookup_id",
    "step_seconds",
    "thread_sleep",
]
