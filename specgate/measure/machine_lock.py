"""One measurement at a time on one machine: an advisory lock file that a gate session holds while it measures.

Two gate sessions on one machine (two CI jobs on one runner, a developer's run beside a scheduled one) would measure
each other: every latency of both would be wrong, and nothing in either run would show it. The session that measures
holds an exclusive `fcntl.flock` on `<cache>/machine.lock` (`$SPECGATE_CACHE_DIR`, else `~/.cache/specgate`; or
the file `$SPECGATE_MACHINE_LOCK` names, e.g. one shared by the containers of one machine), and writes who it is into
the file: pid, command line, working directory, start time. A second session waits for it, saying whom it waits for,
up to a timeout, then gives up with the holder's command line. The kernel releases the lock when the holder's process
exits, however it exits (a crash, a kill), so a lock is never stale; the holder's text left in the file is overwritten
by the next holder.

The lock is advisory: it keeps out only processes that ask for it (specgate sessions of any version with this
module), and works on a local file system (the cache folder of one machine), not across machines.

    with hold_machine(timeout_s=600, on_wait=print):   # a script driving GateRun itself
        run.run_all()
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from specgate.errors import SpecgateError
from specgate.models import cache_root

LOCK_NAME = "machine.lock"
LOCK_VARIABLE = "SPECGATE_MACHINE_LOCK"
POLL_S = 0.2
WAIT_NOTICE_S = 30.0


class MachineBusyError(SpecgateError):
    """Another gate session holds this machine's lock, and it was not released in time."""


@dataclass(frozen=True, slots=True)
class Holder:
    """The session that holds (or last held) the lock, as it wrote itself into the lock file."""

    pid: int
    command: str
    cwd: str = ""
    since: str = ""

    def describe(self) -> str:
        where = f" in {self.cwd}" if self.cwd else ""
        since = f", since {self.since}" if self.since else ""
        return f"pid {self.pid} ({self.command}{where}{since})"


def lock_path() -> Path:
    """The machine's lock file: `$SPECGATE_MACHINE_LOCK`, else `<cache>/machine.lock`."""
    return Path(os.environ.get(LOCK_VARIABLE) or cache_root() / LOCK_NAME)


def _command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return " ".join(sys.argv) if pid == os.getpid() else "unknown command"
    return " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part) or "unknown command"


def read_holder(path: Path) -> Holder | None:
    """Who wrote itself into the lock file last (None when it is empty or unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Holder(int(data["pid"]), str(data["command"]), str(data.get("cwd", "")), str(data.get("since", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _describe(path: Path) -> str:
    holder = read_holder(path)
    return "an unknown process" if holder is None else holder.describe()


class MachineLock:
    """The lock of one machine; `acquire` waits for it, `release` (or the process's exit) gives it back."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or lock_path()
        self._handle: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def acquire(self, timeout_s: float | None = None, on_wait: Callable[[str], None] | None = None) -> float:
        """Take the lock, waiting up to `timeout_s` seconds (None: as long as it takes; 0: not at all); return the
        seconds waited. `on_wait` is told whom the session waits for, at once and then every 30 s. Raises
        `MachineBusyError` naming the holder when the time is up."""
        if self._handle is not None:
            return 0.0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held open as long as the lock is held
        started = time.monotonic()
        told = -WAIT_NOTICE_S
        try:
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    waited = time.monotonic() - started
                    if timeout_s is not None and waited >= timeout_s:
                        raise MachineBusyError(self._busy(waited, timeout_s)) from None
                    if on_wait is not None and waited - told >= WAIT_NOTICE_S:
                        told = waited
                        limit = "" if timeout_s is None else f" (at most {timeout_s:g} s)"
                        on_wait(
                            f"waiting for the machine{limit}: another gate session is measuring on it: "
                            f"{_describe(self.path)}; lock file {self.path}"
                        )
                    time.sleep(POLL_S if timeout_s is None else min(POLL_S, max(timeout_s - waited, 0.01)))
        except BaseException:
            handle.close()
            raise
        self._handle = handle
        self._write_holder(handle)
        return time.monotonic() - started

    def _busy(self, waited: float, timeout_s: float) -> str:
        waiting = f"waited {waited:.0f} s" if timeout_s > 0 else "not waiting (timeout 0)"
        return (
            f"another gate session is measuring on this machine: {_describe(self.path)}; {waiting}. Two sessions "
            "at once would measure each other: run the gate after it, raise --specgate-lock-timeout, or give each "
            f"job its own machine (lock file {self.path})"
        )

    @staticmethod
    def _write_holder(handle: IO[str]) -> None:
        pid = os.getpid()
        holder = {
            "pid": pid,
            "command": _command_line(pid),
            "cwd": os.getcwd(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(holder) + "\n")
        handle.flush()

    def release(self) -> None:
        """Give the lock back (the holder's text stays in the file until the next holder replaces it)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            handle.close()


@contextlib.contextmanager
def hold_machine(
    timeout_s: float | None = None, on_wait: Callable[[str], None] | None = None, path: Path | None = None
) -> Iterator[MachineLock]:
    """Hold the machine's lock for the `with` block (see the module docstring)."""
    lock = MachineLock(path)
    lock.acquire(timeout_s, on_wait)
    try:
        yield lock
    finally:
        lock.release()
