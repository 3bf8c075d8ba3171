"""The CI dependency audit (.ci/audit.py): fails on a known vulnerability, passes a clean
set, and says clearly, without failing, when the vulnerability data is unreachable.

The real pip-audit runs as a process against a real local HTTP server that speaks the
OSV query API (pip-audit's ``--osv-url``), which knows one advisory: CVE-2024-27454 in
orjson before 3.9.15. Also checked: the pins CI installs are past that advisory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AUDIT = ROOT / ".ci" / "audit.py"

pytest.importorskip("pip_audit", reason="pip-audit comes with the dev extra")

ADVISORY = {
    "id": "TEST-ORJSON-0001",
    "aliases": ["CVE-2024-27454"],
    "summary": "orjson does not limit recursion for deeply nested JSON documents",
    "affected": [
        {
            "package": {"name": "orjson", "ecosystem": "PyPI"},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "3.9.15"}]}],
        }
    ],
}


class Osv(ThreadingHTTPServer):
    status = 200
    queries: list[dict[str, object]]


class OsvHandler(BaseHTTPRequestHandler):
    server: Osv

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.queries.append(body)
        if self.server.status != 200:
            self.send_response(self.server.status)
            self.end_headers()
            return
        package, version = body["package"]["name"], body["version"]
        vulnerable = package == "orjson" and tuple(map(int, version.split("."))) < (3, 9, 15)
        data = json.dumps({"vulns": [ADVISORY]} if vulnerable else {}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def osv() -> Iterator[Osv]:
    server = Osv(("127.0.0.1", 0), OsvHandler)
    server.queries = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(10)


def url(server: Osv) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1/query"


def audit(tmp_path: Path, pins: str, osv_url: str) -> subprocess.CompletedProcess[str]:
    pinned = tmp_path / "pins.txt"
    pinned.write_text(pins)
    return subprocess.run(
        [sys.executable, str(AUDIT), str(pinned), "--osv-url", osv_url],
        capture_output=True,
        text=True,
        timeout=600,  # a hang detector
    )


def test_a_known_vulnerability_fails(tmp_path: Path, osv: Osv) -> None:
    out = audit(tmp_path, "# pinned\norjson==3.9.10\nredis==8.1.0\n", url(osv))
    assert out.returncode == 1, out.stdout + out.stderr
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("VULNERABLE")]
    assert line.startswith("VULNERABLE orjson==3.9.10: ")
    assert "CVE-2024-27454" in line and "TEST-ORJSON-0001" in line
    assert line.endswith("(fixed in: 3.9.15)")
    assert {q["package"]["name"] for q in osv.queries} == {"orjson", "redis"}  # type: ignore[index]


def test_a_clean_set_passes(tmp_path: Path, osv: Osv) -> None:
    out = audit(tmp_path, "orjson==3.9.15\nredis==8.1.0\n", url(osv))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no known vulnerabilities in 2 pinned packages" in out.stdout


@pytest.mark.parametrize("status", [404, 503])
def test_a_service_that_does_not_answer_is_a_clear_skip(
    tmp_path: Path, osv: Osv, status: int
) -> None:
    osv.status = status
    out = audit(tmp_path, "orjson==3.9.10\n", url(osv))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("dependency audit SKIPPED:")
    assert "Nothing was audited" in out.stdout and "VULNERABLE" not in out.stdout


def test_an_unreachable_service_is_a_clear_skip(tmp_path: Path) -> None:
    server = Osv(("127.0.0.1", 0), OsvHandler)
    closed = url(server)
    server.server_close()  # nothing listens there now
    out = audit(tmp_path, "orjson==3.9.10\n", closed)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("dependency audit SKIPPED:")


def test_ci_pins_are_past_the_orjson_advisory() -> None:
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "constraints" / "ci.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert tuple(map(int, pins["orjson"].split(".")[:3])) >= (3, 9, 15)
    assert "orjson>=3.9.15" in (ROOT / "pyproject.toml").read_text()
