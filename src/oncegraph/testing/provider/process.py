"""The fake provider as a separate OS process, so it outlives a SIGKILLed worker.

:func:`serve_forever_in_subprocess` starts ``python -m oncegraph.testing.provider`` (whose
``__main__`` runs :func:`main`) and returns a :class:`ProviderProcess` handle. Standard
library only.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from oncegraph.testing.provider.server import FakeProvider
from oncegraph.testing.provider.state import CHANGED_PAYLOAD_MODES, ChangedPayload


@dataclass(slots=True)
class ProviderProcess:
    """A provider running as its own OS process (see :func:`serve_forever_in_subprocess`)."""

    process: subprocess.Popen[bytes]
    port: int
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL the provider process and reap it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the provider process (it stops cleanly), SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def serve_forever_in_subprocess(
    port_file: str | Path,
    *,
    port: int = 0,
    state_file: str | Path | None = None,
    timeout: float = 120.0,
    changed_payload: ChangedPayload = "reject",
    key_ttl: float | None = None,
) -> ProviderProcess:
    """Start ``python -m oncegraph.testing.provider`` and wait until it has written its port.

    The child runs in its own session (a signal to the caller's process group does not
    reach it) and exits by itself when this process goes away.
    """
    port_path = Path(port_file)
    port_path.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "oncegraph.testing.provider", "--port", str(port)]
    argv += ["--port-file", str(port_path), "--exit-with-parent"]
    if state_file is not None:
        argv += ["--state-file", str(state_file)]
    if changed_payload != "reject":
        argv += ["--changed-payload", changed_payload]
    if key_ttl is not None:
        argv += ["--key-ttl", str(key_ttl)]
    process = subprocess.Popen(argv, start_new_session=True)
    deadline = time.monotonic() + timeout
    while not port_path.exists():
        if process.poll() is not None:
            raise RuntimeError(f"the provider process exited with code {process.returncode}")
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f"the provider process wrote no port file in {timeout}s")
        time.sleep(0.02)
    return ProviderProcess(process, int(port_path.read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oncegraph.testing.provider")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--port-file", help="write the bound port here (atomically)")
    parser.add_argument("--state-file", help="keep state in this JSON file across restarts")
    parser.add_argument("--exit-with-parent", action="store_true", help="exit when orphaned")
    parser.add_argument(
        "--changed-payload",
        choices=CHANGED_PAYLOAD_MODES,
        default="reject",
        help="a known key with another body: reject it (422) or answer the first response",
    )
    parser.add_argument(
        "--key-ttl", type=float, default=None, help="seconds a key is kept (default: forever)"
    )
    args = parser.parse_args(argv)
    provider = FakeProvider(
        args.host,
        args.port,
        state_file=args.state_file,
        changed_payload=args.changed_payload,
        key_ttl=args.key_ttl,
    ).start()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    if args.port_file:
        tmp = Path(args.port_file + ".tmp")
        tmp.write_text(str(provider.port))
        os.replace(tmp, args.port_file)
    print(f"fake provider listening on {provider.url}", flush=True)
    parent = os.getppid()
    while not stopping.wait(0.2):
        if args.exit_with_parent and os.getppid() != parent:
            break
    provider.stop()
    return 0


__all__ = ["ProviderProcess", "main", "serve_forever_in_subprocess"]
