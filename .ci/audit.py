"""Audit the pinned CI dependencies for known vulnerabilities, where the data is reachable.

    python .ci/audit.py constraints/ci.txt [--osv-url URL]

Runs pip-audit (the dev extra installs it) on the pinned file, against PyPI's
vulnerability data, or an OSV API at ``--osv-url`` (``.../v1/query``). The outcome is
one of:

* known vulnerabilities: each is printed and the exit status is 1 (CI fails);
* audited, nothing known: exit 0;
* vulnerability data unreachable (no network, a proxy, a mirror that has no JSON
  API, which answers "not found" for every package): a line starting
  ``dependency audit SKIPPED`` says so and why, and the exit status is 0. An audit
  that could not look is not reported as clean, and it does not fail CI either;
* pip-audit itself failed for another reason: its output is shown, exit 1.

A one-package probe runs first, so an unreachable service costs one timeout, not one
per package.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TIMEOUT_SECONDS = 15
_NETWORK_WORDS = (
    "ConnectionError",
    "ProxyError",
    "ConnectTimeout",
    "ReadTimeout",
    "Timeout",
    "NameResolutionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "SSLError",
    "ServiceError",
    "HTTPError",
)


def pip_audit(requirements: Path, out: Path, osv_url: str | None) -> tuple[int, str]:
    """Run pip-audit on ``requirements`` with JSON written to ``out``; (status, stderr)."""
    service = [] if osv_url is None else ["--vulnerability-service", "osv", "--osv-url", osv_url]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip_audit",
            *service,
            "--requirement",
            str(requirements),
            "--no-deps",  # the file pins the whole closure already
            "--disable-pip",  # audit the pins as written; no resolver, no virtualenv
            "--progress-spinner",
            "off",
            "--timeout",
            str(TIMEOUT_SECONDS),
            "--format",
            "json",
            "--output",
            str(out),
            "--cache-dir",  # fresh answers every run
            str(out.parent / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS * 200,  # a hang detector
    )
    return done.returncode, done.stderr


def read_report(path: Path) -> list[dict[str, Any]] | None:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    deps = report.get("dependencies") if isinstance(report, dict) else None
    return deps if isinstance(deps, list) else None


def skipped(reason: str, requirements: Path, osv_url: str | None) -> int:
    source = "PyPI's vulnerability data" if osv_url is None else f"the OSV API at {osv_url}"
    print(
        f"dependency audit SKIPPED: {source} is unreachable from here ({reason}). Nothing "
        f"was audited; the pins in {requirements} are unchecked."
    )
    return 0


def network_trouble(stderr: str) -> str | None:
    """The last line naming a network failure, if pip-audit died of one."""
    lines = [line for line in stderr.splitlines() if any(w in line for w in _NETWORK_WORDS)]
    return lines[-1].strip()[:300] if lines else None


def audit(requirements: Path, workdir: Path, osv_url: str | None = None) -> int:
    pins = [
        line.strip()
        for line in requirements.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not pins:
        print(f"dependency audit: {requirements} pins nothing")
        return 1
    # The probe: one package. Unreachable data shows as a network error or as a
    # "not found" skip (a mirror without PyPI's JSON API answers 404).
    probe = workdir / "probe.txt"
    probe.write_text(pins[0] + "\n")
    status, stderr = pip_audit(probe, workdir / "probe.json", osv_url)
    deps = read_report(workdir / "probe.json")
    if deps is None:
        trouble = network_trouble(stderr)
        if trouble is not None:
            return skipped(trouble, requirements, osv_url)
        print(f"dependency audit: pip-audit failed (status {status}):\n{stderr}")
        return 1
    if deps and all("skip_reason" in d for d in deps):
        return skipped(str(deps[0]["skip_reason"]), requirements, osv_url)

    status, stderr = pip_audit(requirements, workdir / "report.json", osv_url)
    deps = read_report(workdir / "report.json")
    if deps is None:
        trouble = network_trouble(stderr)
        if trouble is not None:
            return skipped(f"it failed part-way: {trouble}", requirements, osv_url)
        print(f"dependency audit: pip-audit failed (status {status}):\n{stderr}")
        return 1
    audited = [d for d in deps if "skip_reason" not in d]
    if not audited:
        reason = str(deps[0].get("skip_reason")) if deps else "no answer"
        return skipped(reason, requirements, osv_url)
    for d in deps:
        if "skip_reason" in d:
            print(f"dependency audit: not audited: {d.get('name')}: {d['skip_reason']}")
    found = [(d, v) for d in audited for v in d.get("vulns", [])]
    for d, v in found:
        fixes = ", ".join(v.get("fix_versions", [])) or "none yet"
        ids = ", ".join([v.get("id", "?"), *v.get("aliases", [])])
        print(f"VULNERABLE {d['name']}=={d['version']}: {ids} (fixed in: {fixes})")
    if found:
        print(
            f"dependency audit: {len(found)} known vulnerabilities in {len(audited)} "
            "audited packages; raise the floor in pyproject.toml and regenerate "
            "constraints/ci.txt (python .ci/constraints.py > constraints/ci.txt)"
        )
        return 1
    print(f"dependency audit: no known vulnerabilities in {len(audited)} pinned packages")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Audit pinned dependencies (pip-audit).")
    parser.add_argument("requirements", type=Path)
    parser.add_argument("--osv-url", help="query this OSV API instead of PyPI's data")
    args = parser.parse_args(argv)
    try:
        import pip_audit  # noqa: F401
    except ImportError:
        print("dependency audit: pip-audit is not installed (pip install -e '.[dev]')")
        return 1
    with tempfile.TemporaryDirectory(prefix="oncegraph-audit-") as tmp:
        return audit(args.requirements, Path(tmp), args.osv_url)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
