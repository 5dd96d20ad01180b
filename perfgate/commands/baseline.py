"""``perfgate baseline update`` (a run that records each workload's baseline) and ``perfgate
baseline check`` (each baseline file: current, or recorded from other code or software)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from perfgate.commands.output import say
from perfgate.commands.run import cmd_run
from perfgate.settings.options import add_command_options, settings_from_args

if TYPE_CHECKING:
    from perfgate.baselines.staleness import BaselineCheck


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    baseline = subparsers.add_parser("baseline", help="manage baselines")
    actions = baseline.add_subparsers(dest="baseline_command", metavar="ACTION", required=True)
    update = actions.add_parser("update", help="run workloads and record them as baselines")
    update.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="workloads (default: all enabled)")
    add_command_options(update)
    update.set_defaults(func=cmd_baseline_update)
    check = actions.add_parser(
        "check", help="list baselines recorded from other code or software than this checkout's (exit 1 if any)")
    add_command_options(check)
    check.set_defaults(func=cmd_baseline_check)
    return baseline


def cmd_baseline_update(args: argparse.Namespace) -> int:
    return cmd_run(args, update=True)


def cmd_baseline_check(args: argparse.Namespace) -> int:
    """Each baseline file: current, stale (what differs) or unreadable; exit 1 if one is stale."""
    from perfgate.baselines.staleness import check_baselines

    settings = settings_from_args(args)
    lines, status = check_lines(check_baselines(settings))
    for line in lines or [f"perfgate: no baselines in {settings.baseline_dir}"]:
        say(line)
    return status


def check_lines(checks: list[BaselineCheck]) -> tuple[list[str], int]:
    """What ``perfgate baseline check`` prints for ``checks`` and its exit status: 1 when a
    baseline is stale, 2 when one could not be checked, else 0."""
    lines = []
    for c in checks:
        if c.problem is not None:
            lines.append(f"unreadable {c.path}: {c.problem}")
        elif c.staleness is not None and c.staleness.stale:
            lines.append(f"stale      {c.path}: {c.staleness.text()}")
        else:
            lines.append(f"current    {c.path}")
    if any(c.problem is not None for c in checks):
        return lines, 2
    return lines, 1 if any(c.staleness is not None and c.staleness.stale for c in checks) else 0
