"""A stand-in for vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`), for the lifecycle tests of
the vllm engine: the same command line, `/health`, `/v1/models` (the served model name), `/metrics` (speculation
counters when started with `--speculative-config`), streamed chat completions. No model, no vLLM.

`STANDIN_PIDS` names a file each start appends its pid to (and its child's, see below); `STANDIN_MODE`:
`ok`; `exit` (fails at once); `port-taken` (says its address is in use and exits while `STANDIN_TAKEN` exists,
deleting it: one conflict); `child` (starts a child process in its group that ignores SIGTERM); `never-ready`
(listens, but `/health` answers 503); `deaf-start` (never ready, and ignores SIGTERM, as a starting vLLM server
does). It loads the `vllm.general_plugins` entry points as vLLM does and prints
the slowdown marker when specgate's plugin is among them and `SPECGATE_VLLM_SLOWDOWN` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import entry_points
from typing import Any

COUNTERS = {"drafts": 0, "drafted": 0, "accepted": 0, "requests": 0}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    served = ""
    speculative = False
    mode = "ok"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(503 if self.mode in ("never-ready", "deaf-start") else 200, {})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.served, "object": "model"}]})
        elif self.path == "/version":
            self._json(200, {"version": "standin-0"})
        elif self.path == "/metrics":
            lines = [f"vllm:request_success_total {COUNTERS['requests']}"]
            if self.speculative:
                lines += [
                    f"vllm:spec_decode_num_drafts_total {COUNTERS['drafts']}",
                    f"vllm:spec_decode_num_draft_tokens_total {COUNTERS['drafted']}",
                    f"vllm:spec_decode_num_accepted_tokens_total {COUNTERS['accepted']}",
                ]
            data = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._json(404, {})

    def _chunk(self, text: str) -> None:
        data = f"data: {text}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tokens = int(body.get("max_tokens", 4))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunk(json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
        for i in range(tokens):
            choice = {"index": 0, "delta": {"content": f" t{i}"}, "token_ids": [100 + i]}
            choice["finish_reason"] = "length" if i == tokens - 1 else None
            self._chunk(json.dumps({"choices": [choice]}))
            time.sleep(0.002)
        self._chunk(json.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": tokens}}))
        with LOCK:
            COUNTERS["requests"] += 1
            if self.speculative:
                COUNTERS["drafts"] += 2
                COUNTERS["drafted"] += 6
                COUNTERS["accepted"] += 3
        self._chunk("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--speculative-config")
    args, _ = parser.parse_known_args()
    mode = os.environ.get("STANDIN_MODE", "ok")
    pids = os.environ.get("STANDIN_PIDS")
    if pids:
        with open(pids, "a") as out:
            out.write(f"{os.getpid()}\n")
    if mode == "exit":  # as vLLM fails on a layout the model cannot take
        sys.exit(
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n"
            "  Value error, Total number of attention heads (9) must be divisible by tensor parallel size (2). "
            "[type=value_error, input_value=ArgsKwargs((), {'model_config': ...}), input_type=ArgsKwargs]\n"
            "    For further information visit https://errors.pydantic.dev/2.14/v/value_error"
        )
    taken = os.environ.get("STANDIN_TAKEN")
    if mode == "port-taken" and taken and os.path.exists(taken):
        os.unlink(taken)
        sys.exit(
            f"ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', {args.port}): "
            "address already in use"
        )
    if os.environ.get("SPECGATE_VLLM_SLOWDOWN"):
        for plugin in entry_points(group="vllm.general_plugins"):
            if plugin.value == "specgate.engines.vllm_slowdown:register":
                plugin.load()  # the module imports without vLLM; registering needs vLLM's engine core
                print(f"specgate: injected slowdown active: +{os.environ['SPECGATE_VLLM_SLOWDOWN']}", flush=True)
    if mode == "child":
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
            ]
        )
        if pids:
            with open(pids, "a") as out:
                out.write(f"{child.pid}\n")
    Handler.served = args.served_model_name
    Handler.speculative = args.speculative_config is not None
    Handler.mode = mode
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    if mode == "deaf-start":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


if __name__ == "__main__":
    main()
