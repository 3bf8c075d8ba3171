"""Managed values: state fields the run fills in for each step, never written by nodes
and never stored (LangGraph's ``langgraph.managed``).

``remaining_steps: RemainingSteps`` in a state schema gives every node of a step the
number of steps the run may still take in this call before it reaches its
``recursion_limit`` (1 in the last step it may take); ``is_last_step: IsLastStep`` is
True in that last step. A node can stop a loop gracefully (answer, instead of calling
one more tool) rather than fail with ``RecursionLimitError``.

A managed field is known by its annotation's mark (``is_managed_value``); the schema
keeps it apart from the channels (:attr:`oncegraph.state.channels.StateSchema.managed`),
so it is not in the run's values, its output or its checkpoints.
"""

from __future__ import annotations

from typing import Annotated


class ManagedValue:
    """The mark of a managed field's annotation; ``value(remaining)`` is the field's
    value in a step that leaves ``remaining`` steps (counting that one)."""

    is_managed_value = True

    @staticmethod
    def value(remaining: int) -> object:  # pragma: no cover - each kind says its own
        raise NotImplementedError


class RemainingStepsManager(ManagedValue):
    """``RemainingSteps``: the steps left, this one included."""

    @staticmethod
    def value(remaining: int) -> object:
        return remaining


class IsLastStepManager(ManagedValue):
    """``IsLastStep``: whether this is the last step the run may take in this call."""

    @staticmethod
    def value(remaining: int) -> object:
        return remaining <= 1


RemainingSteps = Annotated[int, RemainingStepsManager]
IsLastStep = Annotated[bool, IsLastStepManager]

__all__ = [
    "IsLastStep",
    "IsLastStepManager",
    "ManagedValue",
    "RemainingSteps",
    "RemainingStepsManager",
]
