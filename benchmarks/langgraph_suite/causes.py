"""Name the cause of a failing test from its first failure, by the rules in causes.toml.

A rule is a table of regular expressions, all of which must match (``re.search``,
case-sensitive unless the pattern says ``(?i)``):

* ``message``: pytest's one-line crash message (``ExcType: text``) of the first failure;
* ``errors``: every ``E   `` line of the failure (chained exceptions included);
* ``text``: the whole failure text;
* ``source``: the test function's source;
* ``nodeid``: the test's node id;
* ``phase``: ``setup`` (a fixture failed), ``call``, ``teardown`` or ``collect``.

Rules are tried in file order; the first that matches names the cause. A failure no rule
matches is ``other``. Each test gets exactly one cause.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

OTHER = "other"
FIELDS = ("message", "errors", "text", "source", "nodeid", "phase")
RULES_FILE = Path(__file__).with_name("causes.toml")


@dataclass(frozen=True, slots=True)
class Failure:
    """What is known of one test's first failure."""

    nodeid: str
    phase: str
    message: str
    text: str
    source: str = ""

    @property
    def errors(self) -> str:
        lines = [line[4:] for line in self.text.splitlines() if line.startswith("E   ")]
        return "\n".join(lines) or self.message


@dataclass(frozen=True, slots=True)
class Rule:
    cause: str
    patterns: tuple[tuple[str, re.Pattern[str]], ...]

    def matches(self, failure: Failure) -> bool:
        return all(pattern.search(getattr(failure, field)) for field, pattern in self.patterns)


def load_rules(path: Path = RULES_FILE) -> list[Rule]:
    """The rules of ``path``; a rule with no pattern or an unknown field is an error."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    rules = []
    for i, entry in enumerate(data.get("cause", [])):
        cause = entry.get("name")
        if not cause:
            raise ValueError(f"{path}: rule {i + 1} has no name")
        unknown = set(entry) - {"name", *FIELDS}
        if unknown:
            raise ValueError(f"{path}: rule {cause!r} has unknown fields {sorted(unknown)}")
        patterns = tuple((f, re.compile(entry[f])) for f in FIELDS if f in entry)
        if not patterns:
            raise ValueError(f"{path}: rule {cause!r} matches nothing (give a pattern)")
        rules.append(Rule(cause, patterns))
    return rules


def classify(failure: Failure, rules: Iterable[Rule]) -> str:
    """The cause of ``failure``: the first rule that matches, else ``other``."""
    for rule in rules:
        if rule.matches(failure):
            return rule.cause
    return OTHER


def first_line(failure: Failure, width: int = 160) -> str:
    """The failure's first error line, for examples and for grouping ``other``."""
    line = failure.message.splitlines()[0] if failure.message else ""
    if not line:
        errors = failure.errors.splitlines()
        line = errors[0] if errors else ""
    return line[:width]
