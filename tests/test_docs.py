"""The documentation says only what is true of this checkout: the README stays a front page, every link and anchor
resolves, every `specgate.…` name it cites exists, every command it shows uses options the command line has (checked
against pytest's own help with the plugin loaded, specgate's argument parser and the scripts' sources), and every
YAML and Python block parses. The Python example of docs/ci.md runs in tests/test_architecture.py."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted([REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "CHANGELOG.md", *(REPO / "docs").rglob("*.md")])
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(((?:[a-z]+://)?[A-Za-z0-9_./#:-]*[./#][A-Za-z0-9_./#:-]*)\)")  # not math: E[x](γ')
INLINE = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"(?<![\w/.-])specgate(?:\.[A-Za-z_]\w*)+(?![\w-])")
FILES = ("yaml", "yml", "json", "md", "py", "toml")  # specgate.yaml is a file, not a module
OPTION = re.compile(r"^--[A-Za-z][\w-]*")


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _name(page: Path) -> str:
    return str(page.relative_to(REPO))


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def _anchors(page: Path) -> set[str]:
    body = FENCE.sub("", _text(page))
    return {_slug(line.lstrip("#")) for line in body.splitlines() if line.startswith("#")}


def _blocks(page: Path) -> Iterator[tuple[str, str]]:
    """(language, code) of each fenced block; indented blocks as language "indented"."""
    text = _text(page)
    for match in FENCE.finditer(text):
        yield match.group(1), match.group(2)
    rest = FENCE.sub("", text).splitlines()
    block: list[str] = []
    for line in [*rest, ""]:
        if line.startswith("    ") and (block or not line.lstrip().startswith(("-", "|"))):
            block.append(line[4:])
        elif block:
            yield "indented", "\n".join(block)
            block = []


def _commands(page: Path) -> Iterator[str]:
    """Command lines shown on a page, in code blocks and inline code: pytest, specgate, scripts."""
    lines = [line for language, code in _blocks(page) if language in ("", "bash", "sh", "indented") for line in
             code.replace("\\\n", " ").splitlines()]  # fmt: skip
    lines += INLINE.findall(FENCE.sub("", _text(page)))
    for line in lines:
        for part in re.split(r"&&|;|\|", line.split("#")[0]):
            words = part.strip().split()
            while words and ("=" in words[0] and not words[0].startswith("-")):
                words = words[1:]  # VAR=value before the command
            if words and words[0].removeprefix(".venv/bin/") in ("pytest", "specgate", "python", "bash"):
                yield " ".join(words)


@pytest.fixture(scope="module")
def pytest_options() -> set[str]:
    """Every option of pytest with this checkout's plugins loaded (specgate, allure, benchmark, …)."""
    shown = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(re.findall(r"--[A-Za-z][\w-]*", shown))


def _parser_options(parser: argparse.ArgumentParser, words: list[str]) -> tuple[set[str], list[str]]:
    """The options of the (sub)command `words` names, and the words that named it."""
    options, named = set(parser._option_string_actions), []
    for word in words:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if word.startswith("-") or sub is None or word not in sub.choices:
            continue
        parser = sub.choices[word]
        options |= set(parser._option_string_actions)
        named.append(word)
    return options, named


def _unknown(command: str, pytest_options: set[str]) -> list[str]:
    words = shlex.split(command.replace("…", ""))
    program = words[0].removeprefix(".venv/bin/")
    if "--" in words:  # a script that runs pytest with what follows
        cut = words.index("--")
        words, forwarded = words[:cut], ["pytest", *words[cut + 1 :]]
        return _unknown(" ".join(words), pytest_options) + _unknown(shlex.join(forwarded), pytest_options)
    given = [m.group(0) for w in words[1:] if (m := OPTION.match(w))]
    if program == "pytest":
        return [o for o in given if o not in pytest_options]
    if program == "specgate":
        from specgate.cli import build_parser

        known, named = _parser_options(build_parser(), words[1:])
        command = [w for w in words[1:2] if not w.startswith("-") and w not in named]
        return [f"{w} (no such command)" for w in command] + [o for o in given if o not in known]
    if program == "python" and len(words) > 1 and words[1] == "-m":
        return []
    script = REPO / words[1] if len(words) > 1 else REPO
    if not script.is_file() or not words[1].startswith("scripts/"):
        return [] if not words[1:] or not words[1].startswith("scripts/") else [f"{words[1]} (no such script)"]
    source = script.read_text(encoding="utf-8")
    return [o for o in given if f'"{o}"' not in source and f" {o}" not in source]


