"""The compatibility verdict: may a stored run go on under the graph at hand? Pure.

A run records, when it starts, the ``workflow_name``, ``workflow_version``,
``state_schema_version``, graph fingerprint and graph shape of the code that started it
(a migration later records the identity its state was brought to). Before any continue,
:func:`check` compares them with the current graph and decides (guarantee 10, never a guess):

* ``same``: nothing changed; go on.
* ``compatible``: the graph changed only by additions the run does not stand on (a new
  node or edge away from the nodes it is about to run, a new optional state field) and
  the state schema version is the same; go on.
* ``migrate``: a state migration is registered for the run's version: apply it, record
  it, go on under the new graph.
* ``previous``: the run's version is registered as a previous version: run it to its end
  on that graph.
* ``incompatible``: none of the above; the verdict's error lists exactly these options.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from oncegraph.errors import IncompatibleVersionError
from oncegraph.versioning.shape import changes

Kind = Literal["same", "compatible", "migrate", "previous", "incompatible"]


@dataclass(frozen=True, slots=True)
class GraphIdentity:
    """What a run remembers of the graph that started it."""

    name: str
    version: str
    state_schema_version: int
    fingerprint: str

    def to_json(self) -> dict[str, Any]:
        """The four fields by name (what :meth:`from_json` reads)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GraphIdentity:
        return cls(
            str(data["name"]),
            str(data["version"]),
            int(data["state_schema_version"]),
            str(data["fingerprint"]),
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    run_id: str
    kind: Kind = "same"
    mismatches: tuple[str, ...] = ()
    migration: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    from_version: str | None = None

    @property
    def compatible(self) -> bool:
        return self.kind in ("same", "compatible")

    def error(self) -> IncompatibleVersionError:
        return IncompatibleVersionError(
            f"run {self.run_id} was started by another version of this graph"
            + (f" ({self.from_version})" if self.from_version else "")
            + ": "
            + "; ".join(self.mismatches)
            + ". It is not continued on a guess. Options: register a state migration "
            f"(compile(..., migrations={{{self.from_version!r}: migrate}})), run it on the old "
            f"graph version (compile(..., previous_versions={{{self.from_version!r}: "
            "old_app}})), or review it manually and abandon it (app.abandon(config))."
        )

    def raise_if_incompatible(self) -> None:
        if self.kind == "incompatible":
            raise self.error()


def check(
    run_id: str,
    stored: GraphIdentity,
    graph: GraphIdentity,
    *,
    stored_shape: Mapping[str, Any] | None = None,
    shape: Mapping[str, Any] | None = None,
    stands_on: Sequence[str] = (),
    migrations: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
    previous_versions: Sequence[str] = (),
) -> Verdict:
    """May a run of ``stored`` go on under ``graph`` (see the module docstring)?"""
    if stored == graph:
        return Verdict(run_id)
    version = stored.version
    if stored.name != graph.name:
        mismatch = f"workflow_name {stored.name!r} != {graph.name!r}"
        return Verdict(run_id, "incompatible", (mismatch,), from_version=version)
    if migrations and version in migrations and version != graph.version:
        return Verdict(run_id, "migrate", migration=migrations[version], from_version=version)
    if version in previous_versions and version != graph.version:
        return Verdict(run_id, "previous", from_version=version)
    mismatches: list[str] = []
    if stored.state_schema_version != graph.state_schema_version:
        mismatches.append(
            f"state_schema_version {stored.state_schema_version} != {graph.state_schema_version}"
        )
    if stored_shape is not None and shape is not None:
        mismatches.extend(changes(stored_shape, shape, stands_on))
    elif stored.fingerprint and stored.fingerprint != graph.fingerprint:
        mismatches.append("graph fingerprint differs (nodes, edges or routes changed)")
    if mismatches:
        return Verdict(run_id, "incompatible", tuple(mismatches), from_version=version)
    return Verdict(run_id, "compatible", from_version=version)


__all__ = ["GraphIdentity", "Kind", "Verdict", "check"]
