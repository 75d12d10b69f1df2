"""Load for a served endpoint: the settings of a pair's `speculation.options`, and when requests are due.

Settings (`speculation.options` of a pair run with the openai engine; only `endpoints` is required)::

    endpoints:          {ar: "http://127.0.0.1:8001", spec: "http://127.0.0.1:8002"}  # arm → server root, reference
                        # arm first; one server per arm (speculation off / on). Loopback hosts only, unless listed in
    allowed_hosts:      []            # host names or addresses besides loopback that may be sent load
    model:              <target>      # the served model name (default: the pair's `target`)
    api:                chat          # chat (/v1/chat/completions, messages) or completions (/v1/completions)
    api_key_env:        null          # name of the environment variable holding the API key (sent as a Bearer token)
    concurrency:        1             # requests in flight at most
    workers:            1             # processes sending the load (each its own event loop and share of the
                        # slots); `auto`: one per 32 slots, at most one per core (specgate.engines.openai.workers)
    request_rate:       null          # requests per second, Poisson arrivals (seeded); null: all at once
    seed:               0             # seed of the arrival times (the same for every arm of a repetition)
    timeout_s:          60            # read timeout: longest silence of the server within a response
    connect_timeout_s:  5
    duration_s:         600           # a run's time bound: requests unsent or unfinished by then fail
    max_requests:       1000          # a run's count bound: a run of more prompts is refused
    metrics_path:       /metrics      # Prometheus text endpoint for acceptance counters; null: do not scrape
    metrics_urls:       {}            # arm → the /metrics URLs of the replicas behind its endpoint (a router), read
                        # apart and summed (specgate.engines.openai.replicas); default: <endpoint><metrics_path>
    token_ids:          true          # ask for token ids per chunk (vLLM's `return_token_ids`)
    continuous_usage:   true          # ask for usage in every chunk (vLLM's `continuous_usage_stats`)
    extra_body:         {}            # merged last into every request body
    goodput_slo:        {}            # ttft_ms, tpot_ms, e2el_ms; default: the SLA's P99 TTFT and 1000 / decode rate

Arrivals: with a rate, the i-th request is due `offsets[i]` seconds after the run starts, where the gaps are
exponential with mean 1 / rate from `numpy.random.default_rng([seed, repetition + 1])` — the same schedule for
every arm of a repetition, a new one per repetition. A due request then waits for a free slot (`concurrency`);
`specgate.engines.openai.schedule` sends them and records how closely it kept the schedule.
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from specgate.config import SlaLimits, did_you_mean
from specgate.engines.openai.metrics import GoodputSlo
from specgate.errors import ConfigError

APIS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
OPTION_KEYS = (
    "endpoints",
    "allowed_hosts",
    "model",
    "api",
    "api_key_env",
    "concurrency",
    "workers",
    "request_rate",
    "seed",
    "timeout_s",
    "connect_timeout_s",
    "duration_s",
    "max_requests",
    "metrics_path",
    "metrics_urls",
    "token_ids",
    "continuous_usage",
    "extra_body",
    "goodput_slo",
)


@dataclass(frozen=True, slots=True)
class ServedSettings:
    """The validated `speculation.options` of a served pair (see the module docstring)."""

    endpoints: Mapping[str, str]
    model: str
    api: str = "chat"
    api_key_env: str | None = None
    concurrency: int = 1
    workers: int = 1
    request_rate: float | None = None
    seed: int = 0
    timeout_s: float = 60.0
    connect_timeout_s: float = 5.0
    duration_s: float = 600.0
    max_requests: int = 1000
    metrics_path: str | None = "/metrics"
    metrics_urls: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    token_ids: bool = True
    continuous_usage: bool = True
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    goodput_slo: GoodputSlo = field(default_factory=GoodputSlo)

    @property
    def api_path(self) -> str:
        """The streaming route of the chosen API."""
        return APIS[self.api]


class _Options:
    """Typed access to one pair's options; every problem names the pair and the key."""

    def __init__(self, pair: str, raw: Mapping[str, Any], prefix: str = "") -> None:
        self.pair = pair
        self.raw = raw
        self.prefix = prefix

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"pair {self.pair!r}: speculation.options.{self.prefix}{key}: {message}")

    def number(self, key: str, default: float | None, *, integer: bool = False, positive: bool = True) -> Any:
        value = self.raw.get(key, default)
        if value is None:
            return None
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
            raise self.fail(key, f"expected {'an integer' if integer else 'a number'}, got {value!r}")
        if positive and value <= 0:
            raise self.fail(key, f"must be > 0, got {value!r}")
        return value if integer else float(value)

    def text(self, key: str, default: str | None) -> str | None:
        value = self.raw.get(key, default)
        if value is not None and (not isinstance(value, str) or not value):
            raise self.fail(key, f"expected a non-empty string, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {value!r}")
        return value

    def mapping(self, key: str) -> Mapping[str, Any]:
        value = self.raw.get(key, {})
        if not isinstance(value, Mapping):
            raise self.fail(key, f"expected a mapping, got {value!r}")
        return value


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _endpoint(options: _Options, arm: str, url: Any, allowed: Sequence[str], key: str | None = None) -> str:
    key = key or f"endpoints.{arm}"
    if not isinstance(url, str):
        raise options.fail(key, f"expected a URL such as 'http://127.0.0.1:8000', got {url!r}")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise options.fail(key, f"{url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not host:
        raise options.fail(key, f"{url!r}: give an http:// or https:// URL with a host, e.g. 'http://127.0.0.1:8000'")
    if parts.username or parts.password:
        raise options.fail(
            key, "credentials in the URL are not allowed; put the key in an env var named by api_key_env"
        )
    if parts.query or parts.fragment or parts.path.rstrip("/").endswith("/v1"):
        raise options.fail(key, f"{url!r}: give the server root (e.g. 'http://127.0.0.1:8000'), without /v1 or a query")
    if not _is_loopback(host) and host not in allowed:
        raise options.fail(
            key,
            f"host {host!r} is not loopback; load goes to 127.0.0.0/8, ::1 or localhost unless the host is listed "
            "in speculation.options.allowed_hosts",
        )
    return url.rstrip("/")


def _endpoints(options: _Options) -> dict[str, str]:
    raw = options.raw.get("endpoints")
    if not isinstance(raw, Mapping) or not raw:
        raise options.fail(
            "endpoints",
            "required: a mapping of arm to server root, reference arm first, e.g. "
            "{ar: 'http://127.0.0.1:8001', spec: 'http://127.0.0.1:8002'}",
        )
    allowed = options.raw.get("allowed_hosts", [])
    if not isinstance(allowed, list) or not all(isinstance(h, str) and h for h in allowed):
        raise options.fail("allowed_hosts", f"expected a list of host names, got {allowed!r}")
    return {str(arm): _endpoint(options, str(arm), url, allowed) for arm, url in raw.items()}


def _metrics_urls(options: _Options) -> dict[str, tuple[str, ...]]:
    raw = options.mapping("metrics_urls")
    allowed = options.raw.get("allowed_hosts", [])
    found = {}
    for arm, urls in raw.items():
        listed = [urls] if isinstance(urls, str) else urls
        if not isinstance(listed, list) or not listed:
            raise options.fail(f"metrics_urls.{arm}", f"expected a list of /metrics URLs, got {urls!r}")
        checked = []
        for url in listed:
            key = f"metrics_urls.{arm}"
            root = _endpoint(options, str(arm), url, allowed if isinstance(allowed, list) else [], key)
            if not urlsplit(root).path.strip("/"):
                raise options.fail(key, f"{url!r}: give the whole URL, e.g. 'http://10.0.0.11:8000/metrics'")
            checked.append(root)
        found[str(arm)] = tuple(checked)
    return found


def _goodput_slo(options: _Options, sla: SlaLimits) -> GoodputSlo:
    sub = _Options(options.pair, options.mapping("goodput_slo"), "goodput_slo.")
    allowed = ("ttft_ms", "tpot_ms", "e2el_ms")
    for key in sub.raw:
        if key not in allowed:
            raise sub.fail(str(key), f"unknown key.{did_you_mean(str(key), allowed)} Allowed: {', '.join(allowed)}")
    default_tpot = 1000.0 / sla.min_decode_tokens_per_s if sla.min_decode_tokens_per_s > 0 else None
    return GoodputSlo(
        ttft_ms=sub.number("ttft_ms", sla.p99_ttft_ms),
        tpot_ms=sub.number("tpot_ms", default_tpot),
        e2el_ms=sub.number("e2el_ms", None),
    )


def _workers(options: _Options, concurrency: int) -> int:
    if options.raw.get("workers") == "auto":
        from specgate.engines.openai.workers import auto_workers

        return auto_workers(concurrency)
    if isinstance(options.raw.get("workers"), str):
        raise options.fail("workers", f"expected a whole number ≥ 1 or 'auto', got {options.raw['workers']!r}")
    workers: int = options.number("workers", 1, integer=True)
    if workers > concurrency:
        raise options.fail(
            "workers", f"{workers} processes for concurrency {concurrency}: each needs a slot; give ≤ {concurrency}"
        )
    return workers


def parse_settings(pair: str, raw: Mapping[str, Any], target: str, sla: SlaLimits) -> ServedSettings:
    """Validate a pair's `speculation.options` (`raw`) for the openai engine; a `ConfigError` names the pair and key.
    `target` is the pair's target, the default served model name; `sla` gives the default goodput SLOs."""
    options = _Options(pair, {k: v for k, v in raw.items() if k != "endpoint"})
    for key in options.raw:
        if key not in OPTION_KEYS:
            raise options.fail(
                str(key), f"unknown key.{did_you_mean(str(key), OPTION_KEYS)} Allowed: {', '.join(OPTION_KEYS)}"
            )
    api = options.text("api", "chat")
    if api not in APIS:
        raise options.fail(
            "api", f"{api!r} is not allowed.{did_you_mean(str(api), list(APIS))} Allowed: chat, completions"
        )
    concurrency = options.number("concurrency", 1, integer=True)
    metrics_path = options.raw.get("metrics_path", "/metrics")
    if metrics_path is not None and (not isinstance(metrics_path, str) or not metrics_path.startswith("/")):
        raise options.fail("metrics_path", f"expected a path starting with '/' or null, got {metrics_path!r}")
    return ServedSettings(
        endpoints=_endpoints(options),
        model=options.text("model", target) or target,
        api=str(api),
        api_key_env=options.text("api_key_env", None),
        concurrency=concurrency,
        workers=_workers(options, concurrency),
        request_rate=options.number("request_rate", None),
        seed=options.number("seed", 0, integer=True, positive=False),
        timeout_s=options.number("timeout_s", 60.0),
        connect_timeout_s=options.number("connect_timeout_s", 5.0),
        duration_s=options.number("duration_s", 600.0),
        max_requests=options.number("max_requests", 1000, integer=True),
        metrics_path=metrics_path,
        metrics_urls=_metrics_urls(options),
        token_ids=options.flag("token_ids", True),
        continuous_usage=options.flag("continuous_usage", True),
        extra_body=dict(options.mapping("extra_body")),
        goodput_slo=_goodput_slo(options, sla),
    )


def arm_endpoint(pair: str, variant: str, options: Mapping[str, Any], settings: ServedSettings) -> str:
    """The server root an arm is sent to: its own `endpoint` option, else its pair's `endpoints[<variant>]` (a
    reference arm `ref-spec` is the variant `spec` of the reference pair)."""
    own = options.get("endpoint")
    if own is not None:
        allowed = options.get("allowed_hosts", [])
        return _endpoint(_Options(pair, options), variant, own, allowed if isinstance(allowed, list) else [])
    url = settings.endpoints.get(variant)
    if not isinstance(url, str):
        raise ConfigError(
            f"pair {pair!r}: arm {variant!r} has no endpoint; add it to speculation.options.endpoints "
            f"(known: {', '.join(settings.endpoints) or 'none'}) or give the arm an `endpoint` option"
        )
    return url.rstrip("/")


def read_api_key(pair: str, settings: ServedSettings) -> str | None:
    """The API key from the environment variable `api_key_env` names (None without one); unset is a `ConfigError`."""
    if settings.api_key_env is None:
        return None
    key = os.environ.get(settings.api_key_env, "")
    if not key:
        raise ConfigError(
            f"pair {pair!r}: speculation.options.api_key_env: the environment variable {settings.api_key_env!r} "
            "is not set or empty; export it with the server's API key"
        )
    return key
