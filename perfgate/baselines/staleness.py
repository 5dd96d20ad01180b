"""Whether a baseline measured the code and software here (``perfgate baseline check``, and the
gate's first line when it did not): the provenance a run of a workload would record
(perfgate.baselines.provenance), compared with each baseline file's."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from perfgate.errors import BaselineError
from perfgate.baselines.store import Baseline, load_baseline
from perfgate.baselines.provenance import Provenance, current, git_fingerprint, staleness, workload_threads
from perfgate.records.staleness import Staleness
from perfgate.records.model import MachineInfo
from perfgate.settings.config import Settings
from perfgate.settings.workloads import WorkloadSpec, discover_workloads
from perfgate.system.machine import this_machine


def run_provenance(spec: WorkloadSpec, settings: Settings, machine: MachineInfo | None,
                   cwd: Path | None = None) -> Provenance:
    """What a run of ``spec`` measures: its command line, its source files' fingerprint, the record
    version, the CPU threads it is given and this machine's software (perfgate.baselines.provenance)."""
    return current(cwd or settings.root, spec.module, spec.args, machine, launcher=spec.launcher, nproc=spec.nproc,
                   nnodes=spec.nnodes, threads=workload_threads(settings.threads, os.environ))


def baseline_staleness(baseline: Baseline, spec: WorkloadSpec, settings: Settings, machine: MachineInfo | None,
                       cwd: Path | None = None, *, base: str | None = None) -> Staleness:
    """How ``baseline`` differs from what a run of ``spec`` here would measure; the software is
    compared only for a baseline of this machine's class.

    ``base``: the commit the change under test starts from (a pull request's merge-base). The
    baseline's code is then compared with the base's, not this checkout's: the change's own edits
    are what the gate measures, not a stale baseline; they come back as ``edits``. Where the base
    does not hold the workload's files (a shallow clone), this checkout is compared as without one."""
    root = cwd or settings.root
    same_class = machine is not None and baseline.machine_class == machine.machine_class
    recorded = Provenance.from_dict(baseline.provenance, baseline.machine)
    now = run_provenance(spec, settings, machine, cwd)
    at_base = git_fingerprint(root, base, list(now.sources)) if base and now.sources is not None else None
    if at_base is None:
        return staleness(recorded, now, root=root, compare_software=same_class)
    before = replace(now, sources=at_base)
    found = staleness(recorded, before, root=root, compare_software=same_class)
    edits = staleness(before, now, compare_software=False).code
    return replace(found, edits=edits, base=base)


@dataclass(frozen=True)
class BaselineCheck:
    """One baseline file against the code here (``perfgate baseline check``): how it differs, or
    why it could not be checked (``problem``: unreadable, or no workload of its name)."""

    path: Path
    staleness: Staleness | None = None
    problem: str | None = None


def check_baselines(settings: Settings) -> list[BaselineCheck]:
    """Every baseline file under ``settings.baseline_dir`` compared with what its workload would
    run here: its command line (with the arguments of the baseline machine's GPU count), its source
    files, the record version, and, for this machine's class, the software."""
    machine = this_machine(settings.nsys, settings.machine_class)
    out: list[BaselineCheck] = []
    for path in sorted(settings.baseline_dir.rglob("*.json")):
        try:
            baseline = load_baseline(path)
        except BaselineError as exc:
            out.append(BaselineCheck(path, problem=str(exc)))
            continue
        gpus = baseline.machine.get("gpu_count")
        specs = {(s.name, s.variant): s for s in discover_workloads(settings, gpus if isinstance(gpus, int) else 0)}
        spec = specs.get((baseline.workload, baseline.variant))
        if spec is None:
            out.append(BaselineCheck(path, problem=f"no workload {baseline.workload!r}"
                                                   f"{f' variant {baseline.variant!r}' if baseline.variant else ''} here"))
            continue
        out.append(BaselineCheck(path, baseline_staleness(baseline, spec, settings, machine)))
    return out

