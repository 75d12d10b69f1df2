"""Reading one OpenAI-compatible streaming response (server-sent events) into a `RequestTrace`.

An event is the `data:` lines up to a blank line. `data: [DONE]` ends a stream; any other event must be a JSON
object with a `choices` list (possibly empty, as in the final usage event) or an `error` object. An event is a
*chunk* when it brings output: text (`text`, or `delta.content` / `delta.reasoning_content` in chat), token ids,
or a higher cumulative `usage.completion_tokens` than the reading before it. Tokens per chunk are decided at the
end from what every chunk carried (see `ResponseStream.chunk_sizes`). Any violation raises `StreamError`, whose
message becomes the trace's error.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from typing import Any

from specgate.engines.base import Prompt, RequestTrace
from specgate.engines.openai.wire import WireError

EXCERPT = 120


class StreamError(Exception):
    """The response is not a well-formed, complete OpenAI stream; the message says how."""


@dataclasses.dataclass(slots=True)
class Chunk:
    """One event that brought output: when it arrived and what it carried."""

    time_s: float
    text: str
    token_ids: tuple[int, ...] | None
    usage_tokens: int | None


def describe_http_error(status: int, reason: str, body: bytes) -> str:
    """'HTTP 500 Internal Server Error: <start of the body>'."""
    excerpt = " ".join(body.decode("utf-8", "replace").split())[: 2 * EXCERPT]
    return f"HTTP {status} {reason}: {excerpt or '(empty body)'}"


def _malformed(events: int, why: str, payload: str) -> StreamError:
    return StreamError(f"malformed chunk (event {events}): {why}: {payload[:EXCERPT]!r}")


def _text(choice: dict[str, Any], events: int, payload: str) -> str:
    if "delta" in choice:
        delta = choice["delta"] or {}
        if not isinstance(delta, dict):
            raise _malformed(events, "'delta' is not an object", payload)
        parts = [delta.get(k) for k in ("reasoning_content", "reasoning", "content")]
    elif "text" in choice:
        parts = [choice["text"]]
    else:
        raise _malformed(events, "a choice with neither 'text' nor 'delta'", payload)
    if not all(p is None or isinstance(p, str) for p in parts):
        raise _malformed(events, "text that is not a string", payload)
    return "".join(p for p in parts if p)


@dataclasses.dataclass(slots=True)
class ResponseStream:
    """The state of one request while its response streams in."""

    prompt: Prompt
    submit_s: float = 0.0
    done_s: float = 0.0
    chunks: list[Chunk] = dataclasses.field(default_factory=list)
    prompt_tokens: int = 0
    usage_tokens: int | None = None
    finish_reason: str | None = None
    finished: bool = False
    events: int = 0
    error: str | None = None

    @property
    def chunk_count(self) -> int:
        return len(self.chunks)

    def end(self) -> None:
        """The response body ended: a stream without `data: [DONE]` was cut."""
        if not self.finished:
            raise StreamError(
                f"connection closed mid-stream: the stream ended before 'data: [DONE]' after {self.chunk_count} chunks"
            )

    def receive(self, payload: str, now: float) -> None:
        """Take one event's data."""
        self.events += 1
        if payload.strip() == "[DONE]":
            self.finished = True
            return
        try:
            event = json.loads(payload)
        except ValueError:
            raise _malformed(self.events, "not JSON", payload) from None
        if not isinstance(event, dict):
            raise _malformed(self.events, "not a JSON object", payload)
        if "error" in event:
            error = event["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise StreamError(f"the server reported an error mid-stream (event {self.events}): {message}")
        choices = event.get("choices")
        if not isinstance(choices, list):
            raise _malformed(self.events, "no 'choices' list", payload)
        previous = self.usage_tokens
        reading = self._usage(event.get("usage"), payload)
        if choices:
            self._choice(choices[0], now, previous, reading, payload)

    def _usage(self, usage: Any, payload: str) -> int | None:
        """The event's cumulative completion tokens, if it carries usage."""
        if usage is None:
            return None
        completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
        prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if not isinstance(completion, int) or not isinstance(prompt, int):
            raise _malformed(self.events, "'usage' without integer token counts", payload)
        self.usage_tokens, self.prompt_tokens = completion, prompt
        return completion

    def _choice(self, choice: Any, now: float, previous: int | None, reading: int | None, payload: str) -> None:
        if not isinstance(choice, dict):
            raise _malformed(self.events, "a choice that is not an object", payload)
        text = _text(choice, self.events, payload)
        ids = choice.get("token_ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
            raise _malformed(self.events, "'token_ids' is not a list of integers", payload)
        grew = previous is not None and reading is not None and reading > previous
        if text or ids or grew:
            self.chunks.append(Chunk(now, text, None if ids is None else tuple(ids), reading))
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]

    @property
    def token_source(self) -> str:
        """How `chunk_sizes` counts: 'token_ids', 'usage per chunk', 'chunks', or 'chunks, total from usage'."""
        if self.chunks and all(c.token_ids is not None for c in self.chunks):
            return "token_ids"
        if self.chunks and all(c.usage_tokens is not None for c in self.chunks):
            return "usage per chunk"
        if self.usage_tokens is not None:
            return "chunks, total from usage"
        return "chunks"

    def chunk_sizes(self) -> list[int]:
        """Tokens per chunk: exact from ids or cumulative usage; else one per chunk, the last taking the rest."""
        source = self.token_source
        if source == "token_ids":
            return [len(c.token_ids or ()) for c in self.chunks]
        if source == "usage per chunk":
            readings = [0] + [c.usage_tokens or 0 for c in self.chunks]
            return [b - a for a, b in itertools.pairwise(readings)]
        sizes = [1] * len(self.chunks)
        if sizes and self.usage_tokens is not None:
            sizes[-1] = max(1, self.usage_tokens - (len(sizes) - 1))
        return sizes

    def trace(self, arm: str, repetition: int, error: str | None = None) -> RequestTrace:
        """The request's trace; `error` (e.g. the run's time bound) overrides the stream's own."""
        error = error or self.error
        if error is None and not self.chunks:
            error = "the response carried no output tokens"
        sizes = self.chunk_sizes()
        kept = [(c, n) for c, n in zip(self.chunks, sizes, strict=True) if n > 0]
        now = time.perf_counter()
        return RequestTrace(
            prompt_id=self.prompt.id,
            arm=arm,
            repetition=repetition,
            submit_s=self.submit_s or now,
            chunk_times_s=tuple(c.time_s for c, _ in kept),
            chunk_tokens=tuple(n for _, n in kept),
            output_ids=tuple(i for c in self.chunks for i in (c.token_ids or ())),
            output_text="".join(c.text for c in self.chunks),
            prompt_tokens=self.prompt_tokens,
            done_s=self.done_s or now,
            finish_reason=self.finish_reason,
            error=error,
        )

    def describe_wire_error(self, exc: WireError, timeout_s: float, connect_timeout_s: float) -> str:
        """A clear reason for a transport failure during this request."""
        where = f"after {self.chunk_count} chunks"
        reasons = {
            "read timeout": f"read timeout: the server sent nothing for {timeout_s:g} s {where} (server hang?)",
            "connect timeout": f"connect timeout: no connection within {connect_timeout_s:g} s",
            "connect": f"cannot connect to the server: {exc}",
            "closed": f"connection closed mid-stream {where} ({exc})",
        }
        return reasons.get(exc.kind, f"not a valid HTTP response {where}: {exc}")
