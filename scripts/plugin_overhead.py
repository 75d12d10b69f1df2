"""The wall time specgate's plugin adds to a repository's own, unrelated test session.

A scratch repository holds `specgate.yaml` (this repository's) and a small test module of its own (a few plain tests,
one with a `pair` fixture of its own). The same session runs with the plugin (as `pip install specgate` leaves it:
the `pytest11` entry point loads it) and without it (`-p no:specgate`), in alternating order, in fresh interpreters;
the script prints each side's median and the median of the paired differences with a bootstrap 95 % interval.
Goal: under 50 ms. A whole session's wall time varies by more than that from run to run on a shared VM, so the
script also measures the plugin's own time inside the session, which does not depend on that noise: the import
time of every `specgate` module the session imported (`python -X importtime`) plus the time spent in specgate's
hook functions (cProfile, each hook's cumulative time; hooks do not call one another), median over the runs.
A measurement, not a test: run it on a quiet machine.

    python scripts/plugin_overhead.py [--runs 30]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
USER_TESTS = """
import pytest


@pytest.fixture(params=["EURUSD", "USDJPY"])
def pair(request):
    return request.param


def test_currency_pair(pair):
    assert len(pair) == 6


@pytest.mark.parametrize("n", range(20))
def test_arithmetic(n):
    assert n + n == 2 * n
"""


def _session(root: Path, plugin: bool) -> float:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    if not plugin:
        command += ["-p", "no:specgate"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=root, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the user's session failed ({'with' if plugin else 'without'} specgate):\n{done.stdout}")
    said = [line for line in (done.stdout + done.stderr).splitlines() if "specgate" in line.lower()]
    if plugin and [line for line in said if not line.startswith("plugins: ")]:  # pytest's own list of plugins
        raise SystemExit(f"the plugin printed in an unrelated session:\n{done.stdout}{done.stderr}")
    return elapsed


def _interval(differences: list[float], resamples: int = 4000) -> tuple[float, float]:
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(differences, k=len(differences))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


OWN_TIME = """
import cProfile, pstats, sys
import pytest

profile = cProfile.Profile()
profile.enable()
code = pytest.main(["-q", "-p", "no:cacheprovider", "tests"])
profile.disable()
hooks = sum(
    cumulative
    for (path, _, name), (_, _, _, cumulative, _) in pstats.Stats(profile).stats.items()
    if "/specgate/" in path and name.startswith("pytest_")
)
print(f"HOOKS {hooks * 1000:.3f}", file=sys.stderr)
raise SystemExit(code)
"""


def _own_time(root: Path) -> tuple[float, float]:
    """(import ms, hook ms) of specgate in one unrelated session, measured inside it."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", OWN_TIME], cwd=root, capture_output=True, text=True, check=True
    )
    imports, hooks = 0.0, 0.0
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            self_us, _, name = line.removeprefix("import time:").split("|")
            if name.strip().startswith("specgate"):
                imports += int(self_us) / 1000
        elif line.startswith("HOOKS "):
            hooks = float(line.split()[1])
    return imports, hooks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="paired sessions (default: 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="specgate-overhead-") as scratch:
        root = Path(scratch)
        shutil.copy(REPO / "specgate.yaml", root / "specgate.yaml")
        (root / "tests").mkdir()
        (root / "tests" / "test_user.py").write_text(USER_TESTS)
        (root / "pytest.ini").write_text("[pytest]\n")
        _session(root, True)  # warm the file cache and the byte-code of both sides
        _session(root, False)
        with_plugin, without, differences = [], [], []
        for run in range(args.runs):
            order = (True, False) if run % 2 == 0 else (False, True)
            times = {plugin: _session(root, plugin) for plugin in order}
            with_plugin.append(times[True])
            without.append(times[False])
            differences.append(times[True] - times[False])
        own = [_own_time(root) for _ in range(max(3, args.runs // 6))]
    low, high = _interval(differences)
    print(f"unrelated session with specgate.yaml present, {args.runs} paired runs:")
    print(f"  without the plugin: median {statistics.median(without) * 1000:.0f} ms")
    print(f"  with the plugin:    median {statistics.median(with_plugin) * 1000:.0f} ms")
    print(
        f"  added: median {statistics.median(differences) * 1000:+.1f} ms "
        f"(95% CI {low * 1000:+.1f} to {high * 1000:+.1f} ms; goal < 50 ms)"
    )
    imports, hooks = statistics.median(i for i, _ in own), statistics.median(h for _, h in own)
    print(
        f"  the plugin's own time inside the session (median of {len(own)}): {imports + hooks:.1f} ms "
        f"(importing specgate {imports:.1f} ms, its hooks {hooks:.1f} ms)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