def test_the_readme_is_a_front_page() -> None:
    readme = _text(REPO / "README.md")
    assert len(readme.splitlines()) <= 200
    for page in ("docs/concepts.md", "docs/configuration.md", "docs/statistics.md", "docs/ci.md"):
        assert f"]({page})" in readme, f"the README does not point to {page}"


def test_the_glossary_defines_the_domain_words() -> None:
    glossary = _text(REPO / "docs" / "concepts.md").split("## Glossary", 1)[1].split("\n## ", 1)[0]
    defined = set(re.findall(r"\*\*([a-z ]+)\*\*", glossary))
    words = "pair arm plan reference released plain beside probe pool family look unit round ladder rung"
    assert set(words.split()) <= defined


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_links_and_anchors_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(FENCE.sub("", _text(page))):
        if re.match(r"^[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        found = (page.parent / path).resolve() if path else page
        if not found.exists():
            broken.append(target)
        elif anchor and found.is_file() and anchor not in _anchors(found):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{_name(page)}: {broken}"


def _exists(dotted: str) -> bool:
    """Whether `specgate.a.b.c` is a module, or an attribute of the longest module it starts with."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:n]))
        except ModuleNotFoundError:  # a module's attribute, not a submodule
            spec = None
        if spec is not None:
            found: object = importlib.import_module(".".join(parts[:n]))
            for attribute in parts[n:]:
                found = getattr(found, attribute, None)
            return found is not None
    return False


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_cited_specgate_name_exists(page: Path) -> None:
    cited = {d for d in DOTTED.findall(_text(page)) if d.rsplit(".", 1)[1] not in FILES}
    missing = sorted(dotted for dotted in cited if not _exists(dotted))
    assert not missing, f"{_name(page)} cites names that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_command_shown_uses_options_that_exist(page: Path, pytest_options: set[str]) -> None:
    wrong = {command: unknown for command in _commands(page) if (unknown := _unknown(command, pytest_options))}
    assert not wrong, f"{_name(page)}: {wrong}"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_yaml_and_python_blocks_parse(page: Path) -> None:
    for language, code in _blocks(page):
        if language == "yaml":
            assert isinstance(yaml.safe_load(code), dict), code
        elif language == "python":
            ast.parse(code)


def test_the_checks_catch_what_they_look_for(tmp_path: Path, pytest_options: set[str]) -> None:
    """The checks above fail on a wrong option, a missing name, a broken link or a bad block."""
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\nRun `pytest suites/ --hardwar=cpu`, `specgate baseline diff --nope A B` and `specgate publish`.\n"
        "See [x](missing.md) and [y](#no-such-heading); `specgate.no_such_module.thing`.\n\n"
        "```yaml\n- a list, not a mapping\n```\n",
        encoding="utf-8",
    )
    wrong = {c: u for c in _commands(page) if (u := _unknown(c, pytest_options))}
    assert wrong == {
        "pytest suites/ --hardwar=cpu": ["--hardwar"],
        "specgate baseline diff --nope A B": ["--nope"],
        "specgate publish": ["publish (no such command)"],
    }
    assert _slug("Drift, losslessness and task accuracy") == "drift-losslessness-and-task-accuracy"
    assert "title" in _anchors(page) and "no-such-heading" not in _anchors(page)
    assert DOTTED.findall(_text(page)) == ["specgate.no_such_module.thing"]
    assert not _exists("specgate.no_such_module.thing") and not _exists("specgate.plan.NoSuchPlan")
    assert _exists("specgate.plan.MeasurementPlan") and _exists("specgate.stats")
    assert [language for language, _ in _blocks(page)] == ["yaml"]
