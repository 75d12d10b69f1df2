"""A model server that specgate starts, waits for, and always stops: one subprocess on a free loopback port.

`ServerProcess.start()` picks a free port, starts the command in a session of its own (so the server and every
process it starts share one process group) and waits until the server is ready: `GET /health` answers 200 and
`GET /v1/models` lists the served model name, a name made unique per start (so a foreign server that happens to
answer on the port is never taken for ours). A server that exits before it is ready fails with the end of its log;
when the log says its port was taken meanwhile (another process bound it between the probe and the server's own
bind), it is started again on another port, up to `PORT_TRIES` times.

Stopping is SIGTERM to the process group, then SIGKILL to the group after `STOP_TIMEOUT_S`: the server's
engine-core and worker processes go with it. Nothing is left behind:

- `stop()` is idempotent, and every live server is stopped by `stop_all()`, which runs at interpreter exit (atexit:
  a normal end, an exception, a KeyboardInterrupt);
- a SIGTERM or SIGHUP to the gate (a cancelled CI job, a closed terminal) ends it without atexit: from the first
  server's start on, the gate's main thread answers those signals (where nothing else does) by stopping every live
  server (SIGTERM, SIGKILL to each group after `DYING_STOP_S`) and then dying of the same signal. This matters
  because a starting vLLM server ignores SIGTERM for most of its start;
- a gate killed outright (SIGKILL, the OOM killer, a CI runner killing the job's process group: the servers sit in
  sessions of their own, out of its reach) runs no code at all. Two guards outlive it: on Linux each server gets
  SIGTERM from the kernel when the process that started it dies (`PR_SET_PDEATHSIG`), which a starting vLLM server
  ignores; and a watchdog process in a session of its own, started with the first server, holds the other end of a
  pipe from the gate and the list of live server groups: when the pipe closes (the gate is gone, however it died)
  it sends each group still listed SIGTERM, then SIGKILL after `DYING_STOP_S`, and exits.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from specgate.errors import EngineUnavailableError

PORT_TRIES = 3
STOP_TIMEOUT_S = 30.0
DYING_STOP_S = 5.0  # how long a gate that got SIGTERM waits for its servers before SIGKILL
POLL_S = 0.5
PORT_TAKEN = ("address already in use", "errno 98", "eaddrinuse")
PR_SET_PDEATHSIG = 1

Command = Callable[[int, str], Sequence[str]]  # (port, served model name) → argv


def free_port() -> int:
    """A port no one listens on now (the kernel's pick); someone may take it before the server binds it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


_WATCHDOG = f"""
import os, signal, sys, time
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
groups = set()
for line in sys.stdin:  # until the gate's end of the pipe closes
    sign, group = line.split()
    (groups.add if sign == "+" else groups.discard)(int(group))
def left(sig):
    alive = []
    for group in groups:
        try:
            os.killpg(group, sig)
            alive.append(group)
        except OSError:
            pass
    return alive
left(signal.SIGTERM)
deadline = time.monotonic() + {DYING_STOP_S}
while left(0) and time.monotonic() < deadline:
    time.sleep(0.1)
left(signal.SIGKILL)
"""
_watchdog: subprocess.Popen[bytes] | None = None


def _watch(sign: str, group: int) -> None:
    """Tell the watchdog (see the module docstring) that a server group started ("+") or was stopped ("-")."""
    global _watchdog
    if not sys.platform.startswith("linux"):
        return
    with _LIVE_LOCK:
        if sign == "+" and (_watchdog is None or _watchdog.poll() is not None):
            _watchdog = subprocess.Popen(  # a fixed script, no shell
                [sys.executable, "-c", _WATCHDOG],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        if _watchdog is not None and _watchdog.stdin is not None:
            with contextlib.suppress(OSError, ValueError, RuntimeError):  # RuntimeError: a handler re-entered
                _watchdog.stdin.write(f"{sign} {group}\n".encode())
                _watchdog.stdin.flush()


_LIVE: set[subprocess.Popen[bytes]] = set()  # each server's leading process, from its spawn until it is stopped
_LIVE_LOCK = threading.RLock()  # re-entrant: the signal handler below runs in the main thread, which may hold it


def live_groups() -> frozenset[int]:
    """The process groups of the servers alive now (each server leads a group of its own)."""
    with _LIVE_LOCK:
        return frozenset(process.pid for process in _LIVE)


def stop_all(timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Stop every server still alive, all at once (atexit, the gate's SIGTERM, callers that tear everything down):
    SIGTERM to each group, SIGKILL to each after `timeout_s`."""
    with _LIVE_LOCK:
        processes = list(_LIVE)
    _end(processes, timeout_s)
    with _LIVE_LOCK:
        _LIVE.difference_update(processes)
    for process in processes:
        _watch("-", process.pid)


def _end(processes: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """SIGTERM to each process's group, SIGKILL to each group after `timeout_s` (and to whatever outlived its
    leader). It polls rather than waits, so it also works from a signal handler that interrupted a wait."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        _signal_group(process.pid, signal.SIGTERM)  # start_new_session: each server leads its own group
    _poll_until_gone(running, timeout_s)
    for process in processes:
        _signal_group(process.pid, signal.SIGKILL)
    _poll_until_gone(running, STOP_TIMEOUT_S)


def _poll_until_gone(processes: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
        time.sleep(0.05)


def _retire_watchdog() -> None:
    """At exit, once `stop_all` has run: close the watchdog's pipe and let it end (it has nothing left to stop)."""
    watchdog = _watchdog
    if watchdog is not None and watchdog.stdin is not None:
        with contextlib.suppress(OSError):
            watchdog.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watchdog.wait(timeout=DYING_STOP_S + 5)


atexit.register(_retire_watchdog)  # atexit runs last-registered first: stop_all, then this
atexit.register(stop_all)

FATAL = (signal.SIGTERM, signal.SIGHUP)  # signals whose default action ends the gate without atexit


def _die_stopping_servers(signum: int, frame: object) -> None:
    """The gate's answer to a fatal signal: stop every server, then die of that signal as it would have."""
    stop_all(DYING_STOP_S)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def guard_fatal_signals() -> None:
    """Make SIGTERM/SIGHUP stop the servers first, where this is the main thread and no one else handles them."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in FATAL:
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _die_stopping_servers)


class ServerProcess:
    """One start of a server (see the module docstring). `command(port, served_name)` is its argv; `env` is added
    to this process's environment; its output goes to `log_dir/<label>-<n>.log`."""

    def __init__(
        self,
        label: str,
        command: Command,
        *,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        ready_timeout_s: float = 900.0,
        port: Callable[[], int] = free_port,
    ) -> None:
        self.label = label
        self.served_name = f"specgate-{label}-{uuid.uuid4().hex[:8]}"
        self._command = command
        self._env = dict(env or {})
        self._log_dir = log_dir
        self._ready_timeout_s = ready_timeout_s
        self._port = port
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log: Path | None = None
        self.startup_s = 0.0
        self.attempts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> str:
        """Start the server and wait until it is ready; returns its root URL. Raises `EngineUnavailableError`."""
        started = time.perf_counter()
        for _ in range(PORT_TRIES):
            self.attempts += 1
            self.port = self._port()
            self._spawn()
            why = self._wait_ready()
            if why is None:
                self.startup_s = time.perf_counter() - started
                return self.url
            self.stop()
            if not _port_taken(why):
                raise EngineUnavailableError(f"the {self.label!r} server did not start: {why}")
        raise EngineUnavailableError(
            f"the {self.label!r} server found its port taken {PORT_TRIES} times in a row (another process binds "
            f"the free ports specgate picks); last: {why}"
        )

    def _spawn(self) -> None:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        self.log = self._log_dir / f"{self.label}-{self.attempts}.log"
        argv = list(self._command(self.port, self.served_name))
        preexec = _die_with_parent if sys.platform.startswith("linux") else None
        guard_fatal_signals()
        with self.log.open("wb") as output:
            output.write(("$ " + " ".join(argv) + "\n").encode())
            output.flush()
            self._process = subprocess.Popen(  # argv built by specgate, no shell
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self._env},
                start_new_session=True,
                preexec_fn=preexec,  # only prctl(PR_SET_PDEATHSIG)
            )
        with _LIVE_LOCK:
            _LIVE.add(self._process)
        _watch("+", self._process.pid)

    def _wait_ready(self) -> str | None:
        """None when ready, else why not."""
        import httpx

        deadline = time.monotonic() + self._ready_timeout_s
        with httpx.Client(trust_env=False, timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self._process is None or self._process.poll() is not None:
                    code = None if self._process is None else self._process.returncode
                    log = self.log_tail(ERROR_SEARCH_CHARS)  # read once: the cause is searched, the end shown
                    said = last_error(log)
                    cause = f" ({said})" if said else ""
                    return f"it exited with status {code} before it was ready{cause}; its log ends:\n{log[-3000:]}"
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    if client.get(f"{self.url}/health").status_code == 200 and self._serves(client):
                        return None
                time.sleep(POLL_S)
        return f"not ready within {self._ready_timeout_s:.0f} s; its log ends:\n{self.log_tail()}"

    def _serves(self, client: object) -> bool:
        response = client.get(f"{self.url}/v1/models")  # type: ignore[attr-defined]
        if response.status_code != 200:
            return False
        return any(m.get("id") == self.served_name for m in response.json().get("data", []))

    def log_tail(self, chars: int = 3000) -> str:
        """The last `chars` characters of the server's log (its output and errors)."""
        if self.log is None:
            return ""
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError as exc:
            return f"(log unreadable: {exc})"

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after `STOP_TIMEOUT_S`; then every process left in the
        group is killed too. Safe to call twice."""
        process, self._process = self._process, None
        if process is None:
            return
        _end([process], STOP_TIMEOUT_S)
        with _LIVE_LOCK:  # only now: a SIGTERM to the gate meanwhile still finds this server
            _LIVE.discard(process)
        _watch("-", process.pid)


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _port_taken(why: str) -> bool:
    lowered = why.lower()
    return any(marker in lowered for marker in PORT_TAKEN)


ERROR_SEARCH_CHARS = 50_000  # how far back in a server's log its root cause is looked for


def last_error(log: str, limit: int = 200) -> str:
    """The last error a server's log names — a Python exception with its message ("ValueError: current platform cpu
    does not support ray."), or the reason vLLM's config validation prints ("Value error, Total number of attention
    heads (9) must be divisible by …") — passing over a wrapper that points above itself ("See root cause above"),
    cut to `limit` characters; "" when the log names none. It goes on the first line of the error a user reads."""
    for line in reversed(log.splitlines()):
        found = _ERROR.search(line)
        if found is None or "root cause above" in line:
            continue
        text = line[found.start() :].strip().split(" [type=", 1)[0]  # from the error on; not pydantic's input echo
        return text if len(text) <= limit else text[: limit - 1] + "…"
    return ""


_ERROR = re.compile(r"\b\w*(?:Error|Exception): \S|\bValue error, ")
