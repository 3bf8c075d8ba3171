"""LangGraph's ``langgraph.managed`` names: ``RemainingSteps`` and ``IsLastStep``, state
fields the run fills in for each step (:mod:`oncegraph.state.managed`)."""

from oncegraph.state.managed import IsLastStep, RemainingSteps

__all__ = ["IsLastStep", "RemainingSteps"]
