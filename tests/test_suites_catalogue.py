"""The shipped suites and the check catalogue are one to one: every catalogue entry has exactly one suite test
marked with its name, and every suite test names an entry of the catalogue."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from specgate.checks.catalogue import CATALOGUE

REPO = Path(__file__).resolve().parent.parent


def marked_checks(folder: Path) -> Counter[str]:
    """How many test functions of a suite folder carry `@pytest.mark.specgate_check(NAME)`, by NAME."""
    names: Counter[str] = Counter()
    for path in sorted(folder.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and ast.unparse(decorator.func) == "pytest.mark.specgate_check"
                    and decorator.args
                    and isinstance(decorator.args[0], ast.Constant)
                ):
                    names[str(decorator.args[0].value)] += 1
    return names


def test_every_catalogue_entry_has_one_suite_test_and_every_suite_test_an_entry() -> None:
    marked = marked_checks(REPO / "suites")
    catalogue = Counter(spec.name for spec in CATALOGUE)
    assert all(n == 1 for n in catalogue.values()), "a catalogue name is used twice"
    assert sorted(set(catalogue) - set(marked)) == [], "catalogue entries no suite test runs"
    assert sorted(set(marked) - set(catalogue)) == [], "suite tests that name no catalogue entry"
    assert [name for name, n in marked.items() if n > 1] == [], "a check run by two suite tests"


def test_the_pairing_check_fails_on_a_suite_that_drifts(tmp_path: Path) -> None:
    """The same reading, on a suite folder with a test naming no entry and a duplicated one."""
    (tmp_path / "test_mine.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.specgate_check('speedup')\ndef test_a(gate_check):\n    gate_check()\n\n"
        "@pytest.mark.specgate_check('speedup')\ndef test_b(gate_check):\n    gate_check()\n\n"
        "@pytest.mark.specgate_check('speedupp')\ndef test_c(gate_check):\n    gate_check()\n",
        encoding="utf-8",
    )
    marked = marked_checks(tmp_path)
    assert marked == Counter({"speedup": 2, "speedupp": 1})
    assert set(marked) - {spec.name for spec in CATALOGUE} == {"speedupp"}
