"""The openai engine: any OpenAI-compatible server (vLLM, SGLang, MindIE, …), streamed, under load.

Arms are servers: `speculation.options.endpoints` maps each arm to a server root (speculation off / on), the
reference arm first; the other settings are in `specgate.engines.openai.load`. Each request is a streaming
`POST /v1/chat/completions` (or `/v1/completions`) with `temperature: 0`, `max_tokens` from the workload and
`stream_options: {include_usage: true}` (plus vLLM's `continuous_usage_stats` and `return_token_ids` unless switched
off), sent on keep-alive connections by `specgate.engines.openai.wire`; no retries (a retry hides latency), no
proxies from the environment. `/v1/models`, `/version` and `/metrics` are read with httpx (untimed).

Timing: every request body is encoded before the clock starts, and one connection per slot is opened and warmed
(one `GET /v1/models` round trip) before it, so no measured request pays for connection set-up. `submit_s` is
`time.perf_counter()` just before the request's bytes are written to its connection: TTFT and E2EL start when the
request leaves, never while it waits for a slot. Each SSE event that carries tokens is one chunk, stamped when its
bytes are read from the socket; events without tokens (the chat role event, the usage event) are not chunks. The
scheduler (`specgate.engines.openai.schedule`) records, per run, how faithfully the client kept its schedule:
`ServedRun.client` holds the offered and achieved rate, the client's send lag (send time − when due or when a
slot freed) and the time requests queued for a slot, apart.

Tokens per chunk, most exact first, the run says which (`ServedRun.token_count_source`): `token_ids` (the ids the
server returns: exact, and the output ids for the drift check), `usage per chunk` (differences of cumulative
usage), `chunks` (one token per chunk that carries text; with a final `usage` the last chunk takes the difference
so the total is the server's count).

Failures are recorded in the request's trace, never dropped: an HTTP status other than 200, a chunk that is not
JSON or has no choices, an `error` event, a stream that ends before `data: [DONE]`, a connection closed mid-stream,
a read timeout (`timeout_s` of silence), a connect failure, the run's time bound. A run in which no request
succeeded raises `MeasurementError` with the reasons (there is nothing to measure, and a failed warm-up must not
vanish). The API key is read from the environment variable named by `api_key_env`, sent only as a header, and
replaced by `***` in every message.

Acceptance: `/metrics` is read before and after each run of an arm (each replica's, behind a router:
`specgate.engines.openai.replicas`), and the differences of vLLM's spec-decode counters become `ArmRun.counters`;
without them the counters are None and the run's note says "not exposed by this server". `served_runs` keeps one
`ServedRun` per call of `run`: goodput, errors by reason, the server's own latency means (and each replica's), the
note, the client's own timing.

One event loop sends a run by default (`workers: 1`): at well under a millisecond of CPU per streamed request it
sustains several hundred requests per second on one core (tests/benchmarks/test_load_precision.py prints the
figures). Past that, `workers: N` (or `auto`) splits the run among worker processes started once, outside every
measured window, that start together on one clock (`specgate.engines.openai.workers`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
from collections import Counter
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from specgate.config import HardwareProfile
from specgate.engines.base import ArmRun, LoadShape, Prompt, arrival_offsets
from specgate.engines.openai.client import Share, merge_results, run_share, split_share
from specgate.engines.openai.load import ServedSettings, arm_endpoint, parse_settings, read_api_key
from specgate.engines.openai.metrics import NOT_EXPOSED, Goodput, ServerView, measure_goodput
from specgate.engines.openai.replicas import metrics_urls, replica_deltas, scrape_all
from specgate.engines.openai.schedule import ClientTiming, summarize_dispatch
from specgate.engines.openai.sse import ResponseStream
from specgate.engines.openai.wire import Origin, encode_request
from specgate.engines.openai.workers import Workers
from specgate.errors import ConfigError, EngineUnavailableError, MeasurementError
from specgate.hardware.backends import HardwareBackend
from specgate.plan import Arm

T = TypeVar("T")
INSTALL_HINT = "Install it: pip install httpx prometheus-client"


@dataclasses.dataclass(frozen=True, slots=True)
class ServedRun:
    """One call of `OpenAIEngine.run`: load, outcome, what the server itself counted, and how faithfully the client
    kept its schedule (`client`)."""

    arm: str
    repetition: int
    endpoint: str
    n_requests: int
    n_failed: int
    wall_s: float
    concurrency: int
    request_rate: float | None
    goodput: Goodput
    token_count_source: str
    errors: Mapping[str, int]
    server: ServerView | None
    note: str | None
    client: ClientTiming
    replicas: Mapping[str, ServerView] = dataclasses.field(default_factory=dict)  # per /metrics URL, when several


class _Secret:
    """A value that never shows itself in repr, str or logs."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__


