"""How the devices of a multi-device layout talk to each other: the link matrix of `nvidia-smi topo -m` (NVIDIA) and
`npu-smi info -t topo` (Ascend), summarised for the devices a run uses.

Both tools print a matrix: a header of device columns (`GPU0 GPU1 … NIC0 …`, `NPU0 …`), then one row per device
with the link to every column (`X` for itself). Link codes: `NV#` a bonded set of # NVLinks, `HCCS` Huawei's
cache-coherent links, `PIX`/`PXB` through PCIe switches, `PHB`/`NODE` through a CPU's PCIe host bridge(s), `SYS`
across NUMA nodes. The summary names the kind with its code, e.g. "NVLink (NV12)", "HCCS", "PCIe (PHB)", or every
kind with its count when the pairs differ. Tensor-parallel latency depends on it, so it is part of the machine
fingerprint of a multi-device run.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence

from specgate.registry import backend_spec

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def link_kind(code: str) -> str:
    """The kind of one link code: NVLink, HCCS, PCIe, or the code itself when unknown."""
    if re.fullmatch(r"NV\d+", code):
        return "NVLink"
    if code == "HCCS":
        return "HCCS"
    if code in ("PIX", "PXB", "PHB", "NODE", "SYS"):
        return "PCIe"
    return code


def parse_topology(text: str, prefix: str = "GPU") -> dict[tuple[int, int], str]:
    """(device, device) → link code for every pair of `prefix` devices in a topology matrix (device numbers as the
    tool prints them). Raises ValueError when the text holds no such matrix."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    device = re.compile(rf"^{prefix}(\d+)$")
    column = re.compile(r"^[A-Z]+\d+$")
    header: list[str] | None = None
    links: dict[tuple[int, int], str] = {}
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        if header is None and device.match(tokens[0]) and len(tokens) > 1 and device.match(tokens[1]):
            header = [t for t in _leading(tokens, column)]
            continue
        row = device.match(tokens[0])
        if header is None or row is None:
            continue
        for name, code in zip(header, tokens[1 : 1 + len(header)], strict=False):
            col = device.match(name)
            if col is not None and col.group(1) != row.group(1):
                links[(int(row.group(1)), int(col.group(1)))] = code
    if not links:
        raise ValueError(f"no {prefix} topology matrix found")
    return links


def _leading(tokens: Sequence[str], column: re.Pattern[str]) -> list[str]:
    names = []
    for token in tokens:
        if not column.match(token):
            break
        names.append(token)
    return names


def summarize_links(links: Mapping[tuple[int, int], str], devices: Sequence[int] | None = None) -> str:
    """The links among `devices` (default: all), e.g. "NVLink (NV12)", or "NVLink (NV18) ×24, PCIe (SYS) ×4"."""
    chosen = set(devices) if devices is not None else {d for pair in links for d in pair}
    codes = Counter(code for (a, b), code in links.items() if a < b and a in chosen and b in chosen)
    if not codes:
        return ""
    named = [
        (f"{link_kind(code)} ({code})" if link_kind(code) not in (code, "HCCS") else code, n)
        for code, n in codes.most_common()
    ]
    return named[0][0] if len(named) == 1 else ", ".join(f"{name} ×{n}" for name, n in named)


def visible_devices(backend: str, count: int) -> list[int] | None:
    """The device numbers a run of `count` devices uses: the first of `CUDA_VISIBLE_DEVICES` (or
    `ASCEND_RT_VISIBLE_DEVICES`), else 0 … count−1; None when the variable names devices by UUID."""
    variable = backend_spec(backend).visible_devices
    listed = os.environ.get(variable, "").strip() if variable else ""
    if not listed:
        return list(range(count))
    parts = [p.strip() for p in listed.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        return None
    return [int(p) for p in parts[:count]]


def probe_interconnect(backend: str, devices: int) -> str:
    """The interconnect of the `devices` first visible devices, read from the vendor's tool; "" for one device,
    "host memory" on CPU, "unknown (…)" when the tool cannot tell."""
    if devices <= 1:
        return ""
    spec = backend_spec(backend)
    if spec.host:
        return "host memory (one CPU host)"
    command = spec.topology
    if not command:
        return f"unknown (no topology tool for backend {backend!r})"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
        links = parse_topology(done.stdout, spec.device_label)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return f"unknown ({' '.join(command)}: {type(exc).__name__})"
    return summarize_links(links, visible_devices(backend, devices)) or "unknown (the devices are not in the matrix)"
