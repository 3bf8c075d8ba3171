"""The import graph of ``src/oncegraph``: cycles and imports that point up a layer.

Reads every module with :mod:`ast` (nothing is imported or run) and sorts each import by
where it stands:

- ``top``: at module level, runs when the module is imported;
- ``fn``: inside a function or method, runs when that is called;
- ``tc``: under ``if TYPE_CHECKING:``, never runs (a type hint only).

Cycles are Tarjan's strongly connected components over the imports that run (``top`` and
``fn``); a second count adds the ``tc`` imports, for reference. A cycle is printed with its
files and the edges that close it.

Layers, highest first (a module may import its own layer and any layer below it):

    surfaces  cli, server, worker, testing, __main__
    facade    app, app_*, the package root, loading, func, pregel, and LangGraph's module twins
              (config, types, constants, checkpoint, graph.message, graph.state,
              managed: re-exports), facts
    runs      runs
    prebuilt  prebuilt
    tools     tools
    ledger    ledger
    driver    runtime (all but the pure modules below), versioning
    engine    runtime.engine, runtime.routes, runtime.decisions, runtime.moves,
              runtime.sends, runtime.logkeys, runtime.stepresults (the pure step, its
              routing and verdict, run-level decisions and the pure helpers the step
              imports)
    graph     graph, hitl, state, channels
    storage   storage (records, protocols, the memory store, the SQL store and dialects),
              cache (node-result caches) and store (the key-value store nodes read)
    floor     errors, ids, _json, messages, observe, _* helpers

An import that runs and points from a lower layer to a higher one is "up-pointing"; a
``tc`` import that does so is listed apart and not counted (it never runs). The review's
"SQL" floor (``storage.sql``) is reported apart as well: imports of ``storage.sql`` from
outside ``storage`` that are not the CLI's ``db`` commands or the worker's queue.

Usage::

    python benchmarks/structure/imports.py            # a report for people
    python benchmarks/structure/imports.py --json     # the same, as one JSON object
    python benchmarks/structure/imports.py --src DIR  # another tree (default: ./src)
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import pathlib
import sys
from dataclasses import dataclass, field

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("surfaces", ("cli", "server", "worker", "testing", "__main__")),
    (
        "facade",
        (
            "",
            "app",
            "app_*",
            "loading",
            "func",
            "pregel",
            "checkpoint",
            "config",
            "types",
            "constants",
            "graph.message",
            "graph.state",
            "managed",
            "facts",
        ),
    ),
    ("runs", ("runs",)),
    ("prebuilt", ("prebuilt",)),
    ("tools", ("tools",)),
    ("ledger", ("ledger",)),
    ("driver", ("runtime", "versioning")),
    (
        "engine",
        (
            "runtime.engine",
            "runtime.routes",
            "runtime.decisions",
            "runtime.moves",
            "runtime.sends",
            "runtime.logkeys",
            "runtime.stepresults",
        ),
    ),
    ("graph", ("graph", "hitl", "state", "channels")),
    ("storage", ("storage", "cache", "store")),
    (
        "floor",
        ("errors", "ids", "_json", "messages", "observe", "_*"),
    ),
)
ROOT = "oncegraph"
# Who may reach storage.sql from outside storage (on purpose: the db commands, the queue).
SQL_ALLOWED = ("cli", "worker", "testing", "checkpoint")


@dataclass
class Edge:
    source: str
    target: str
    kinds: set[str] = field(default_factory=set)
    lines: dict[str, list[int]] = field(default_factory=dict)

    def runs(self) -> bool:
        return bool(self.kinds & {"top", "fn"})

    def where(self, kinds: set[str]) -> list[int]:
        return sorted(n for k in kinds for n in self.lines.get(k, []))


def modules(src: pathlib.Path) -> dict[str, pathlib.Path]:
    found: dict[str, pathlib.Path] = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def edges(mods: dict[str, pathlib.Path]) -> dict[tuple[str, str], Edge]:
    def resolve(name: str) -> str:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    out: dict[tuple[str, str], Edge] = {}

    def add(source: str, target: str, kind: str, line: int) -> None:
        if not target or target == source or not target.startswith(ROOT):
            return
        edge = out.setdefault((source, target), Edge(source, target))
        edge.kinds.add(kind)
        edge.lines.setdefault(kind, []).append(line)

    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]

        def visit(
            node: ast.AST, in_fn: bool, in_tc: bool, mod: str = mod, package: str = package
        ) -> None:
            for child in ast.iter_child_nodes(node):
                fn = in_fn or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                tc = in_tc or (
                    isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
                )
                kind = "tc" if tc else "fn" if fn else "top"
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        add(mod, resolve(alias.name), kind, child.lineno)
                elif isinstance(child, ast.ImportFrom):
                    if child.level:
                        base = package.split(".")
                        if child.level > 1:
                            base = base[: len(base) - (child.level - 1)]
                        target_mod = ".".join([*base, child.module or ""]).strip(".")
                    else:
                        target_mod = child.module or ""
                    for alias in child.names:
                        named = f"{target_mod}.{alias.name}"
                        add(
                            mod, named if named in mods else resolve(target_mod), kind, child.lineno
                        )
                # An ``else`` of ``if TYPE_CHECKING`` runs: visit it as such.
                if isinstance(child, ast.If) and tc and not in_tc:
                    for stmt in child.orelse:
                        visit(ast.Module(body=[stmt], type_ignores=[]), fn, False)
                    for stmt in child.body:
                        visit(ast.Module(body=[stmt], type_ignores=[]), fn, True)
                    continue
                visit(child, fn, tc)

        visit(ast.parse(path.read_text(encoding="utf-8")), False, False)
    return out


def sccs(nodes: list[str], adjacent: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), the ones with 2+ members."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            nexts = adjacent.get(node, [])
            if i < len(nexts):
                work.append((node, i + 1))
                nxt = nexts[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def layer_of(mod: str) -> tuple[int, str]:
    """(rank, name) of the layer a module stands in; rank 0 is the top."""
    rel = mod[len(ROOT) :].lstrip(".")
    best: tuple[int, int, str] = (-1, len(LAYERS), "unlayered")
    for rank, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if prefix.endswith("*"):
                head = rel.split(".")[0]
                hit = head.startswith(prefix[:-1])
                size = len(prefix) - 1
            elif prefix == "":
                hit, size = rel == "", 0
            else:
                hit = rel == prefix or rel.startswith(prefix + ".")
                size = len(prefix)
            if hit and size > best[0]:
                best = (size, rank, name)
    return best[1], best[2]


def measure(src: pathlib.Path) -> dict[str, object]:
    mods = modules(src)
    graph = edges(mods)
    nodes = sorted(mods)

    def cycles(kinds: set[str]) -> list[dict[str, object]]:
        adjacent: dict[str, list[str]] = collections.defaultdict(list)
        for (a, b), edge in sorted(graph.items()):
            if edge.kinds & kinds:
                adjacent[a].append(b)
        out = []
        for component in sccs(nodes, adjacent):
            members = set(component)
            closing = [
                {
                    "from": f"{mods[a].as_posix()}:{','.join(map(str, e.where(kinds)))}",
                    "to": mods[b].as_posix(),
                    "kinds": sorted(e.kinds & kinds),
                }
                for (a, b), e in sorted(graph.items())
                if a in members and b in members and e.kinds & kinds
            ]
            out.append({"files": [mods[m].as_posix() for m in component], "edges": closing})
        return out

    up: list[dict[str, object]] = []
    hints: list[dict[str, object]] = []
    sql: list[dict[str, object]] = []
    for (a, b), edge in sorted(graph.items()):
        (ra, la), (rb, lb) = layer_of(a), layer_of(b)
        row = {
            "from": mods[a].as_posix(),
            "from_layer": la,
            "to": mods[b].as_posix(),
            "to_layer": lb,
        }
        if la == "unlayered" or lb == "unlayered":
            pass  # a new package no layer names yet: listed apart, never counted
        elif rb < ra:
            if edge.runs():
                up.append(
                    {
                        **row,
                        "lines": edge.where({"top", "fn"}),
                        "kinds": sorted(edge.kinds - {"tc"}),
                    }
                )
            else:
                hints.append({**row, "lines": edge.where({"tc"}), "kinds": ["tc"]})
        rel_a, rel_b = a[len(ROOT) + 1 :], b[len(ROOT) + 1 :]
        if (
            edge.runs()
            and rel_b.startswith("storage.sql")
            and not rel_a.startswith("storage")
            and not rel_a.startswith(SQL_ALLOWED)
        ):
            sql.append({**row, "lines": edge.where({"top", "fn"})})
    running = cycles({"top", "fn"})
    return {
        "modules": len(mods),
        "cycles": running,
        "cycles_count": len(running),
        "cycles_with_type_hints_count": len(cycles({"top", "fn", "tc"})),
        "up_pointing": up,
        "up_pointing_count": len(up),
        "up_pointing_type_hints_only": hints,
        "sql_reached_from_above": sql,
        "unlayered": sorted(mods[m].as_posix() for m in mods if layer_of(m)[1] == "unlayered"),
    }


def report(result: dict[str, object]) -> str:
    lines = [f"modules: {result['modules']}"]
    cycles = result["cycles"]
    assert isinstance(cycles, list)
    lines.append(f"import cycles among imports that run: {len(cycles)}")
    for n, cycle in enumerate(cycles, 1):
        lines.append(f"  cycle {n}: {len(cycle['files'])} files")
        for f in cycle["files"]:
            lines.append(f"    {f}")
        for e in cycle["edges"]:
            lines.append(f"    edge {e['from']} -> {e['to']} ({'/'.join(e['kinds'])})")
    lines.append(
        "import cycles counting TYPE_CHECKING imports too: "
        f"{result['cycles_with_type_hints_count']}"
    )
    for key, title in (
        ("up_pointing", "imports that run and point up a layer"),
        ("up_pointing_type_hints_only", "up-pointing imports under TYPE_CHECKING (not counted)"),
        ("sql_reached_from_above", "storage.sql reached from above storage (not counted)"),
    ):
        rows = result[key]
        assert isinstance(rows, list)
        lines.append(f"{title}: {len(rows)}")
        for r in rows:
            where = ",".join(map(str, r["lines"]))
            kinds = f" ({'/'.join(r['kinds'])})" if "kinds" in r else ""
            lines.append(
                f"  {r['from']}:{where} [{r['from_layer']}] -> {r['to']} [{r['to_layer']}]{kinds}"
            )
    unlayered = result["unlayered"]
    assert isinstance(unlayered, list)
    lines.append(f"modules in no layer yet (their imports not judged): {len(unlayered)}")
    lines.extend(f"  {f}" for f in unlayered)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default="src", help="the folder that holds the oncegraph package")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    src = pathlib.Path(args.src)
    if not (src / ROOT).is_dir():
        print(
            f"no {ROOT} package under {src}: run from the repository root or pass --src",
            file=sys.stderr,
        )
        return 2
    result = measure(src)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
