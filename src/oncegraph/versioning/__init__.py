"""Versioning: is a stored run compatible with the code about to continue it (guarantee 10)?

:func:`~oncegraph.versioning.verdict.check` is pure: it compares what a run recorded
when it started (workflow name and version, state schema version, graph fingerprint)
with the graph at hand and returns a :class:`~oncegraph.versioning.verdict.Verdict`;
the run service refuses to continue on a mismatch instead of guessing.
"""

from oncegraph.versioning.shape import changes, shape_of
from oncegraph.versioning.verdict import GraphIdentity, Verdict, check

__all__ = ["GraphIdentity", "Verdict", "changes", "check", "shape_of"]
