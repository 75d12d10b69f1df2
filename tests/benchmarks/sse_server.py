"""A minimal OpenAI-compatible streaming server that logs when it received each request and sent each chunk.

Run as its own process (`python tests/benchmarks/sse_server.py --tokens 16 --first-ms 20 --gap-ms 10`), so its
work never shares the measuring client's event loop; it prints `PORT <n>` once it listens on 127.0.0.1. Raw asyncio
(uvloop when installed), HTTP/1.1 keep-alive, Content-Length request bodies.

- `POST /v1/chat/completions`, `POST /v1/completions`: `--tokens` one-token chunks, the first `--first-ms` after
  the request arrived, then one every `--gap-ms` (both 0: every chunk in one write, an *instant* server), with
  `token_ids` when asked (`return_token_ids`), a final usage event when asked (`stream_options.include_usage`),
  then `data: [DONE]`.
- `GET /v1/models`, `GET /health`: what clients probe.
- `GET /log`: the log as JSON, then cleared: one record per request, `{"prompt": <the user text>, "received_s":
  <when its first bytes were read>, "sent_s": [<just before each chunk's write>]}`, in `time.perf_counter()`
  seconds, the same CLOCK_MONOTONIC as the client's on Linux, so the two can be set side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
from typing import Any, cast

MODEL = "bench-model"


class Options:
    def __init__(self, tokens: int, first_ms: float, gap_ms: float) -> None:
        self.tokens, self.first_s, self.gap_s = tokens, first_ms / 1000.0, gap_ms / 1000.0
        self.log: list[dict[str, Any]] = []


def _chunk(payload: bytes) -> bytes:
    data = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _events(body: dict[str, Any], tokens: int) -> list[bytes]:
    chat = "messages" in body
    ids = bool(body.get("return_token_ids"))
    events = []
    for i in range(tokens):
        text = f" t{i}"
        choice: dict[str, Any] = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
        choice["finish_reason"] = "length" if i == tokens - 1 else None
        if ids:
            choice["token_ids"] = [100 + i]
        kind = "chat.completion.chunk" if chat else "text_completion"
        events.append(_chunk(json.dumps({"id": "b", "object": kind, "model": MODEL, "choices": [choice]}).encode()))
    tail = b""
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens}
        tail += _chunk(json.dumps({"id": "b", "model": MODEL, "choices": [], "usage": usage}).encode())
    events[-1] += tail + _chunk(b"[DONE]") + b"0\r\n\r\n"
    return events


def _prompt(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        content = messages[-1].get("content", "")
        if isinstance(content, list):  # parts: [{"type": "text", "text": …}]
            return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        return str(content)
    return str(body.get("prompt", ""))


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class Server(asyncio.Protocol):
    def __init__(self, options: Options) -> None:
        self.options = options
        self.buffer = bytearray()
        self.received_s = 0.0
        self.transport: asyncio.Transport | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses

    def data_received(self, data: bytes) -> None:
        if not self.buffer:
            self.received_s = time.perf_counter()
        self.buffer += data
        while not self.busy:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            method, path = head[0].split(" ")[:2]
            self.handle(method, path, body)
            if self.buffer:  # a pipelined request: its bytes were read just now
                self.received_s = time.perf_counter()

    def respond(self, status: str, payload: Any) -> None:
        data = json.dumps(payload).encode()
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status.encode(), len(data), data)
        )

    def handle(self, method: str, path: str, raw: bytes) -> None:
        path = path.split("?")[0]
        if method == "GET" and path == "/v1/models":
            self.respond("200 OK", {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "b"}]})
        elif method == "GET" and path == "/health":
            self.respond("200 OK", {})
        elif method == "GET" and path == "/log":
            log, self.options.log = self.options.log, []
            self.respond("200 OK", log)
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            self.stream(json.loads(raw))
        else:
            self.respond("404 Not Found", {"detail": "Not Found"})

    def stream(self, body: dict[str, Any]) -> None:
        options = self.options
        tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or options.tokens)
        events = _events(body, min(tokens, options.tokens))
        record: dict[str, Any] = {"prompt": _prompt(body), "received_s": self.received_s, "sent_s": []}
        options.log.append(record)
        assert self.transport is not None
        if options.first_s == 0 and options.gap_s == 0:
            record["sent_s"] = [time.perf_counter()] * len(events)
            self.transport.write(STREAM_HEAD + b"".join(events))
            return
        self.busy = True
        self.transport.write(STREAM_HEAD)
        loop = asyncio.get_running_loop()
        start = loop.time() - (time.perf_counter() - self.received_s)

        def send(i: int) -> None:
            if self.transport is None or self.transport.is_closing():
                self.busy = False
                return
            record["sent_s"].append(time.perf_counter())
            self.transport.write(events[i])
            if i + 1 < len(events):
                loop.call_at(start + options.first_s + (i + 1) * options.gap_s, send, i + 1)
            else:
                self.busy = False
                if self.buffer:  # a pipelined request waited for this one
                    self.data_received(b"")

        loop.call_at(start + options.first_s, send, 0)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(options: Options, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Server(options), "127.0.0.1", port, backlog=1024)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--first-ms", type=float, default=20.0)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    args = parser.parse_args()
    options = Options(args.tokens, args.first_ms, args.gap_ms)
    # The reference clock must not stall: a cyclic collection stops the loop between a request's arrival and its
    # stamp, or a stamp and its write, and that would count as the client's error. What cycles the connections
    # leave over one benchmark are a few megabytes.
    gc.disable()
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(serve(options, args.port))


if __name__ == "__main__":
    main()
