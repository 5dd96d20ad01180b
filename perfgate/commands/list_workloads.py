"""``perfgate list``: the workloads perfgate discovers (the workloads folder and
``[tool.perfgate.workloads]``), each with its launcher and command line."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perfgate.settings.options import settings_from_args
from perfgate.settings.workloads import helper_notes


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    listing = subparsers.add_parser("list", help="list the workloads perfgate discovers")
    listing.add_argument("--root", type=Path, default=None, help="project folder (default: nearest pyproject.toml)")
    listing.set_defaults(func=cmd_list)
    return listing


def cmd_list(args: argparse.Namespace) -> int:
    from perfgate.settings.workloads import discover_workloads
    from perfgate.system.machine import machine_info

    settings = settings_from_args(args)
    specs = discover_workloads(settings, machine_info(None, settings.machine_class).gpu_count)
    for note in helper_notes(settings):
        print(f"perfgate: note: {note}", file=sys.stderr)
    if not specs:
        print(f"perfgate: no workloads in {settings.workloads_dir} or [tool.perfgate.workloads]")
    for spec in specs:
        state = "" if spec.enabled else "  (disabled)"
        launcher = f"torchrun x{spec.nproc}" if spec.launcher == "torchrun" else "python"
        print(f"{spec.full_name:<32} {launcher:<12} -m {spec.module} {' '.join(spec.args)}".rstrip() + state)
    return 0
