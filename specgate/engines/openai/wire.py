"""The streamed requests' HTTP/1.1 client: every timestamp taken where the bytes cross the socket.

A load generator measures what it stamps. A general HTTP client (httpx) stamps a request before it encodes the
body and takes a connection from its pool, and stamps a chunk when the consuming coroutine gets to run after
several layers of parsing; at 16 requests in flight that adds milliseconds to TTFT, and ~5 ms of CPU per request
caps one event loop below 200 requests/s. This client does the one thing the openai engine needs, as an
`asyncio.Protocol`:

- `Connection.send` writes request bytes built beforehand (`encode_request`) on an open keep-alive connection and
  returns `time.perf_counter()` read just before the write: the moment the request leaves.
- `data_received` reads the clock first, then decodes the response (status line, headers, a chunked,
  Content-Length or read-until-close body) and hands each server-sent event's `data` to the exchange's `on_event`
  with that arrival time. `Exchange.done` resolves with the time the body ended.
- `open_connection` connects and warms a connection with one `GET` round trip, so no measured request pays for
  TCP (or TLS) set-up.

A status other than 200 collects up to `ERROR_BODY_BYTES` of the body for the message. Silence longer than
`read_timeout_s` within a response, a connection that ends before its body, or a response that is not HTTP/1.x
fails the exchange with a `WireError`; such a connection is closed, never reused. No retries, no redirects, no
compression (none is asked for), no proxies.
"""

from __future__ import annotations

import asyncio
import http
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

ERROR_BODY_BYTES = 480
MAX_HEAD_BYTES = 64 * 1024


