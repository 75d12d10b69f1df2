"""Parsers of the telemetry tools' text output: nvidia-smi's CSV and npu-smi's `info` table. Pure functions, tested
on recorded real outputs in tests/data/telemetry/."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

NVIDIA_SMI_QUERY = ("power.draw", "utilization.gpu", "memory.used")


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One row of `nvidia-smi --query-gpu` output. Missing or `[N/A]` fields are None."""

    power_w: float | None
    utilization_pct: float | None
    memory_used_mib: float | None
    timestamp: str | None = None
    index: int | None = None


@dataclass(frozen=True, slots=True)
class NpuSample:
    """One chip in the `npu-smi info` table. Memory figures are in the table's MB (which are MiB)."""

    npu_id: int
    chip_id: int
    name: str
    health: str
    bus_id: str
    power_w: float | None
    temp_c: float | None
    aicore_pct: float | None
    memory_used_mb: int | None
    memory_total_mb: int | None
    hbm_used_mb: int | None
    hbm_total_mb: int | None


def _number(cell: str | None) -> float | None:
    """A numeric cell with an optional unit (`72.45 W`, `0 %`, `17 MiB`); `[N/A]`, `-`, `NA` and the like → None."""
    if cell is None:
        return None
    match = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*(?:W|%|MiB|MB|C)?\s*", cell)
    return float(match.group(1)) if match else None


def parse_nvidia_smi_csv(text: str, columns: Sequence[str] = NVIDIA_SMI_QUERY) -> list[GpuSample]:
    """Parse `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` output, one sample per line.

    A header line (`power.draw [W], ...`) names the columns; without one, `columns` gives the queried properties
    in order. Units (`W`, `%`, `MiB`) are stripped. Raises `ValueError` on a line with the wrong number of
    fields, such as an NVML error message.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    names = list(columns)
    if lines:
        first = [cell.split(" [")[0].strip() for cell in lines[0].split(",")]
        if any(
            cell in ("timestamp", "index", "name") or cell.startswith(("power.", "utilization.", "memory."))
            for cell in first
        ):
            names, lines = first, lines[1:]
    samples = []
    for line in lines:
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(names):
            raise ValueError(f"nvidia-smi line has {len(cells)} fields, expected {len(names)} ({names}): {line!r}")
        row = dict(zip(names, cells, strict=True))
        index = _number(row.get("index"))
        samples.append(
            GpuSample(
                power_w=_number(row.get("power.draw")),
                utilization_pct=_number(row.get("utilization.gpu")),
                memory_used_mib=_number(row.get("memory.used")),
                timestamp=row.get("timestamp"),
                index=None if index is None else int(index),
            )
        )
    return samples


_BUS_ID = re.compile(r"[0-9A-Fa-fx]{4}:[0-9A-Fa-fx]{2}:[0-9A-Fa-fx]{2}\.[0-9A-Fa-f]")
_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")


def parse_npu_smi_info(text: str) -> list[NpuSample]:
    """Parse the device table printed by `npu-smi info` (Atlas A2 910B and A3 layouts).

    Each chip is two table rows: `| NPU Name | Health | Power(W) Temp(C) Hugepages |` and
    `| Chip [Phy-ID] | Bus-Id | AICore(%) Memory-Usage(MB) HBM-Usage(MB) |`. The header decides which
    `used / total` pair is Memory and which is HBM. The process table that follows is ignored.
    """
    pair_kinds = ["memory", "hbm"]
    pending: tuple[int, str, str, float | None, float | None] | None = None
    samples = []
    for line in text.splitlines():
        if "Memory-Usage" in line or "HBM-Usage" in line:
            found = [(line.find(label), kind) for label, kind in (("Memory-Usage", "memory"), ("HBM-Usage", "hbm"))]
            pair_kinds = [kind for position, kind in sorted(found) if position >= 0]
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.match(r"\d+(\s|$)", cells[0]):
            continue
        head = cells[0].split()
        values = cells[2].split()
        if not _BUS_ID.fullmatch(cells[1]):
            power = _number(values[0]) if values else None
            temp = _number(values[1]) if len(values) > 1 else None
            pending = (int(head[0]), " ".join(head[1:]), cells[1], power, temp)
            continue
        if pending is None:
            continue
        npu_id, name, health, power, temp = pending
        pending = None
        pairs = dict(zip(pair_kinds, _PAIR.findall(cells[2]), strict=False))
        memory, hbm = pairs.get("memory"), pairs.get("hbm")
        samples.append(
            NpuSample(
                npu_id=npu_id,
                chip_id=int(head[0]),
                name=name,
                health=health,
                bus_id=cells[1],
                power_w=power,
                temp_c=temp,
                aicore_pct=_number(values[0]) if values else None,
                memory_used_mb=int(memory[0]) if memory else None,
                memory_total_mb=int(memory[1]) if memory else None,
                hbm_used_mb=int(hbm[0]) if hbm else None,
                hbm_total_mb=int(hbm[1]) if hbm else None,
            )
        )
    return samples


def parse_npu_smi_power(text: str) -> float | None:
    """The first power reading in `npu-smi info -t power -i N` output (`NPU Real-time Power(W) : 94.6`)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and "power" in key.lower() and "(W)" in key:
            reading = _number(value)
            if reading is not None:
                return reading
    return None
