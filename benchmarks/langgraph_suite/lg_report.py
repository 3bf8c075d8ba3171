"""Pytest plugin of the runner (``-p lg_report``): deselects, and records every report.

* ``--lg-deselect FILE``: a JSON object ``{"test_file.py": ["test_function", ...]}``;
  every parametrization of a listed function is deselected (counted by pytest as such),
  and the deselected node ids are written next to the results (``FILE.<worker>.json``).
* ``--lg-results FILE``: one JSON line per test report (setup, call, teardown), per
  failed collection, and one ``collected`` line with the node ids that will run. Only the
  process that sees every report writes it (the xdist controller, or pytest alone).

Failures are kept as text (pytest's long representation, cut to its head and tail) so
the runner can classify them after the temporary copy of the tests is gone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

HEAD, TAIL = 3_000, 6_000


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lg_report", "LangGraph suite runner")
    group.addoption("--lg-deselect", default=None, help="JSON file of deselected tests")
    group.addoption("--lg-results", default=None, help="JSON lines file to write reports to")


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _worker_id(config: pytest.Config) -> str:
    return str(getattr(config, "workerinput", {}).get("workerid", "main"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = config.getoption("--lg-deselect")
    if not path:
        return
    wanted: dict[str, list[str]] = json.loads(Path(path).read_text())
    keep, drop = [], []
    for item in items:
        name = getattr(item, "originalname", item.name)
        if name in wanted.get(item.path.name, ()):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    out = Path(f"{path}.{_worker_id(config)}.json")
    out.write_text(json.dumps(sorted(i.nodeid for i in drop)))


class _Writer:
    def __init__(self, path: Path) -> None:
        self.file = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record, default=str) + "\n")
        self.file.flush()


_writer: _Writer | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _writer
    path = config.getoption("--lg-results")
    if path and not _is_worker(config):
        _writer = _Writer(Path(path))


def _text(report: Any) -> str:
    text = str(getattr(report, "longreprtext", "") or "")
    if len(text) > HEAD + TAIL:
        text = text[:HEAD] + "\n[... cut ...]\n" + text[-TAIL:]
    return text


def _crash(report: Any) -> tuple[str, str]:
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    if crash is None:
        longrepr = getattr(report, "longrepr", None)
        if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, why)
            return str(longrepr[2]), f"{longrepr[0]}:{longrepr[1]}"
        return "", ""
    return str(crash.message), f"{crash.path}:{crash.lineno}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _writer is None:
        return
    message, where = _crash(report) if report.outcome != "passed" else ("", "")
    _writer.write(
        {
            "kind": "test",
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "wasxfail": hasattr(report, "wasxfail"),
            "duration": round(report.duration, 3),
            "message": message,
            "where": where,
            "text": _text(report) if report.outcome == "failed" else "",
        }
    )


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if _writer is None or report.outcome != "failed":
        return
    _writer.write({"kind": "collect", "nodeid": report.nodeid, "text": _text(report)})


def pytest_collection_finish(session: pytest.Session) -> None:
    if _writer is not None and session.items:
        _writer.write({"kind": "collected", "ids": [i.nodeid for i in session.items]})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    if _writer is not None:
        _writer.write({"kind": "collected", "ids": list(ids)})
