"""The gate suites shipped with specgate, importable as `specgate.suites.test_sla` etc.: this package's modules are
the shipped suite files (`specgate.shipped`). A repository initialised by `specgate init` runs them from its own
`suites/test_<name>.py`, each one line (`from specgate.suites.test_sla import *`), so an upgrade of specgate brings
the checks of its catalogue with it; tests of the repository's own sit beside them."""

from __future__ import annotations

from specgate.shipped import shipped

_folder = shipped("suites")
__path__ = [] if _folder is None else [str(_folder)]
SUITES = () if _folder is None else tuple(sorted(p.stem for p in _folder.glob("test_*.py")))
