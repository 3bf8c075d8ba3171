"""The compatibility verdict: compare a stored run with the graph at hand. Pure.

A run records, when it starts, the ``workflow_name``, ``workflow_version``,
``state_schema_version`` and graph fingerprint of the code that started it. Before any
continue, :func:`check` compares them with the current graph's :class:`GraphIdentity`.
A mismatch is never resolved by guessing: the caller raises
:class:`~oncegraph.errors.IncompatibleVersionError` with the options the verdict lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncegraph.errors import IncompatibleVersionError
from oncegraph.storage.records import RunRecord


@dataclass(frozen=True, slots=True)
class GraphIdentity:
    """What a run remembers of the graph that started it."""

    name: str
    version: str
    state_schema_version: int
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """``mismatches`` empty: the run may continue on this graph."""

    run_id: str
    mismatches: tuple[str, ...] = ()

    @property
    def compatible(self) -> bool:
        return not self.mismatches

    def error(self) -> IncompatibleVersionError:
        return IncompatibleVersionError(
            f"run {self.run_id} was started by another version of this graph: "
            + "; ".join(self.mismatches)
            + ". It is not resumed on a guess. Options: register a state migration, run it "
            "on the old graph version, or review it manually (app.abandon(config))."
        )

    def raise_if_incompatible(self) -> None:
        if self.mismatches:
            raise self.error()


def check(run: RunRecord, graph: GraphIdentity) -> Verdict:
    """May ``run`` continue on ``graph``? Compares every recorded identity field."""
    mismatches = []
    if run.workflow_name != graph.name:
        mismatches.append(f"workflow_name {run.workflow_name!r} != {graph.name!r}")
    if run.workflow_version != graph.version:
        mismatches.append(f"workflow_version {run.workflow_version!r} != {graph.version!r}")
    if run.state_schema_version != graph.state_schema_version:
        mismatches.append(
            f"state_schema_version {run.state_schema_version} != {graph.state_schema_version}"
        )
    if run.graph_fingerprint and run.graph_fingerprint != graph.fingerprint:
        mismatches.append("graph fingerprint differs (nodes, edges or routes changed)")
    return Verdict(run.run_id, tuple(mismatches))


__all__ = ["GraphIdentity", "Verdict", "check"]
