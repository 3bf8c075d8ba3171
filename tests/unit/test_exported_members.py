"""The public surface is curated: ``__all__`` lists exactly what is exported, every name
in it imports, and optional backends are imported lazily (httpx's
``tests/test_exported_members.py`` idea)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import oncegraph
import oncegraph.storage.checkpointer as checkpointer_module

EXPECTED = {
    "END",
    "START",
    "Accepted",
    "Command",
    "CompiledGraph",
    "Completed",
    "EffectRetry",
    "FaultPlan",
    "IncompatibleVersionError",
    "Interrupt",
    "MessagesState",
    "NeedsReviewError",
    "OnceGraphError",
    "Reconciled",
    "RequestMismatchError",
    "Send",
    "StaleStateError",
    "StateGraph",
    "StateSnapshot",
    "Tool",
    "ToolNode",
    "UnfinishedRunError",
    "__version__",
    "add_messages",
    "aeffect",
    "append",
    "crash_point",
    "declare_crash_point",
    "current_effect",
    "effect",
    "get_stream_writer",
    "interrupt",
    "now",
    "random",
    "tool",
    "uuid4",
}


def test_all_is_exactly_the_public_names() -> None:
    exported = {
        name
        for name, value in vars(oncegraph).items()
        if not name.startswith("_") and not getattr(value, "__name__", "").startswith("oncegraph.")
    }
    assert set(oncegraph.__all__) == exported | {"__version__"}
    assert len(oncegraph.__all__) == len(set(oncegraph.__all__))


def test_design_api_names_are_public() -> None:
    # the public API: removing one breaks users.
    assert set(oncegraph.__all__) >= EXPECTED


def test_every_name_in_all_imports() -> None:
    for name in oncegraph.__all__:
        assert getattr(oncegraph, name) is not None, name
    namespace: dict[str, object] = {}
    exec("from oncegraph import *", namespace)
    assert set(oncegraph.__all__) <= set(namespace)


def test_public_errors_share_one_root() -> None:
    for name in oncegraph.__all__:
        value = getattr(oncegraph, name)
        if isinstance(value, type) and name.endswith("Error"):
            assert issubclass(value, oncegraph.OnceGraphError), name


def test_checkpointer_module_exports() -> None:
    assert set(checkpointer_module.__all__) >= {
        "InMemoryCheckpointer",
        "SqliteCheckpointer",
        "PgCheckpointer",
    }
    for name in checkpointer_module.__all__:
        assert isinstance(getattr(checkpointer_module, name), type), name


def test_pg_checkpointer_is_lazy() -> None:
    code = textwrap.dedent(
        """
        import sys
        import oncegraph
        from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer
        assert "psycopg" not in sys.modules, "importing oncegraph must not import psycopg"
        assert "oncegraph.storage.sql.postgres" not in sys.modules
        from oncegraph.storage.checkpointer import PgCheckpointer
        assert PgCheckpointer.__module__ == "oncegraph.storage.sql.postgres"
        assert "psycopg" in sys.modules
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_pg_checkpointer_without_psycopg_gives_the_install_hint() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["psycopg"] = None  # import psycopg -> ImportError
        import oncegraph.storage.checkpointer as m
        try:
            m.PgCheckpointer
        except ImportError as exc:
            assert 'pip install "oncegraph[postgres]"' in str(exc), exc
        else:
            raise SystemExit("PgCheckpointer imported without psycopg")
        try:
            m.NoSuchThing
        except AttributeError:
            pass
        else:
            raise SystemExit("unknown attribute did not raise")
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_tool_integrations_are_lazy() -> None:
    code = textwrap.dedent(
        """
        import sys
        import oncegraph
        from oncegraph import ToolNode, tool
        import oncegraph.tools.mcp
        assert "pydantic" not in sys.modules, "importing oncegraph must not import pydantic"

        def lookup(order_id: str) -> str:
            '''Look an order up.'''
            return order_id

        ToolNode([tool(lookup)])
        assert "pydantic" in sys.modules  # made the tool's schema
        import oncegraph.tools.langchain
        for optional in ("mcp", "langchain_core"):
            assert optional not in sys.modules, optional
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_mcp_tools_without_the_sdk_give_the_install_hint() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["mcp"] = None  # import mcp -> ImportError
        from oncegraph.tools.mcp import MCPTools
        try:
            MCPTools("http://127.0.0.1:9/mcp")
        except ImportError as exc:
            assert 'pip install "oncegraph[mcp]"' in str(exc), exc
        else:
            raise SystemExit("MCPTools worked without the mcp SDK")
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_langgraph_modules_have_their_names() -> None:
    """``langgraph.types`` / ``langgraph.config`` code changes only its imports."""
    import oncegraph.config
    import oncegraph.types

    assert set(oncegraph.types.__all__) == {
        "CachePolicy",
        "Command",
        "Interrupt",
        "Overwrite",
        "PregelTask",
        "RetryPolicy",
        "Send",
        "StateSnapshot",
        "StateUpdate",
        "StreamWriter",
        "TimeoutPolicy",
        "interrupt",
    }
    assert set(oncegraph.config.__all__) == {"StreamWriter", "get_config", "get_stream_writer"}
    for module in (oncegraph.types, oncegraph.config):
        for name in module.__all__:
            assert getattr(module, name) is not None, name
    assert oncegraph.types.Send is oncegraph.Send and oncegraph.types.Command is oncegraph.Command


def test_the_old_name_of_effect_retry_still_imports_with_a_warning() -> None:
    import pytest

    import oncegraph.tools
    import oncegraph.types

    for module in (oncegraph, oncegraph.tools):
        with pytest.warns(DeprecationWarning, match=r"now named .*EffectRetry"):
            old = module.RetryPolicy
        assert old is oncegraph.EffectRetry
    with pytest.warns(DeprecationWarning):
        from oncegraph import RetryPolicy
    assert RetryPolicy is oncegraph.EffectRetry
    assert "initial_interval" in oncegraph.types.RetryPolicy._fields  # a node's policy
