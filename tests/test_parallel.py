"""Models larger than one device: a pair's (or profile's) parallel layout validated at configure time, passed to vLLM
as `vllm.LLM` arguments and as server flags, the interconnect read from recorded `nvidia-smi topo -m` and
`npu-smi info -t topo` outputs, and the layout in the machine fingerprint, so that only like layouts are compared."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CONFIG, REPO
from specgate.config import load_hardware_profile
from specgate.config.parallel import ParallelLayout, layout_of, parse_overrides, parse_parallel
from specgate.engines.vllm_engine import VllmEngine, _Setup
from specgate.engines.vllm_parallel import llm_parallel_arguments, server_parallel_flags
from specgate.errors import ConfigError
from specgate.hardware import fingerprint as fp
from specgate.hardware.topology import parse_topology, summarize_links, visible_devices
from specgate.models import ResolvedModel
from specgate.plan import build_plan

DATA = REPO / "tests" / "data" / "telemetry"
TP2_MP = ParallelLayout(tensor_parallel_size=2, distributed_executor_backend="mp")


def test_layout_keys_are_validated_and_a_pair_overrides_its_profile_key_by_key() -> None:
    profile = parse_parallel({"tensor_parallel_size": 8, "distributed_executor_backend": "mp"}, "h.yaml", "parallel")
    pair = parse_overrides({"tensor_parallel_size": 4}, "s.yaml", "pairs.p.parallel")
    assert pair == {"tensor_parallel_size": 4}
    layout = layout_of(profile, pair)
    assert (layout.tensor_parallel_size, layout.distributed_executor_backend, layout.devices) == (4, "mp", 4)
    assert layout.describe() == "TP=4 (mp executor)" and ParallelLayout().describe() == "single device"
    assert ParallelLayout(2, 2, 1, "ray").describe() == "TP=2 PP=2 (ray executor)"
    with pytest.raises(ConfigError, match=r"'pairs.p.parallel.distributed_executor_backend': 'rya' is not allowed\. "
                       r"Did you mean 'ray'\? Allowed: mp, ray"):  # fmt: skip
        parse_overrides({"distributed_executor_backend": "rya"}, "s.yaml", "pairs.p.parallel")
    with pytest.raises(ConfigError, match=r"1\.\.1024, got 0"):
        parse_overrides({"tensor_parallel_size": 0}, "s.yaml", "pairs.p.parallel")
    with pytest.raises(ConfigError, match=r"unknown key\. Did you mean 'tensor_parallel_size'"):
        parse_overrides({"tensor_paralel_size": 2}, "s.yaml", "pairs.p.parallel")


def test_the_layout_as_llm_arguments_and_as_server_flags() -> None:
    assert llm_parallel_arguments(ParallelLayout()) == {} and server_parallel_flags(ParallelLayout()) == []
    assert llm_parallel_arguments(TP2_MP) == {"tensor_parallel_size": 2, "distributed_executor_backend": "mp"}
    layout = ParallelLayout(4, 2, 2, "ray")
    assert server_parallel_flags(layout) == [
        *("--tensor-parallel-size", "4", "--pipeline-parallel-size", "2", "--data-parallel-size", "2"),
        *("--distributed-executor-backend", "ray"),
    ]
    with pytest.raises(ConfigError, match="data_parallel_size: 2 needs a vLLM server"):
        llm_parallel_arguments(layout)
    assert llm_parallel_arguments(dataclasses.replace(layout, data_parallel_size=1)) == {
        "tensor_parallel_size": 4,
        "pipeline_parallel_size": 2,
        "distributed_executor_backend": "ray",
    }


def _plan(tmp_path: Path, pair_parallel: str, profile: str = "cpu") -> object:
    config = CONFIG.format(target="model").replace(
        "    default: true\n  other-pair:", f"    default: true\n    parallel: {pair_parallel}\n  other-pair:"
    )
    (tmp_path / "specgate.yaml").write_text(textwrap.dedent(config))
    from specgate.config import load_project_config

    project = load_project_config(tmp_path / "specgate.yaml")
    return build_plan(project, "fake-pair", "docs", load_hardware_profile(profile, REPO / "hardware"))


def test_the_vllm_engine_passes_an_arms_layout_to_llm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan(tmp_path, "{tensor_parallel_size: 2, distributed_executor_backend: mp}")
    engine = VllmEngine(REPO)
    target = ResolvedModel("model", Path("/models/target"), "0" * 64)
    for arm in plan.arms:  # type: ignore[attr-defined]
        engine._arms[arm.name] = _Setup(arm, target, None, {}, None)
    args = engine.llm_arguments("spec")
    assert (args["tensor_parallel_size"], args["distributed_executor_backend"]) == (2, "mp")
    spec = plan.arm("spec")  # type: ignore[attr-defined]
    assert spec.describe().endswith(", TP=2 (mp executor)") and "TP=2" in spec.configuration()
    single = _plan(tmp_path, "{}").arm("spec")  # type: ignore[attr-defined]
    assert "TP" not in single.configuration() and single.parallel.single  # unchanged for one device


def test_a_node_profile_lays_the_model_over_its_eight_devices() -> None:
    for name in ("h200x8", "a800x8", "ascend910bx8"):
        layout = load_hardware_profile(name, REPO / "hardware").parallel
        assert (layout.tensor_parallel_size, layout.devices, layout.distributed_executor_backend) == (8, 8, "mp")


def test_interconnect_from_recorded_topology_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    nvlink = parse_topology((DATA / "nvidia_smi_topo_nv12x2.txt").read_text(), "GPU")
    assert nvlink == {(0, 1): "NV12", (1, 0): "NV12"}  # the NICs are not devices
    assert summarize_links(nvlink) == "NVLink (NV12)"
    assert summarize_links(parse_topology((DATA / "nvidia_smi_topo_pcie_x2.txt").read_text())) == "PCIe (PHB)"
    hccs = parse_topology((DATA / "npu_smi_topo_910b3x8.txt").read_text(), "NPU")
    assert len(hccs) == 8 * 7 and summarize_links(hccs) == "HCCS"
    assert summarize_links(hccs, [2, 3]) == "HCCS" and summarize_links(hccs, [0]) == ""
    mixed = {(0, 1): "NV18", (1, 0): "NV18", (0, 2): "SYS", (2, 0): "SYS", (1, 2): "NV18", (2, 1): "NV18"}
    assert summarize_links(mixed) == "NVLink (NV18) ×2, PCIe (SYS) ×1"
    with pytest.raises(ValueError, match="no GPU topology matrix"):
        parse_topology("GPU0\tNIC0\tCPU Affinity\nGPU0\t X \tPIX\t0-7\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert visible_devices("cuda", 2) == [4, 5]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5534d557")
    assert visible_devices("cuda", 2) is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_devices("cuda", 2) == [0, 1]


def test_the_fingerprint_records_the_layout_and_only_like_layouts_compare() -> None:
    info = ("NVIDIA H200", 8, "570.1")
    versions = {"engine": "vllm", "vllm": "0.11.0", "torch": "2.9.0"}
    single = fp.machine_fingerprint("cuda", None, versions, "bfloat16", info)
    none = fp.machine_fingerprint("cuda", None, versions, "bfloat16", info, ParallelLayout())
    tp8 = dataclasses.replace(single, layout="TP=8 (mp executor) on 8 devices", interconnect="NVLink (NV18)")
    tp4 = dataclasses.replace(tp8, layout="TP=4 (mp executor) on 4 devices")
    assert single.key == none.key and single.layout == ""  # a one-device run keeps the key it always had
    legacy = {name: getattr(single, name) for name in fp.MATCHED}
    assert single.key == fp.Fingerprint(**legacy, host=single.host, kernel=single.kernel).key
    assert len({single.key, tp8.key, tp4.key}) == 3 and not tp8.matches(tp4)
    assert tp8.differences(tp4) == ["layout: TP=8 (mp executor) on 8 devices ≠ TP=4 (mp executor) on 4 devices"]
    assert tp8.differences(single) == [
        "layout: TP=8 (mp executor) on 8 devices ≠ single device",
        "interconnect: NVLink (NV18) ≠ single device",
    ]
    assert tp8.describe().endswith("; TP=8 (mp executor) on 8 devices over NVLink (NV18)")
    cpu = fp.machine_fingerprint("cpu", 2, versions, "float32", ("none", 0, ""), TP2_MP)
    assert (cpu.layout, cpu.interconnect) == ("TP=2 (mp executor) on 2 devices", "host memory (one CPU host)")


def test_a_layout_the_engine_cannot_run_is_a_usage_error(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = CONFIG.format(target="model").replace(
        "    default: true\n  other-pair:", "    default: true\n    parallel: {tensor_parallel_size: 2}\n  other-pair:"
    )
    gate_project(config=config)
    result = pytester.runpytest("suites/test_sla.py", "--hardware=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*pair 'fake-pair' (cpu profile and pairs.fake-pair.parallel): TP=2: parallel layouts run on the vllm "
         "engine; 'transformers' uses one device. Set engine: vllm*"]
    )  # fmt: skip
    ray = config.replace("parallel: {tensor_parallel_size: 2}", "parallel: {tensor_parallel_size: 2, "
                         "distributed_executor_backend: ray}\n    engine: vllm")  # fmt: skip
    (pytester.path / "specgate.yaml").write_text(textwrap.dedent(ray))
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    result = pytester.runpytest("suites/test_sla.py", "--hardware=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the ray executor needs Ray: pip install 'specgate?ray?'*"])
