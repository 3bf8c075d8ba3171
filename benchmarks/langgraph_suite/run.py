"""Run LangGraph's own test suite on oncegraph and count what passes, per file and per cause.

    pip install -r benchmarks/langgraph_suite/requirements.txt
    python benchmarks/langgraph_suite/run.py --langgraph /path/to/langgraph   # a checkout
    python benchmarks/langgraph_suite/run.py --git-dir /path/to/langgraph.git --tag 1.2.11

The tests (``libs/langgraph/tests`` of the checkout, or that directory itself) are copied
to a temporary directory at run time and removed afterwards: nothing of LangGraph's is
kept or committed. In the copy, LangGraph's ``conftest.py`` is replaced by
``lg_conftest.py`` (the same fixtures on oncegraph's stores), imports of ``langgraph.*``
are redirected by ``lg_shim`` (a ``sys.meta_path`` finder), and ``lg_report`` records
every report. pytest runs the files of ``selection.FILES`` minus the tests of LangGraph's
internals in ``selection.DESELECTED`` with pytest-xdist and a per-test timeout. The run
measures the oncegraph of this checkout (its ``src`` is put first on the path).

Outputs (``--out``, default ``benchmarks/langgraph_suite/out``): ``<stem>.json`` (totals,
per file, per cause, every test's outcome and cause), ``<stem>.md`` (the tables) and
``<stem>.raw.jsonl`` (pytest's reports; ``--reclassify`` re-reads it after an edit of
``causes.toml`` without running anything again).
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from causes import OTHER, Failure, classify, first_line, load_rules  # noqa: E402
from selection import DEFAULT_TAG, DESELECTED, FILES, deselected_for  # noqa: E402

NEEDED = {  # import name -> what to install (requirements.txt)
    "syrupy": "syrupy",
    "pytest_mock": "pytest-mock",
    "anyio": "anyio",
    "langchain_core": "langchain-core",
    "xdist": "pytest-xdist",
    "pytest_timeout": "pytest-timeout",
    "psycopg": "psycopg[binary]",
}
OUTCOMES = ("passed", "failed", "errored", "skipped", "not run")


# -- getting the tests -------------------------------------------------------------------


def tests_dir_of(path: Path) -> Path:
    """LangGraph's tests directory inside ``path`` (a checkout, libs/langgraph, or tests)."""
    for candidate in (path / "libs" / "langgraph" / "tests", path / "tests", path):
        if (candidate / "test_pregel.py").is_file():
            return candidate
    raise SystemExit(
        f"no LangGraph tests under {path}: point --langgraph at a checkout of LangGraph's "
        "repository (or at its libs/langgraph/tests directory)"
    )


def tag_of(tests: Path) -> str | None:
    """LangGraph's version from the checkout's pyproject, when the checkout has one."""
    pyproject = tests.parent / "pyproject.toml"
    if pyproject.is_file():
        found = re.search(r'^version = "([^"]+)"', pyproject.read_text(), re.MULTILINE)
        if found:
            return found.group(1)
    return None


