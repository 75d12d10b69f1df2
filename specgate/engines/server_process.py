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
- on Linux each server gets SIGTERM from the kernel when the process that started it dies (`PR_SET_PDEATHSIG`),
  so even a killed gate (SIGKILL, OOM) leaves no orphan serving on.
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


_LIVE: set[ServerProcess] = set()
_LIVE_LOCK = threading.Lock()


def stop_all() -> None:
    """Stop every server still alive (atexit, and for callers that tear everything down)."""
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        server.stop()


atexit.register(stop_all)


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
            _LIVE.add(self)

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
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if process is None:
            return
        group = process.pid  # start_new_session: the server leads its own group
        if process.poll() is None:
            _signal_group(group, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _signal_group(group, signal.SIGKILL)
                process.wait(timeout=STOP_TIMEOUT_S)
        _signal_group(group, signal.SIGKILL)  # children that outlived their leader

    def pids(self) -> list[int]:
        """The server's process and its descendants now (for CPU and run-queue readings)."""
        if self._process is None:
            return []
        found = [self._process.pid]
        for pid in found:
            with contextlib.suppress(OSError):
                for task in Path(f"/proc/{pid}/task").iterdir():
                    children = (task / "children").read_text().split()
                    found += [int(c) for c in children if int(c) not in found]
        return found


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