class WireError(Exception):
    """A request failed below the level of the OpenAI stream; `kind` says how."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind  # "connect", "connect timeout", "read timeout", "closed", "protocol"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where the connections go: scheme, host, port, and the Host header."""

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, root: str) -> Origin:
        parts = urlsplit(root)
        return cls(parts.scheme, parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))

    @property
    def authority(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def encode_request(method: str, origin: Origin, path: str, headers: Mapping[str, str], body: bytes = b"") -> bytes:
    """The bytes of one HTTP/1.1 request (keep-alive, identity encoding)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {origin.authority}", "Accept-Encoding: identity"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Exchange:
    """One request's response as it arrives. `on_event(data, arrived_s)` gets each server-sent event's data
    (it may raise to abort the exchange); `error_body` holds the start of a non-200 body."""

    __slots__ = ("done", "error_body", "on_event", "reason", "sse", "status")

    def __init__(self, on_event: Callable[[str, float], None], loop: asyncio.AbstractEventLoop) -> None:
        self.on_event = on_event
        self.done: asyncio.Future[float] = loop.create_future()
        self.status = 0
        self.reason = ""
        self.error_body = bytearray()
        self.sse = bytearray()

    def body(self, data: bytes, now: float) -> None:
        """Take a piece of the body: event data for a 200, the excerpt for anything else."""
        if self.status != 200:
            if len(self.error_body) < ERROR_BODY_BYTES:
                self.error_body += data[: ERROR_BODY_BYTES - len(self.error_body)]
            return
        sse = self.sse
        sse += data
        if b"\r" in sse:
            sse[:] = sse.replace(b"\r\n", b"\n")
        while (end := sse.find(b"\n\n")) >= 0:
            event = bytes(sse[:end])
            del sse[: end + 2]
            self._event(event, now)

    def flush(self, now: float) -> None:
        """The body ended: an event not closed by a blank line still counts."""
        if self.status == 200 and self.sse.strip():
            event = bytes(self.sse)
            self.sse.clear()
            self._event(event, now)

    def _event(self, event: bytes, now: float) -> None:
        data = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            self.on_event(b"\n".join(data).decode("utf-8", "replace"), now)

    @property
    def reason_phrase(self) -> str:
        if self.reason:
            return self.reason
        try:
            return http.HTTPStatus(self.status).phrase
        except ValueError:
            return ""


class Connection(asyncio.Protocol):
    """One keep-alive connection; at most one exchange at a time (see the module docstring)."""

    def __init__(self, read_timeout_s: float) -> None:
        self.read_timeout_s = read_timeout_s
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._exchange: Exchange | None = None
        self._buffer = bytearray()
        self._state = "idle"  # idle, head, chunk-size, chunk-data, chunk-end, trailer, length, until-close
        self._remaining = 0
        self._keep_alive = True
        self._last_s = 0.0
        self._timer: asyncio.TimerHandle | None = None

    @property
    def reusable(self) -> bool:
        return not self.closed and self._state == "idle" and self.transport is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses

    def send(self, request: bytes, exchange: Exchange) -> float:
        """Write the request and return the time just before the write; the response goes to `exchange`."""
        if not self.reusable or self.transport is None:
            raise WireError("closed", "the connection is not open")
        self._exchange, self._state, self._keep_alive = exchange, "head", True
        loop = exchange.done.get_loop()
        sent_s = time.perf_counter()
        self.transport.write(request)
        self._last_s = sent_s
        self._timer = loop.call_at(loop.time() + self.read_timeout_s, self._check_silence)
        return sent_s

    def _check_silence(self) -> None:
        if self._exchange is None:
            return
        loop = self._exchange.done.get_loop()
        silent_s = time.perf_counter() - self._last_s
        if silent_s < self.read_timeout_s:
            self._timer = loop.call_at(loop.time() + self.read_timeout_s - silent_s, self._check_silence)
            return
        self._fail(WireError("read timeout", f"no data for {self.read_timeout_s:g} s"))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self._last_s = now
        if self._exchange is None:
            if data:
                self._close()  # bytes nobody asked for: the connection is out of step
            return
        self._buffer += data
        try:
            self._parse(now)
        except Exception as exc:  # a violation, or `on_event` refused an event: the exchange ends with it
            self._fail(exc)

    def _parse(self, now: float) -> None:
        buffer = self._buffer
        while buffer and self._exchange is not None:
            state = self._state
            if state == "head":
                if not self._head(buffer):
                    return
            elif state == "chunk-size":
                end = buffer.find(b"\r\n")
                if end < 0:
                    return
                size_text = bytes(buffer[:end]).split(b";")[0].strip()
                del buffer[: end + 2]
                try:
                    self._remaining = int(size_text, 16)
                except ValueError:
                    raise WireError("protocol", f"bad chunk size {size_text[:40]!r}") from None
                self._state = "chunk-data" if self._remaining else "trailer"
            elif state in ("chunk-data", "length"):
                piece = bytes(buffer[: self._remaining])
                del buffer[: len(piece)]
                self._remaining -= len(piece)
                self._exchange.body(piece, now)
                if self._remaining == 0:
                    if state == "length":
                        self._finish(now)
                    else:
                        self._state = "chunk-end"
            elif state == "chunk-end":
                if len(buffer) < 2:
                    return
                del buffer[:2]
                self._state = "chunk-size"
            elif state == "trailer":
                end = buffer.find(b"\r\n")
                if end < 0:
                    return
                del buffer[: end + 2]
                if end == 0:
                    self._finish(now)
            elif state == "until-close":
                self._exchange.body(bytes(buffer), now)
                buffer.clear()
            else:
                raise WireError("protocol", f"{len(buffer)} bytes after the response ended")

    def _head(self, buffer: bytearray) -> bool:
        """Parse the status line and headers once they are complete; False while they are not."""
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                raise WireError("protocol", f"no end of the response headers within {MAX_HEAD_BYTES} bytes")
            return False
        lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
        del buffer[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise WireError("protocol", f"not an HTTP/1.x response: {lines[0][:80]!r}")
        status = int(code)
        if 100 <= status < 200:
            return True  # an interim response; the real one follows
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        assert self._exchange is not None
        self._exchange.status, self._exchange.reason = status, reason
        connection = headers.get("connection", "").lower()
        self._keep_alive = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
        if status in (204, 304):  # no body, whatever the headers say (RFC 9112 §6.3)
            self._finish(time.perf_counter())
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = "chunk-size"
        elif "content-length" in headers:
            length = headers["content-length"]
            if not length.isdigit():
                raise WireError("protocol", f"bad Content-Length {length[:40]!r}")
            self._remaining = int(length)
            self._state = "length" if self._remaining else "idle"
            if not self._remaining:
                self._finish(time.perf_counter())
        else:
            self._state, self._keep_alive = "until-close", False
        return True

    def _finish(self, now: float) -> None:
        exchange, self._exchange, self._state = self._exchange, None, "idle"
        self._stop_timer()
        if not self._keep_alive:
            self._close()
        if exchange is not None and not exchange.done.done():
            exchange.flush(now)
            exchange.done.set_result(now)

    def _fail(self, exc: BaseException) -> None:
        exchange, self._exchange = self._exchange, None
        self._stop_timer()
        self._close()
        if exchange is not None and not exchange.done.done():
            exchange.done.set_exception(exc)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool | None:
        if self._exchange is not None and self._state == "until-close":
            self._finish(time.perf_counter())
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._exchange is not None:
            if self._state == "until-close":
                self._finish(time.perf_counter())
            else:
                why = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection"
                self._fail(WireError("closed", why))

    def close(self) -> None:
        """Close the connection; an exchange in progress fails."""
        self._fail(WireError("closed", "the client closed the connection"))


async def open_connection(
    origin: Origin, *, connect_timeout_s: float, read_timeout_s: float, warm_request: bytes | None = None
) -> Connection:
    """A connected `Connection`, warmed by one round trip of `warm_request` (its response is read and dropped)."""
    loop = asyncio.get_running_loop()
    context = ssl.create_default_context() if origin.scheme == "https" else None
    try:
        _, connection = await asyncio.wait_for(
            loop.create_connection(
                lambda: Connection(read_timeout_s),
                origin.host,
                origin.port,
                ssl=context,
                server_hostname=origin.host if context else None,
            ),
            connect_timeout_s,
        )
    except asyncio.TimeoutError:
        raise WireError("connect timeout", f"no connection within {connect_timeout_s:g} s") from None
    except OSError as exc:
        raise WireError("connect", f"{type(exc).__name__}: {exc}") from None
    if warm_request is not None:
        exchange = Exchange(lambda data, arrived_s: None, loop)
        connection.send(warm_request, exchange)
        await exchange.done
    return connection


class Pool:
    """Keep-alive connections to one origin: `warm(n)` opens and warms them before the clock starts; `acquire`
    hands out an open one, connecting anew (and counting it) only when none is left."""

    def __init__(self, origin: Origin, *, connect_timeout_s: float, read_timeout_s: float) -> None:
        self.origin = origin
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.idle: list[Connection] = []
        self.warmed = 0
        self.opened = 0

    async def warm(self, count: int, request: bytes) -> None:
        """Open `count` connections, each warmed by one `request`; one that fails is left out (a request that
        then needs a connection reports why it cannot get one)."""
        tries = [self._open(request) for _ in range(count)]
        for connection in await asyncio.gather(*tries, return_exceptions=True):
            if isinstance(connection, Connection) and connection.reusable:
                self.idle.append(connection)
        self.warmed = len(self.idle)

    def _open(self, warm_request: bytes | None) -> Awaitable[Connection]:
        return open_connection(
            self.origin,
            connect_timeout_s=self.connect_timeout_s,
            read_timeout_s=self.read_timeout_s,
            warm_request=warm_request,
        )

    async def acquire(self) -> Connection:
        while self.idle:
            connection = self.idle.pop()
            if connection.reusable:
                return connection
        connection = await self._open(None)
        self.opened += 1
        return connection

    def release(self, connection: Connection) -> None:
        """Back to the pool if it sits between responses, else closed."""
        if connection.reusable:
            self.idle.append(connection)
        else:
            connection.close()

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()
