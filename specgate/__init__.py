"""specgate: a release gate for speculative decoding, as a pytest plugin."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
