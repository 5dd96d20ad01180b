"""Run one launch of a workload under ``nsys profile`` and keep its artifacts.

``nsys_command`` builds the command line (pure); ``run_capture`` runs it under perfgate's
supervisor (perfgate.process_tree: the whole process tree ends with the launch) with a timeout and
leaves in the launch directory: ``trace.nsys-rep``, ``trace.sqlite``, ``command.txt`` (the command
line) and ``workload.log`` (stdout and stderr of nsys and the workload), cleaned of secrets
(perfgate.redaction). nsys and the profiled process get a scrubbed environment.
With ``autostep`` on (the default) that environment also carries ``PERFGATE_AUTOSTEP=1`` and
autostep's ``sitecustomize`` folder first on ``PYTHONPATH`` (perfgate.autostep: NVTX ranges
for DataLoader, backward and optimizer step in code that has none).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfgate import process_tree
from perfgate.autostep import ENV_VAR as AUTOSTEP_ENV_VAR
from perfgate.autostep import site_dir as autostep_site_dir
from perfgate.config import Settings
from perfgate.errors import CaptureTimeoutError, ConfigError, ImporterError, WorkloadFailedError
from perfgate.nsys_log import failure_cause
from perfgate.model import Capture
from perfgate.redaction import clean_artifacts
from perfgate.secrets import WITHHELD_SUFFIX, redact_text, secret_values
from perfgate.workloads import WorkloadSpec

SELF_REPORT_PREFIX = "PERFGATE_SELF_REPORT "
REPORT_STEM = "trace"
TAIL_LINES = 30
KILL_GRACE_S = 10.0
# What ``pytorch_trace = "auto"`` passes as nsys --pytorch where nsys has it. Its ranges (names seen
# with nsys 2025.3.1 on the H100: torch.optim.AdamW.step, ..._BaseDataLoaderIter.__next__,
# torch.autograd.backward, one torch.nn.modules.Module.__call__ per module call) are a step source
# and phases (analysis/steps.py). Not the default: autostep gives the same iterations with three
# ranges per step instead of one per module call.
AUTO_PYTORCH_TRACE: str | None = "functions-trace"


#: The two kinds of launch: ``timing`` launches measure step and CPU phase times with tracing that
#: costs (nearly) nothing; a ``profile`` launch traces CUDA for GPU idle, GPU time per phase,
#: kernels, copies and the diagnosis. Measured on the H100 (benchmarks/capture_overhead.py, README):
#: ``nvtx`` changed a launch-bound HF Trainer iteration by +0.4 %, ``cuda,nvtx`` by +5.3 % and
#: ``cuda,nvtx,osrt`` by +21 %. Nothing perfgate reports needs ``osrt``.
TIMING, PROFILE = "timing", "profile"
AUTO_TRACE = {TIMING: "nvtx", PROFILE: "cuda,nvtx"}


def resolve_trace(trace: str, gpu_count: int, kind: str = TIMING) -> str:
    """The nsys ``--trace`` set of a launch of ``kind``: ``auto`` is ``nvtx`` for timing launches
    and ``cuda,nvtx`` for the profile launch (which only a machine with a GPU takes); any other
    setting is used as given for every launch."""
    if trace != "auto":
        return trace
    return AUTO_TRACE[kind] if gpu_count > 0 else AUTO_TRACE[TIMING]


def profile_launch_wanted(settings: Settings, gpu_count: int) -> bool:
    """Whether a gate run may take a CUDA-traced profile launch besides its timing launches: with a
    GPU, ``trace = "auto"`` and ``profile`` auto or always (auto takes it when recording and when the
    timing launches did not PASS: perfgate.pipeline). A trace set given by the user is used for every
    launch instead (they all measure the same way, as before)."""
    return gpu_count > 0 and settings.trace == "auto" and settings.profile in ("auto", "always")


def workload_command(spec: WorkloadSpec, python: str = sys.executable, extra_args: Sequence[str] = ()) -> list[str]:
    """The command that runs the workload itself (``python -m MODULE`` or torchrun)."""
    args = [*spec.args, *extra_args]
    if spec.launcher == "torchrun":
        return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={spec.nproc}",
                "-m", spec.module, *args]
    return [python, "-m", spec.module, *args]


def nsys_command(
    nsys: Path | str,
    spec: WorkloadSpec,
    output: Path,
    *,
    trace: str,
    capture_range: str = "none",
    pytorch: str | None = None,
    python: str = sys.executable,
    extra_args: Sequence[str] = (),
    cuda_memory_usage: bool = False,
) -> list[str]:
    """The full ``nsys profile ... <workload>`` command writing ``<output>.nsys-rep`` + ``.sqlite``;
    ``pytorch`` (a mode list such as ``functions-trace``) adds ``--pytorch=<pytorch>``;
    ``cuda_memory_usage`` adds ``--cuda-memory-usage=true`` when ``trace`` has ``cuda`` (the
    trace's peak GPU memory: perfgate.resources)."""
    cmd = [str(nsys), "profile", f"--trace={trace}", "--sample=none", "--cpuctxsw=none"]
    if cuda_memory_usage and "cuda" in trace.split(","):
        cmd.append("--cuda-memory-usage=true")
    if pytorch:
        cmd.append(f"--pytorch={pytorch}")
    if capture_range == "cudaProfilerApi":
        cmd += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    elif capture_range.startswith("nvtx:"):
        cmd += ["--capture-range=nvtx", "-p", capture_range.split(":", 1)[1], "--capture-range-end=stop"]
    cmd += ["--export=sqlite", "-o", str(output), "-f", "true"]
    return cmd + workload_command(spec, python, extra_args)


def pytorch_trace_mode(setting: str, nsys: Path | str) -> str | None:
    """The nsys ``--pytorch`` value for the ``pytorch_trace`` setting, or None for no flag.

    ``off``: None. ``auto``: AUTO_PYTORCH_TRACE where this nsys has ``--pytorch`` (None for now).
    A mode list (``functions-trace``, ``autograd-nvtx``, ...): itself; ConfigError when this nsys
    has no ``--pytorch`` (Nsight Systems 2024.x added it)."""
    from perfgate.nsys import supports_option

    if setting == "off" or (setting == "auto" and AUTO_PYTORCH_TRACE is None):
        return None
    supported = supports_option(nsys, "--pytorch")
    if setting == "auto":
        return AUTO_PYTORCH_TRACE if supported else None
    if not supported:
        raise ConfigError(
            f"pytorch_trace = {setting!r} needs nsys profile --pytorch, which {nsys} does not offer "
            "(Nsight Systems 2024.x or newer); set pytorch_trace to off or auto"
        )
    return setting


def capture_environment(
    base: Mapping[str, str], capture_range: str = "none", *, autostep: bool = True,
) -> dict[str, str]:
    """The profiled process's environment: ``base`` without secrets (nor other variables holding
    a secret's value), unbuffered Python output,
    and NSYS_NVTX_PROFILER_REGISTER_ONLY=0 for an NVTX capture range (torch's ranges are not
    registered strings). ``autostep``: ``PERFGATE_AUTOSTEP=1`` and autostep's sitecustomize
    folder first on ``PYTHONPATH`` (an existing PYTHONPATH kept after it); off:
    ``PERFGATE_AUTOSTEP=0``."""
    from perfgate.secrets import scrubbed_environment, secret_values

    secrets = set(secret_values(base))
    env = scrubbed_environment(base, drop=[name for name, value in base.items() if value in secrets])
    env["PYTHONUNBUFFERED"] = "1"
    if capture_range.startswith("nvtx:"):
        env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"
    if autostep:
        env[AUTOSTEP_ENV_VAR] = "1"
        env["PYTHONPATH"] = prepend_path(autostep_site_dir(), env.get("PYTHONPATH", ""))
    else:
        env[AUTOSTEP_ENV_VAR] = "0"
    return env


def prepend_path(entry: str, path: str) -> str:
    """``entry`` first in the ``os.pathsep``-separated ``path``, once, the rest kept in order."""
    rest = [p for p in path.split(os.pathsep) if p != entry] if path else []
    return os.pathsep.join([entry, *rest])


def parse_self_report(text: str) -> dict[str, Any] | None:
    """The last ``PERFGATE_SELF_REPORT {json}`` line of a workload's output, parsed."""
    for line in reversed(text.splitlines()):
        _, found, payload = line.partition(SELF_REPORT_PREFIX)
        if found:
            try:
                value = json.loads(payload)
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")


def log_tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log, without nsys's progress-bar noise, terminal control
    sequences, and with a line the workload wrote as a GitHub workflow command (``::error::...``,
    ``::add-mask::``) made inert: perfgate prints this text where the CI runner reads commands."""
    kept = [_CONTROL.sub("", ln.rsplit("\r", 1)[-1]) for ln in text.splitlines()]
    kept = [ln for ln in kept if ln.strip() and not ln.lstrip().startswith("[1/2]") and not ln.lstrip().startswith("[2/2]")]
    return "\n".join(f"(log) {ln}" if ln.lstrip().startswith("::") else ln for ln in kept[-lines:])


def run_capture(
    spec: WorkloadSpec,
    settings: Settings,
    launch_dir: Path,
    *,
    cwd: Path | None = None,
    extra_args: Sequence[str] = (),
    kind: str = TIMING,
) -> Capture:
    """Run ``spec`` once under nsys as a launch of ``kind`` (its trace set: :func:`resolve_trace`);
    artifacts go to ``launch_dir`` (created).

    nsys runs under perfgate's supervisor (perfgate.process_tree): on success, failure, timeout,
    Ctrl-C or SIGTERM its whole process tree ends. Whatever happened, the launch folder is then
    cleaned of secrets (perfgate.redaction) before an error message quotes its log.
    Raises NsysNotFoundError, WorkloadFailedError (non-zero exit, with the log's tail),
    CaptureTimeoutError (process tree ended) or ImporterError (only a .qdstrm left)."""
    from perfgate.machine import machine_info
    from perfgate.nsys import export_sqlite, find_nsys

    nsys = find_nsys(settings.nsys, settings.sources.get("nsys", "option"), settings.option("nsys"))
    pytorch = pytorch_trace_mode(settings.pytorch_trace, nsys)
    machine = machine_info(None, settings.machine_class)
    launch_dir.mkdir(parents=True, exist_ok=True)
    output = launch_dir / REPORT_STEM
    cmd = nsys_command(
        nsys, spec, output, trace=resolve_trace(settings.trace, machine.gpu_count, kind),
        capture_range=settings.capture_range, pytorch=pytorch, extra_args=extra_args,
        cuda_memory_usage=settings.cuda_memory_usage,
    )
    log_path = launch_dir / "workload.log"
    timeout_s = spec.timeout_s or settings.timeout_s
    env = capture_environment(os.environ, settings.capture_range, autostep=settings.autostep)
    known = secret_values(os.environ)
    started = time.monotonic()
    try:
        (launch_dir / "command.txt").write_text(redact_text(shlex.join(cmd), known) + "\n")
        with log_path.open("wb") as log:
            proc = process_tree.start(cmd, grace_s=KILL_GRACE_S, cwd=str(cwd or settings.root), env=env,
                                      stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                returncode: int | None = process_tree.wait(proc, timeout_s)
            except subprocess.TimeoutExpired:
                returncode = None
            finally:
                process_tree.stop(proc, KILL_GRACE_S)   # the tree is gone whatever ended the wait
    finally:
        with process_tree.signals_deferred():   # Ctrl-C or SIGTERM now would leave raw secrets behind
            clean_artifacts(launch_dir, known, nsys)
    wall_s = time.monotonic() - started
    text = log_path.read_text(errors="replace")
    withheld = sorted(p.name for p in launch_dir.glob(f"*{WITHHELD_SUFFIX}"))
    if withheld:   # said in the error of a failed launch; a successful one's analysis notes them
        text += f"\nperfgate withheld (secrets it could not clean): {', '.join(withheld)}"
    if returncode is None:
        raise CaptureTimeoutError(
            f"workload {spec.full_name} ran past its timeout of {timeout_s:g} s; its process tree (nsys, "
            f"the workload and their children) was ended (timeout_s in [tool.perfgate] or {settings.option('timeout_s')}); "
            f"log: {log_path}\n{log_tail(text)}"
        )
    report = output.with_suffix(".nsys-rep")
    if returncode != 0:
        if any(launch_dir.glob(f"{output.name}.*")):   # nsys wrote a report: the workload's own exit
            raise WorkloadFailedError(
                f"workload {spec.full_name} exited with code {returncode} under nsys; "
                f"last lines of its output ({log_path}):\n{log_tail(text)}"
            )
        raise WorkloadFailedError(   # no report at all: nsys may never have started the workload
            f"nsys exited with code {returncode} and wrote no report for workload {spec.full_name}: "
            f"{failure_cause(text, env)}; last lines of the output ({log_path}):\n{log_tail(text)}"
        )
    sqlite = output.with_suffix(".sqlite")
    if not report.exists() and not report.with_name(report.name + WITHHELD_SUFFIX).exists():
        leftovers = sorted(launch_dir.glob("*.qdstrm*"))
        hint = f" (left {leftovers[0].name})" if leftovers else ""
        raise ImporterError(
            f"nsys produced no {report.name} in {launch_dir}{hint}: its importer could not convert the "
            f"capture; see {log_path}\n{log_tail(text, 10)}"
        )
    if not sqlite.exists() and report.exists():
        sqlite = export_sqlite(report, nsys)
        clean_artifacts(launch_dir, known, nsys)
    from perfgate.torch_build import check_ranges_recorded

    check_ranges_recorded(sqlite, sys.executable, cwd or settings.root)   # a CPU-only torch, named
    return Capture(
        workload=spec.full_name, run_dir=launch_dir, command=tuple(cmd), report_path=report,
        sqlite_path=sqlite, log_path=log_path, returncode=returncode, wall_s=wall_s,
        self_report=parse_self_report(text),
    )
