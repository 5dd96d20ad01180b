"""README.md is the front door (issue 32): short, and every ``perfgate`` command it tells a
newcomer to run (``$ `` lines of its ```console blocks) names a subcommand and options that exist."""
from __future__ import annotations

import re

import pytest
from readme_commands import README, console_commands, perfgate_commands

from perfgate.cli import build_parser


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not target.startswith("http"):
            assert (README.parent / target).exists(), f"README.md links to {target}, which does not exist"


def test_the_readme_shows_the_commands_of_the_five_steps() -> None:
    subcommands = [c[:2] if c[0] == "baseline" else c[:1] for c in perfgate_commands()]
    assert ["init"] in subcommands and ["baseline", "update"] in subcommands and ["run"] in subcommands


@pytest.mark.parametrize("command", perfgate_commands(), ids=" ".join)
def test_each_readme_command_parses(command: list[str]) -> None:
    parser = build_parser(command)
    try:
        args = parser.parse_args(command)
    except SystemExit as exc:   # argparse: an unknown subcommand or option
        pytest.fail(f"README.md: `perfgate {' '.join(command)}` does not parse (exit {exc.code})")
    assert callable(args.func)


def test_a_wrong_command_would_be_caught() -> None:
    text = "```console\n$ perfgate run --no-such-option\n$ echo skipped\n```\n```sh\n$ perfgate nope\n```\n"
    assert console_commands(text) == [["perfgate", "run", "--no-such-option"], ["echo", "skipped"]]
    with pytest.raises(SystemExit):
        build_parser(perfgate_commands(text)[0]).parse_args(perfgate_commands(text)[0])


def test_ci_runs_the_readmes_test_command() -> None:
    """.ci/run runs the test command the README gives to developers."""
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    command = "python3 -m pytest -n 2 --dist loadfile"
    assert f"bash scripts/setup.sh && . .venv/bin/activate && {command} " in readme
    assert "bash scripts/setup.sh" in ci and re.search(rf"^{command.replace('pytest', 'pytest -q')}$", ci, re.MULTILINE)
