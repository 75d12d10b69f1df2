"""Hardware: device backends (CPU, CUDA, Ascend NPU) behind one protocol, telemetry sampling, the machine
fingerprint, and the cost, energy and roofline arithmetic.

- `backends`: `get_backend(backend, device)` returns a `HardwareBackend` (check_available, synchronize,
  peak memory); `specgate.registry.backend_names()` names them.
- `telemetry`: `TelemetrySampler(source)` samples power, memory and utilization while an arm runs;
  `SOURCES` (`specgate.registry.TELEMETRY_SOURCES`).
- `economics`: cost and energy per 1k tokens, the batch-1 decode roofline, relative savings.
- `energy`, `roofline`: the per-arm cost/energy report and the decode roofline of a measurement.

The profiles themselves are the YAML files in the repository's `hardware/` folder. Nothing here imports torch at
import time.
"""
