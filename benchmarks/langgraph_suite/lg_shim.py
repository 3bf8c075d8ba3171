"""Redirect ``import langgraph...`` onto oncegraph's documented names (a pytest plugin).

Loaded with ``-p lg_shim``, it puts a finder first on ``sys.meta_path`` (at
``pytest_configure``, before any test module is imported) that answers every
``langgraph`` / ``langgraph.*`` import with an alias module. A name read from an alias
module ``langgraph.a.b`` resolves, in this order:

1. the sed twin: ``oncegraph.a.b`` exports the same name (in its ``__all__``), so a
   program ported by ``s/langgraph/oncegraph/`` gets exactly that object;
2. a documented rename in :data:`RENAMES` (``InMemorySaver`` is ``InMemoryCheckpointer``);
3. a parent twin: ``oncegraph.a`` exports the name (``langgraph.graph.state.StateGraph``
   is ``oncegraph.graph.StateGraph``);
4. otherwise a placeholder class that imports fine but raises
   :class:`NoOncegraphEquivalentError` ("no oncegraph equivalent: langgraph.X") when it
   is used (called, subclassed and instantiated, subscripted, read, isinstance'd), so
   the test that uses it fails under a cause instead of killing the file's collection.

Private names (a leading underscore) never map: they are LangGraph's internals and
oncegraph documents no equivalent. Only names in a module's ``__all__`` count as
documented, so an internal oncegraph helper that happens to share a name is never used.

The invariant: nothing of LangGraph is imported, ever. A real ``langgraph`` installed in
the same environment is shadowed, because this finder is consulted first.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

# Documented oncegraph names for LangGraph names that are spelled differently. Keys are
# (LangGraph module, name); values are "oncegraph.module:name". Twins (rule 1) win over
# these, so a future ``oncegraph.checkpoint.memory.InMemorySaver`` is used as soon as
# it exists.
_CHECKPOINTER = "oncegraph.storage.checkpointer"
RENAMES: dict[tuple[str, str], str] = {
    ("langgraph.checkpoint.memory", "InMemorySaver"): f"{_CHECKPOINTER}:InMemoryCheckpointer",
    ("langgraph.checkpoint.memory", "MemorySaver"): f"{_CHECKPOINTER}:InMemoryCheckpointer",
    ("langgraph.checkpoint.sqlite", "SqliteSaver"): f"{_CHECKPOINTER}:SqliteCheckpointer",
    ("langgraph.checkpoint.sqlite.aio", "AsyncSqliteSaver"): f"{_CHECKPOINTER}:SqliteCheckpointer",
    ("langgraph.checkpoint.postgres", "PostgresSaver"): f"{_CHECKPOINTER}:PgCheckpointer",
    ("langgraph.checkpoint.postgres.aio", "AsyncPostgresSaver"): f"{_CHECKPOINTER}:PgCheckpointer",
    ("langgraph.checkpoint.base", "BaseCheckpointSaver"): f"{_CHECKPOINTER}:Checkpointer",
    ("langgraph.constants", "START"): "oncegraph.graph:START",
    ("langgraph.constants", "END"): "oncegraph.graph:END",
    ("langgraph._internal._constants", "CONFIG_KEY_NODE_FINISHED"): (
        "oncegraph.constants:CONFIG_KEY_NODE_FINISHED"
    ),
    **{
        ("langgraph._internal._constants", name): f"oncegraph.constants:{name}"
        for name in (
            "PULL",
            "PUSH",
            "ERROR",
            "INTERRUPT",
            "RESUME",
            "CONFIG_KEY_TIMED_ATTEMPT_OBSERVER",
        )
    },
    ("langgraph.prebuilt", "ToolNode"): "oncegraph.tools:ToolNode",
    ("langgraph.prebuilt.tool_node", "ToolNode"): "oncegraph.tools:ToolNode",
    ("langgraph.prebuilt", "tools_condition"): "oncegraph.prebuilt.agent:tools_condition",
    ("langgraph.prebuilt.tool_node", "tools_condition"): "oncegraph.prebuilt.agent:tools_condition",
    ("langgraph.graph.message", "MessagesState"): "oncegraph.state:MessagesState",
    ("langgraph.graph.message", "add_messages"): "oncegraph.state:add_messages",
}

# LangGraph submodules a test may reach as an attribute of its package
# (``from langgraph.checkpoint import memory``, ``langgraph.pregel._retry`` in a
# ``mocker.patch`` target): these resolve to the alias module, not to a placeholder.
SUBMODULES = frozenset(
    {
        "langgraph._internal",
        "langgraph.cache",
        "langgraph.channels",
        "langgraph.checkpoint",
        "langgraph.checkpoint.memory",
        "langgraph.checkpoint.postgres",
        "langgraph.checkpoint.serde",
        "langgraph.checkpoint.sqlite",
        "langgraph.config",
        "langgraph.constants",
        "langgraph.errors",
        "langgraph.func",
        "langgraph.graph",
        "langgraph.graph.message",
        "langgraph.graph.state",
        "langgraph.managed",
        "langgraph.prebuilt",
        "langgraph.pregel",
        "langgraph.runtime",
        "langgraph.store",
        "langgraph.types",
    }
)


class NoOncegraphEquivalentError(Exception):
    """A LangGraph name with no documented oncegraph equivalent was used."""

    def __init__(self, name: str, use: str) -> None:
        super().__init__(f"no oncegraph equivalent: {name} (used: {use})")
        self.name = name
        self.use = use


class _Unmapped(type):
    """Metaclass of the placeholders: every use but naming it raises.

    A placeholder is a class so that LangGraph's test helpers may subclass it at import
    time (``class NoopSerializer(SerializerProtocol)``) and annotations may name it;
    creating an instance, subscripting it or testing against it is a use.
    """

    _lg_name: str

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise NoOncegraphEquivalentError(cls._lg_name, _use(cls, "call"))

    def __getattr__(cls, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            # Python's own probes (copy, typing, pytest, mock) must see a plain class.
            raise AttributeError(attr)
        raise NoOncegraphEquivalentError(cls._lg_name, _use(cls, f"attribute {attr}"))

    def __getitem__(cls, item: Any) -> Any:
        raise NoOncegraphEquivalentError(cls._lg_name, _use(cls, "subscript"))

    def __instancecheck__(cls, obj: Any) -> bool:
        raise NoOncegraphEquivalentError(cls._lg_name, _use(cls, "isinstance"))

    def __subclasscheck__(cls, sub: Any) -> bool:
        raise NoOncegraphEquivalentError(cls._lg_name, _use(cls, "issubclass"))

    def __iter__(cls) -> Any:
        raise NoOncegraphEquivalentError(cls._lg_name, _use(cls, "iteration"))


def _use(cls: _Unmapped, use: str) -> str:
    origin = cls.__dict__.get("_lg_name")
    return use if origin is not None else f"{use} of subclass {cls.__name__}"


def placeholder(lg_name: str) -> Any:
    """A class standing for ``lg_name`` (``langgraph.x.Name``) that raises when used."""
    short = lg_name.rpartition(".")[2]
    return _Unmapped(short, (), {"_lg_name": lg_name, "__module__": lg_name.rpartition(".")[0]})


def is_placeholder(obj: Any) -> bool:
    """Whether ``obj`` is a placeholder (or a class derived from one)."""
    return isinstance(obj, _Unmapped)


def _exported(module_name: str, name: str) -> tuple[bool, Any]:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False, None
    public = getattr(module, "__all__", None)
    if public is None or name not in public:
        return False, None
    try:
        return True, getattr(module, name)
    except (AttributeError, ImportError):
        return False, None


def resolve(lg_module: str, name: str) -> Any:
    """The oncegraph object for ``lg_module.name``, or a placeholder (rules: module doc)."""
    full = f"{lg_module}.{name}"
    if full in SUBMODULES or full in sys.modules:
        return importlib.import_module(full)
    if name.startswith("_"):
        return placeholder(full)
    parts = lg_module.split(".")[1:]
    found, obj = _exported(".".join(["oncegraph", *parts]), name)
    if found:
        return obj
    target = RENAMES.get((lg_module, name))
    if target is not None:
        module_name, _, attr = target.partition(":")
        return getattr(importlib.import_module(module_name), attr)
    for depth in range(len(parts) - 1, 0, -1):
        found, obj = _exported(".".join(["oncegraph", *parts[:depth]]), name)
        if found:
            return obj
    return placeholder(full)


class _AliasModule(types.ModuleType):
    """``langgraph.x``: each attribute resolves once through :func:`resolve`."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = resolve(self.__name__, name)
        setattr(self, name, value)
        return value


class _AliasLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _AliasModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # every alias is a package: any submodule can be imported


class LangGraphFinder(importlib.abc.MetaPathFinder):
    """Answers ``langgraph`` and ``langgraph.*`` with alias modules."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "langgraph" and not fullname.startswith("langgraph."):
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(), is_package=True)


def install() -> None:
    """Put the finder first; drop any real ``langgraph`` already imported."""
    if any(isinstance(f, LangGraphFinder) for f in sys.meta_path):
        return
    for name in [n for n in sys.modules if n == "langgraph" or n.startswith("langgraph.")]:
        del sys.modules[name]
    sys.meta_path.insert(0, LangGraphFinder())


def pytest_configure(config: Any) -> None:
    install()
