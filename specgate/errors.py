"""Exceptions raised by specgate.

The tree::

    SpecgateError
    ├── ConfigError            a profile, project config or flag is wrong (becomes a pytest.UsageError)
    ├── EngineUnavailableError an engine or hardware runtime is not installed or not present
    ├── ModelNotFoundError     a model file or folder does not exist
    ├── WorkloadError          a workload file is missing or malformed
    ├── BaselineError          a baseline file is unreadable, corrupt or of an incompatible schema
    └── MeasurementError       a measurement could not be made (engine failure, timeout, too few samples)

Every message says what is wrong, the value given, what is allowed and how to fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence


def did_you_mean(value: str, allowed: Sequence[str]) -> str:
    """' Did you mean 'x'?' for the closest allowed value, or '' when nothing is close."""
    close = difflib.get_close_matches(value, list(allowed), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


class SpecgateError(Exception):
    """Base of every error specgate raises on purpose."""


class ConfigError(SpecgateError):
    """A hardware profile, project config or command-line flag is invalid."""


class EngineUnavailableError(SpecgateError):
    """The selected engine or hardware runtime cannot be used on this machine."""


class ModelNotFoundError(ConfigError):
    """A model named in the config cannot be found."""


class WorkloadError(ConfigError):
    """A workload file is missing or malformed."""


class BaselineError(SpecgateError):
    """A baseline file cannot be read or is not compatible with this version."""


class MeasurementError(SpecgateError):
    """A measurement could not be made; the gate blocks with this reason."""