def _run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to the end on a fresh event loop (in a worker thread when this thread already runs one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _import_httpx() -> Any:
    try:
        import httpx
    except ImportError as exc:
        raise EngineUnavailableError(f"the openai engine needs httpx ({exc}). {INSTALL_HINT}") from exc
    return httpx


class OpenAIEngine:
    """Measures OpenAI-compatible servers, one per arm, with streaming requests under load (see the module doc)."""

    name = "openai"
    per_request = False

    def __init__(self, base_dir: Path | None = None) -> None:
        self._base_dir = base_dir
        self._settings: dict[str, ServedSettings] = {}
        self._arms: dict[str, tuple[Arm, ServedSettings, str]] = {}
        self._key: _Secret | None = None
        self._server_versions: dict[str, str] = {}
        self.served_runs: list[ServedRun] = []
        self.notes: list[str] = []
        self._workers: Workers | None = None

    def __repr__(self) -> str:
        if not self._arms:
            return "OpenAIEngine(unloaded)"
        s = self.settings
        return f"OpenAIEngine(endpoints={self.endpoints()}, api={s.api!r}, model={s.model!r})"

    __str__ = __repr__

    def endpoints(self) -> dict[str, str]:
        """Each arm's endpoint URL (`ServesFromElsewhere`: servers the gate did not start)."""
        return {arm: url for arm, (_, _, url) in self._arms.items()}

    @property
    def settings(self) -> ServedSettings:
        """The validated options of the first loaded pair (the candidate)."""
        if not self._settings:
            raise MeasurementError("engine used before load()")
        return next(iter(self._settings.values()))

    def _arm(self, arm: str) -> tuple[Arm, ServedSettings, str]:
        found = self._arms.get(arm)
        if found is None:
            if not self._arms:
                raise MeasurementError("engine used before load()")
            raise MeasurementError(f"unknown arm {arm!r}; the loaded arms are {', '.join(self._arms)}")
        return found

    def load(self, arms: Sequence[Arm], hardware: HardwareProfile, backend: HardwareBackend | None = None) -> None:
        """Validate each pair's options, read the API key, and check that every arm's endpoint serves the model.

        An arm's endpoint is its `endpoint` option, or its pair's `endpoints[<arm>]` (a reference arm `ref-spec`
        takes the reference pair's `spec` endpoint)."""
        _import_httpx()
        for arm in arms:
            if arm.pair not in self._settings:
                self._settings[arm.pair] = self._load_settings(arm, hardware)
            settings = self._settings[arm.pair]
            url = arm_endpoint(arm.pair, arm.variant, arm.engine_options, settings)
            self._arms[arm.name] = (arm, settings, url)
        for name, (arm, settings, url) in self._arms.items():
            self._probe(name, url, settings, arm.pair)

    def _load_settings(self, arm: Arm, hardware: HardwareProfile) -> ServedSettings:
        settings = parse_settings(arm.pair, arm.engine_options, arm.target, hardware.sla)
        key = read_api_key(arm.pair, settings)
        if key is not None:
            self._key = _Secret(key)
        return settings

    def models(self, arm: str) -> Mapping[str, Any]:
        """Served models have no local files to hash."""
        return {}

    def cost_ratio(self, arm: str) -> float | None:
        spec = self._arm(arm)[0].speculation
        return 0.0 if spec is not None and spec.method == "prompt_lookup" else None

    def _client_args(self, s: ServedSettings) -> dict[str, Any]:
        httpx = _import_httpx()
        headers = {} if self._key is None else {"Authorization": f"Bearer {self._key.value}"}
        return {
            "headers": headers,
            "timeout": httpx.Timeout(s.timeout_s, connect=s.connect_timeout_s, pool=None),
            "limits": httpx.Limits(max_connections=s.concurrency + 1, max_keepalive_connections=s.concurrency + 1),
            "trust_env": False,  # never route loopback load through a proxy from the environment
            "follow_redirects": False,
        }

    def _probe(self, arm: str, url: str, settings: ServedSettings, pair: str) -> None:
        """GET /v1/models: the server answers and serves the model (a server without the route is let through)."""
        httpx = _import_httpx()
        where = f"pair {pair!r}: the {arm!r} endpoint {url}"
        with httpx.Client(**self._client_args(settings)) as client:
            try:
                response = client.get(f"{url}/v1/models")
                version = client.get(f"{url}/version")
            except httpx.HTTPError as exc:
                raise EngineUnavailableError(
                    self.redact(
                        f"{where} does not answer ({type(exc).__name__}: {exc}). Start the server, or fix "
                        f"speculation.options.endpoints.{arm}"
                    )
                ) from None
        if response.status_code in (401, 403):
            raise ConfigError(f"{where} refused the API key (HTTP {response.status_code}); check api_key_env")
        if version.status_code == 200:
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                self._server_versions[arm] = str(version.json().get("version", ""))
        if response.status_code != 200:
            return
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            served = [str(m.get("id")) for m in response.json().get("data", [])]
            if served and settings.model not in served:
                raise ConfigError(
                    f"{where} serves {served}, not {settings.model!r}; set speculation.options.model "
                    "(or the pair's target) to the served model name"
                )

    def redact(self, text: str) -> str:
        """`text` with the API key replaced by ***."""
        return text if self._key is None else text.replace(self._key.value, "***")

    def run(self, prompts: Sequence[Prompt], arm: str, *, repetition: int, load: LoadShape | None = None) -> ArmRun:
        """Send every prompt to the arm's server under `load` (the workload's load shape) or, without one, the
        pair's options; one trace per prompt, failures kept."""
        settings = self._arm(arm)[1]
        if len(prompts) > settings.max_requests:
            raise MeasurementError(
                f"a run of {len(prompts)} requests exceeds speculation.options.max_requests={settings.max_requests}; "
                "raise it or set the workload's limit"
            )
        run, record = _run_coroutine(self._run_arm(prompts, arm, repetition, load))
        self.served_runs.append(record)
        if record.note is not None and record.note not in self.notes:
            self.notes.append(record.note)
        if run.traces and record.n_failed == record.n_requests:
            reasons = "; ".join(f"{n}× {reason}" for reason, n in record.errors.items())
            raise MeasurementError(
                f"all {record.n_requests} requests to the {arm!r} endpoint {record.endpoint} failed: {reasons}"
            )
        return run

    async def _run_arm(
        self, prompts: Sequence[Prompt], arm: str, repetition: int, load: LoadShape | None
    ) -> tuple[ArmRun, ServedRun]:
        httpx = _import_httpx()
        configured, s, root = self._arm(arm)
        if load is not None:  # the workload's load shape overrides the pair's options
            s = dataclasses.replace(s, concurrency=load.concurrency, request_rate=load.request_rate)
        batching = configured.optimisation.batching
        if batching is not None:  # a batching arm is its endpoint under its own concurrency
            s = dataclasses.replace(s, concurrency=batching.concurrency, request_rate=None)
        origin, headers = Origin.of(root), self._headers()
        share = Share(  # every request body encoded before the clock starts
            root=root,
            indices=tuple(range(len(prompts))),
            prompts=tuple(prompts),
            requests=tuple(self._request(origin, s, p, headers) for p in prompts),
            offsets=arrival_offsets(len(prompts), s.request_rate, s.seed, repetition),
            slots=s.concurrency,
            warm_request=encode_request("GET", origin, "/v1/models", headers),
            timeout_s=s.timeout_s,
            connect_timeout_s=s.connect_timeout_s,
            duration_s=s.duration_s,
        )
        shares = split_share(share, s.workers) if s.workers > 1 else [share]
        urls = metrics_urls(s, configured.variant, root)
        async with httpx.AsyncClient(**self._client_args(s)) as client:
            before, note = await scrape_all(client, urls, self.redact)
            if len(shares) == 1:
                results = [await run_share(share)]
            else:
                pool = self._worker_pool(len(shares))
                results = await asyncio.get_running_loop().run_in_executor(None, pool.run, shares)
            wall_s = max(r.end_s for r in results) - min(r.start_s for r in results)
            after, after_note = await scrape_all(client, urls, self.redact) if before is not None else (None, None)
        streams, dispatch = merge_results(len(prompts), results)
        for stream in streams:
            if stream.error is not None:
                stream.error = self.redact(stream.error)
        traces = tuple(
            stream.trace(arm, repetition, error=outcome)
            for stream, outcome in zip(streams, dispatch.outcomes, strict=True)
        )
        server, replicas = (None, {}) if before is None or after is None else replica_deltas(before, after)
        if server is not None and server.counters is None:
            note = f"{arm}: {NOT_EXPOSED} ({', '.join(urls)})"
        run = ArmRun(arm, traces, wall_s, counters=None if server is None else server.counters)
        client_timing = summarize_dispatch(
            dispatch,
            s.request_rate,
            warm_connections=sum(r.warmed for r in results),
            connections_opened=sum(r.opened for r in results),
            processes=len(results),
        )
        record = self._record(run, repetition, root, server, note or after_note, streams, s, client_timing)
        return run, dataclasses.replace(record, replicas=replicas)

    def _worker_pool(self, count: int) -> Workers:
        """The load worker processes, started once (outside any measured window) and reused."""
        if self._workers is not None and (self._workers.broken or self._workers.count < count):
            self._workers.close()
            self._workers = None
        if self._workers is None:
            self._workers = Workers(count)
        return self._workers

    def _record(
        self,
        run: ArmRun,
        repetition: int,
        root: str,
        server: ServerView | None,
        note: str | None,
        streams: Sequence[ResponseStream],
        s: ServedSettings,
        client: ClientTiming,
    ) -> ServedRun:
        errors = Counter(self.redact(t.error) for t in run.traces if t.error is not None)
        failed = sum(1 for t in run.traces if not t.ok)
        sources = sorted({stream.token_source for stream in streams if stream.chunk_count})
        return ServedRun(
            arm=run.arm,
            repetition=repetition,
            endpoint=root,
            n_requests=len(run.traces),
            n_failed=failed,
            wall_s=run.wall_s,
            concurrency=s.concurrency,
            request_rate=s.request_rate,
            goodput=measure_goodput(run, s.goodput_slo),
            token_count_source=", ".join(sources) or "none",
            errors=dict(errors),
            server=server,
            note=note,
            client=client,
        )

    def _headers(self) -> dict[str, str]:
        headers = {"User-Agent": "specgate", "Accept": "text/event-stream", "Content-Type": "application/json"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key.value}"
        return headers

    def _request(self, origin: Origin, s: ServedSettings, prompt: Prompt, headers: Mapping[str, str]) -> bytes:
        body = json.dumps(self._body(prompt, s), ensure_ascii=False).encode()
        return encode_request("POST", origin, s.api_path, headers, body)

    def _body(self, prompt: Prompt, s: ServedSettings) -> dict[str, Any]:
        options: dict[str, Any] = {"include_usage": True}
        if s.continuous_usage:
            options["continuous_usage_stats"] = True
        body: dict[str, Any] = {
            "model": s.model,
            "max_tokens": prompt.max_new_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": options,
        }
        if s.token_ids:
            body["return_token_ids"] = True
        if s.api == "chat":
            system = [] if prompt.system is None else [{"role": "system", "content": prompt.system}]
            body["messages"] = [*system, {"role": "user", "content": prompt.text}]
        else:
            body["prompt"] = prompt.text if prompt.system is None else f"{prompt.system}\n\n{prompt.text}"
        body.update(s.extra_body)
        return body

    def versions(self) -> Mapping[str, str]:
        """httpx's version, the API, each arm's endpoint and, where `/version` answered, the server's version."""
        httpx = _import_httpx()
        found = {"engine": "openai", "httpx": str(httpx.__version__)}
        if self._settings:
            found["api"] = self.settings.api
            for arm, (_, _, url) in self._arms.items():
                found[f"endpoint.{arm}"] = url
                if self._server_versions.get(arm):
                    found[f"server.{arm}"] = self._server_versions[arm]
        return found

    def close(self) -> None:
        """Stop the load worker processes; nothing else stays open between runs (each run opens and closes its own
        connections and event loop)."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None
