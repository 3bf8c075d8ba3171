"""Run liveness locks as OS file locks: they die with the process that holds them.

A SQLite store keeps its run locks in a sidecar file ``<database>-claims``: run ``r``
is locked by an exclusive POSIX record lock (``fcntl.lockf``) on one byte at an offset
derived from ``sha256(r)``. The kernel drops a process's record locks when it exits
or is killed, so a crashed holder never has to be waited out.

POSIX record locks belong to the PROCESS, not to a file descriptor, and closing ANY
descriptor of the file drops all of the process's locks on it. Hence, per file:

* one :class:`LockFile` per process (a module registry keyed by the file's identity),
  with one descriptor that stays open while any store or lock uses it;
* a per-process set of held runs, because a second lock on the same byte by the same
  process would silently succeed: within a process, the set is the lock.

Offsets are 62-bit: two runs sharing one byte (a hash collision) would only make one
of them look busy for a moment, never let two holders in.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable

from oncegraph.errors import StorageError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: in-process exclusion only
    fcntl = None  # type: ignore[assignment]

_MASK = (1 << 62) - 1
_registry_lock = threading.Lock()
_registry: dict[tuple[int, int], LockFile] = {}


def _offset(run_id: str) -> int:
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "big") & _MASK


class LockFile:
    """The process's one handle on a claims file (see the module docstring)."""

    def __init__(self, path: str, fd: int, key: tuple[int, int]) -> None:
        self.path = path
        self._fd = fd
        self._key = key
        self._held: set[str] = set()
        self._users = 0
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str) -> LockFile:
        """The process's handle on ``path``, created 0600 if missing."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StorageError(
                f"cannot open the run lock file {path!r}: {exc}. It sits beside the SQLite "
                "database; check that its directory is writable."
            ) from exc
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        with _registry_lock:
            found = _registry.get(key)
            if found is None:
                found = _registry[key] = cls(path, fd, key)
            else:
                os.close(fd)  # keep the first descriptor: closing one drops every lock
            found._users += 1
            return found

    def close(self) -> None:
        """One user is done; the descriptor closes when no user and no lock is left."""
        with _registry_lock:
            self._users -= 1
            self._maybe_close()

    def _maybe_close(self) -> None:
        """Call under the registry lock."""
        if self._users <= 0 and not self._held and _registry.get(self._key) is self:
            del _registry[self._key]
            os.close(self._fd)

    def try_lock(self, run_id: str) -> bool:
        """Lock ``run_id`` without waiting; False if this or another process holds it."""
        with self._lock:
            if run_id in self._held:
                return False
            if fcntl is not None:
                try:
                    fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _offset(run_id))
                except (BlockingIOError, PermissionError):
                    return False
                except OSError as exc:
                    raise StorageError(
                        f"cannot lock run {run_id!r} in {self.path!r}: {exc}"
                    ) from exc
            self._held.add(run_id)
            return True

    def unlock(self, run_id: str) -> None:
        with self._lock:
            if run_id not in self._held:
                return
            self._held.discard(run_id)
            if fcntl is not None:
                try:
                    fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, _offset(run_id))
                except OSError:  # the descriptor is gone: the lock went with it
                    pass
        with _registry_lock:
            self._maybe_close()


class HeldRunLock:
    """A run lock this process holds until it lets go
    (:class:`~oncegraph.storage.protocols.RunLock`): ``unlock(run_id)`` runs once, at the
    first release. It is never lost: no one can take a process's own lock from it (an OS
    record lock, or the in-process lock of a store private to its process)."""

    __slots__ = ("_unlock", "run_id")

    def __init__(self, unlock: Callable[[str], None], run_id: str) -> None:
        self._unlock: Callable[[str], None] | None = unlock
        self.run_id = run_id

    @property
    def lost(self) -> bool:
        return False

    async def release(self) -> None:
        unlock, self._unlock = self._unlock, None
        if unlock is not None:
            unlock(self.run_id)


class FileRunLock(HeldRunLock):
    """One held record lock of a :class:`LockFile`."""

    __slots__ = ()

    def __init__(self, file: LockFile, run_id: str) -> None:
        super().__init__(file.unlock, run_id)


__all__ = ["FileRunLock", "HeldRunLock", "LockFile"]
