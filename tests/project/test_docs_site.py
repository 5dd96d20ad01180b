"""The docs site (issue 32): its generated reference pages are what scripts/docs_reference.py
writes from perfgate's own declarations, every page of docs/ is in the nav, and
``mkdocs build --strict`` succeeds (a broken link fails it)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from layout import REPO

DOCS = REPO / "docs"


def _docs_reference():
    spec = importlib.util.spec_from_file_location("docs_reference", REPO / "scripts" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["configuration.md", "cli.md"])
def test_the_generated_reference_is_committed_as_generated(name: str) -> None:
    page = next(p for p in _docs_reference().pages() if p.path.name == name)
    assert page.path == DOCS / "reference" / name
    assert page.path.read_text(encoding="utf-8") == page.text, (
        f"docs/reference/{name} is out of date: run python3 scripts/docs_reference.py")


def test_the_configuration_reference_has_every_setting_and_option() -> None:
    from perfgate.settings.config import SETTINGS

    text = (DOCS / "reference" / "configuration.md").read_text(encoding="utf-8")
    for s in SETTINGS:
        assert f"`{s.key}`" in text and s.env in text
        if s.option is not None:
            assert s.flag() in text and s.flag("perfgate-") in text


def test_the_cli_reference_has_every_command_and_option() -> None:
    from perfgate.cli import build_parser

    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    for command in ("run", "analyze", "compare", "baseline update", "baseline check", "list", "init",
                    "ab", "calibrate", "report", "history"):
        assert f"## `perfgate {command}`" in text
    run = build_parser(["run"])._subparsers._group_actions[0].choices["run"]   # type: ignore[union-attr]
    for action in run._actions:
        for option in action.option_strings:
            assert f"`{option}" in text


def test_every_page_is_in_the_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    for page in sorted(DOCS.rglob("*.md")):
        relative = page.relative_to(DOCS).as_posix()
        if relative.startswith(("example/", "calibration/")):
            continue   # files the pages link to, not pages
        assert f": {relative}\n" in nav, f"docs/{relative} is not in mkdocs.yml's nav"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        if os.environ.get("PERFGATE_REQUIRE_REAL") == "1":
            pytest.fail("mkdocs and mkdocs-material are required in CI (requirements/ci.txt)", pytrace=False)
        pytest.skip("mkdocs / mkdocs-material not installed")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=REPO,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "index.html").is_file()
    assert (site / "measurements" / "gate-demo" / "index.html").is_file()
    assert (site / "reference" / "configuration" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs not installed")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n[gone](missing.md)\n")
    (tmp_path / "mkdocs.yml").write_text((REPO / "mkdocs.yml").read_text().split("\nnav:\n")[0] + "\n")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=tmp_path, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0 and "missing.md" in done.stdout + done.stderr
