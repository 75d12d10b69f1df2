"""The hooks specgate's plugin adds to pytest (registered by `specgate.plugin.pytest_addhooks`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

    from specgate.run import GateRun


def pytest_specgate_run(config: pytest.Config, run: GateRun) -> None:
    """Called once the session's gate run is built and validated: when collection meets the first gate test, before
    any item runs. A conftest can adjust the run here (a test engine factory, say); sessions without gate tests never
    call it."""