def extract_from_git(git_dir: Path, tag: str, into: Path) -> Path:
    """``git archive`` LangGraph's tests at ``tag`` into ``into``; the tests directory."""
    proc = subprocess.Popen(
        ["git", "--git-dir", str(git_dir), "archive", tag, "libs/langgraph/tests"],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
        archive.extractall(into, filter="data")
    if proc.wait() != 0:
        raise SystemExit(f"git archive {tag} failed in {git_dir}")
    return into / "libs" / "langgraph" / "tests"


def prepare(tests: Path, work: Path) -> Path:
    """Copy ``tests`` to ``work/tests`` with our conftest and pytest config; the root."""
    shutil.copytree(tests, work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(HERE / "lg_conftest.py", work / "tests" / "conftest.py")
    (work / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    return work


def test_sources(tests: Path, files: list[str]) -> dict[str, str]:
    """``file::function`` -> the function's source, for rules on what a test builds."""
    sources: dict[str, str] = {}
    for name in files:
        text = (tests / name).read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_function and node.name.startswith("test_"):
                # line slices, not ast.get_source_segment (which re-splits the file per call)
                segment = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                sources.setdefault(f"{name}::{node.name}", segment)
    return sources


# -- running -----------------------------------------------------------------------------


def check_environment(backends: list[str]) -> None:
    missing = [pip for mod, pip in NEEDED.items() if importlib.util.find_spec(mod) is None]
    if missing:
        raise SystemExit(
            "LangGraph's tests need: " + ", ".join(missing) + "\n  pip install -r "
            f"{(HERE / 'requirements.txt').relative_to(REPO)} (or --deps DIR, see README)"
        )
    if "postgres" in backends:
        from oncegraph.testing.postgres import admin_dsn, unreachable

        problem = unreachable(admin_dsn())
        if problem is not None:
            raise SystemExit(
                f"PostgreSQL unreachable ({problem}): set ONCEGRAPH_TEST_PG_DSN to a server "
                "where databases can be created, or leave it out with --backends memory,sqlite"
            )


def oncegraph_commit() -> str:
    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return out.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--", "src") else "")


def run_pytest(root: Path, files: list[str], args: argparse.Namespace, raw: Path) -> int:
    deselect = root / "deselect.json"
    deselect.write_text(json.dumps(deselected_for(args.tag)))
    env = dict(os.environ)
    path = [str(REPO / "src"), str(HERE), *(str(Path(d).resolve()) for d in args.deps)]
    env["PYTHONPATH"] = os.pathsep.join([*path, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["LG_SUITE_BACKENDS"] = ",".join(args.backends)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *("-p", "lg_shim", "-p", "lg_report"),
        *("-p", "no:cacheprovider", "-p", "no:asyncio", "-p", "no:benchmark"),
        f"--lg-deselect={deselect}",
        f"--lg-results={raw}",
        f"--timeout={args.timeout}",
        "--snapshot-warn-unused",
        "-q",
        "-rN",
        "--tb=short",
        "--no-header",
        "-p",
        "no:warnings",
    ]
    if args.workers > 0:
        cmd += ["-n", str(args.workers)]
    cmd += [*args.pytest_args, *(f"tests/{f}" for f in files)]
    log = raw.with_name(raw.name.removesuffix(".raw.jsonl") + ".log")
    print("$", " ".join(cmd), flush=True)
    print(f"pytest's output goes to {log}", flush=True)
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    return done.returncode


# -- reading the results -----------------------------------------------------------------


def read_raw(raw: Path) -> tuple[set[str], dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    collected: set[str] = set()
    reports: dict[str, list[dict[str, Any]]] = defaultdict(list)
    collect_errors = []
    for line in raw.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["kind"] == "collected":
            collected.update(record["ids"])
        elif record["kind"] == "collect":
            collect_errors.append(record)
        else:
            reports[record["nodeid"]].append(record)
    return collected, reports, collect_errors


def outcome_of(reports: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None]:
    """The test's outcome and the report of its first failure (setup, call, teardown)."""
    by_phase = {r["when"]: r for r in reports}
    for phase in ("setup", "call", "teardown"):
        r = by_phase.get(phase)
        if r is None:
            continue
        if r["outcome"] == "failed":
            return ("failed" if phase == "call" else "errored"), r
        if r["outcome"] == "skipped":
            return "skipped", r  # a skip, or an expected failure (xfail)
    if "call" in by_phase:
        return "passed", None
    return "not run", None


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rpartition("/")[2]


STORES = ("memory", "sqlite", "postgres")


def store_of(nodeid: str) -> str:
    """The checkpointer a test ran on (its parameter id), or ``none``."""
    params = nodeid.rpartition("[")[2].rstrip("]").split("-") if nodeid.endswith("]") else []
    return next((p for p in params if p in STORES), "none")


def summarize(
    raw: Path, sources: dict[str, str], meta: dict[str, Any], deselected: list[str]
) -> dict[str, Any]:
    rules = load_rules()
    collected, reports, collect_errors = read_raw(raw)
    ids = collected | set(reports)
    tests: dict[str, dict[str, Any]] = {}
    for nodeid in sorted(ids):
        outcome, first = outcome_of(reports.get(nodeid, []))
        entry: dict[str, Any] = {"outcome": outcome}
        if outcome in ("failed", "errored") and first is not None:
            function = nodeid.split("::", 1)[1].split("[", 1)[0] if "::" in nodeid else ""
            failure = Failure(
                nodeid=nodeid,
                phase=first["when"],
                message=first.get("message", ""),
                text=first.get("text", ""),
                source=sources.get(f"{file_of(nodeid)}::{function}", ""),
            )
            entry["cause"] = classify(failure, rules)
            entry["first_line"] = first_line(failure)
        elif outcome == "skipped" and first is not None:
            entry["reason"] = first.get("message", "")
        tests[nodeid] = entry
    files: dict[str, Counter[str]] = {f: Counter() for f in meta["files"]}
    for nodeid, entry in tests.items():
        files.setdefault(file_of(nodeid), Counter())[entry["outcome"]] += 1
    for nodeid in deselected:
        files.setdefault(file_of(nodeid), Counter())["deselected"] += 1
    causes: dict[str, dict[str, Any]] = {}
    for nodeid, entry in tests.items():
        if "cause" in entry:
            c = causes.setdefault(entry["cause"], {"tests": 0, "example": nodeid})
            c["tests"] += 1
            if c["tests"] == 1:
                c["example_line"] = entry["first_line"]
    totals = Counter(entry["outcome"] for entry in tests.values())
    stores: dict[str, Counter[str]] = {}
    for nodeid, entry in tests.items():
        stores.setdefault(store_of(nodeid), Counter())[entry["outcome"]] += 1
    others = Counter(e["first_line"] for e in tests.values() if e.get("cause") == OTHER)
    return {
        **meta,
        "selected": len(tests),
        "deselected": len(deselected),
        "totals": {o: totals.get(o, 0) for o in OUTCOMES},
        "files": {
            f: {"selected": sum(c[o] for o in OUTCOMES), **{o: c.get(o, 0) for o in OUTCOMES}}
            | {"deselected": c.get("deselected", 0)}
            for f, c in files.items()
        },
        "stores": {
            name: {"selected": sum(c.values()), **{o: c.get(o, 0) for o in OUTCOMES}}
            for name, c in sorted(stores.items(), key=lambda kv: (kv[0] == "none", kv[0]))
        },
        "causes": dict(sorted(causes.items(), key=lambda kv: (-kv[1]["tests"], kv[0]))),
        "other_first_lines": dict(others.most_common(40)),
        "collect_errors": [
            {"nodeid": e["nodeid"], "text": e["text"][-600:]} for e in collect_errors
        ],
        "tests": tests,
    }


def markdown(result: dict[str, Any]) -> str:
    t = result["totals"]
    pct = 100.0 * t["passed"] / result["selected"] if result["selected"] else 0.0
    lines = [
        f"LangGraph {result['langgraph_tag']} tests on oncegraph `{result['oncegraph_commit']}`, "
        f"{result['date']}: **{t['passed']} of {result['selected']} pass ({pct:.1f}%)**; "
        f"stores {', '.join(result['backends'])}; {result['deselected']} tests of LangGraph "
        f"internals left out; {result['workers']} workers, {result['timeout']} s per test.",
        "",
        "| file | selected | passed | failed | errored | skipped | not run | deselected |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c in result["files"].items():
        row = [c["selected"], *(c[o] for o in OUTCOMES), c["deselected"]]
        lines.append(f"| {name} | " + " | ".join(str(v) for v in row) + " |")
    total = [result["selected"], *(t[o] for o in OUTCOMES), result["deselected"]]
    lines.append("| **total** | " + " | ".join(f"**{v}**" for v in total) + " |")
    lines += ["", "| checkpointer | selected | passed | failed | errored | skipped | not run |"]
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for name, c in result["stores"].items():
        row = [c["selected"], *(c[o] for o in OUTCOMES)]
        lines.append(f"| {name} | " + " | ".join(str(v) for v in row) + " |")
    lines += ["", "| cause | tests | example |", "|---|---:|---|"]
    for cause, c in result["causes"].items():
        lines.append(f"| {cause} | {c['tests']} | `{c['example']}` |")
    return "\n".join(lines) + "\n"


def print_tables(result: dict[str, Any]) -> None:
    print()
    print(markdown(result))
    if result["other_first_lines"]:
        print("most frequent first lines under 'other' (candidates for causes.toml):")
        for line, n in list(result["other_first_lines"].items())[:15]:
            print(f"  {n:4d}  {line}")
    for error in result["collect_errors"]:
        print(f"collection error in {error['nodeid']}:\n{error['text']}")


# -- main --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--langgraph", type=Path, help="a LangGraph checkout or its tests dir")
    src.add_argument("--git-dir", type=Path, help="a LangGraph git dir (bare is fine)")
    src.add_argument("--reclassify", type=Path, help="a .raw.jsonl of an earlier run")
    p.add_argument("--tag", default=None, help=f"LangGraph tag (default {DEFAULT_TAG})")
    p.add_argument("--backends", default="memory,sqlite,postgres", help="stores to run on")
    p.add_argument("--files", default=None, help="comma-separated subset of the 19 files")
    p.add_argument("-n", "--workers", type=int, default=2, help="pytest-xdist workers (0: none)")
    p.add_argument("--timeout", type=int, default=30, help="seconds per test")
    p.add_argument("--deps", action="append", default=[], help="extra dir on PYTHONPATH")
    p.add_argument("--out", type=Path, default=HERE / "out", help="where results go")
    p.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    args = p.parse_args(argv)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rules = load_rules()  # a broken rules file fails before a long run, not after
    print(f"{len(rules)} cause rules")
    if args.reclassify is not None:
        return reclassify(args.reclassify)
    files = list(FILES) if args.files is None else args.files.split(",")
    unknown = sorted(set(files) - set(FILES))
    if unknown:
        raise SystemExit(f"not among the measured files: {unknown}; see selection.FILES")
    for d in args.deps:
        sys.path.insert(0, str(Path(d).resolve()))
    check_environment(args.backends)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="langgraph-suite-") as tmp:
        work = Path(tmp)
        if args.git_dir is not None:
            args.tag = args.tag or DEFAULT_TAG
            tests = extract_from_git(args.git_dir, args.tag, work / "checkout")
        else:
            tests = tests_dir_of(args.langgraph.resolve())
            args.tag = args.tag or tag_of(tests) or DEFAULT_TAG
        if args.tag not in DESELECTED:
            print(f"warning: no deselect list for LangGraph {args.tag}; using {DEFAULT_TAG}'s")
        root = prepare(tests, work / "run")
        date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        stem = f"langgraph-{args.tag}-{date}"
        raw = args.out / f"{stem}.raw.jsonl"
        raw.unlink(missing_ok=True)
        started = dt.datetime.now(dt.UTC)
        code = run_pytest(root, files, args, raw)
        seconds = (dt.datetime.now(dt.UTC) - started).total_seconds()
        sources = test_sources(root / "tests", files)
        deselected = sorted(
            {i for p in root.glob("deselect.json.*.json") for i in json.loads(p.read_text())}
        )
    meta = {
        "date": date,
        "oncegraph_commit": oncegraph_commit(),
        "langgraph_tag": args.tag,
        "backends": args.backends,
        "workers": args.workers,
        "timeout": args.timeout,
        "seconds": round(seconds),
        "pytest_exit": code,
        "files": files,
        "command": "python benchmarks/langgraph_suite/run.py " + " ".join(argv or sys.argv[1:]),
    }
    (args.out / f"{stem}.meta.json").write_text(
        json.dumps({**meta, "deselected_ids": deselected, "sources": sources})
    )
    return write_result(raw, meta, sources, deselected)


def write_result(
    raw: Path, meta: dict[str, Any], sources: dict[str, str], deselected: list[str]
) -> int:
    result = summarize(raw, sources, meta, deselected)
    stem = raw.name.removesuffix(".raw.jsonl")
    (raw.parent / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (raw.parent / f"{stem}.md").write_text(markdown(result))
    print_tables(result)
    print(f"\nwrote {raw.parent / stem}.json and .md")
    return 0 if not result["collect_errors"] else 1


def reclassify(raw: Path) -> int:
    meta_file = raw.parent / (raw.name.removesuffix(".raw.jsonl") + ".meta.json")
    meta = json.loads(meta_file.read_text())
    sources = meta.pop("sources")
    deselected = meta.pop("deselected_ids")
    return write_result(raw, meta, sources, deselected)


if __name__ == "__main__":
    sys.exit(main())
