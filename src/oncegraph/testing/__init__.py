"""Test helpers shipped with oncegraph.

:mod:`oncegraph.testing.conformance` holds the pytest-native contract suite every
storage backend runs (``class TestMine(CheckpointerConformance)`` with a
``checkpointer`` fixture).
"""
