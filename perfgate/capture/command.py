"""The command line and environment of a capture (pure): the nsys ``--trace`` set of each kind of
launch, ``nsys profile ... <workload>`` with its options, and the profiled process's environment
(secrets scrubbed; with ``autostep`` on, ``PERFGATE_AUTOSTEP=1`` and autostep's ``sitecustomize``
folder first on ``PYTHONPATH``: perfgate.capture.autostep.install). perfgate.capture.launch runs it."""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate.capture.autostep.install import ENV_VAR as AUTOSTEP_ENV_VAR, site_dir as autostep_site_dir
from perfgate.errors import ConfigError
from perfgate.settings.config import Settings
from perfgate.settings.workloads import WorkloadSpec

# What ``pytorch_trace = "auto"`` passes as nsys --pytorch where nsys has it. Its ranges (names seen
# with nsys 2025.3.1 on the H100: torch.optim.AdamW.step, ..._BaseDataLoaderIter.__next__,
# torch.autograd.backward, one torch.nn.modules.Module.__call__ per module call) are a step source
# and phases (analysis/steps.py). Not the default: autostep gives the same iterations with three
# ranges per step instead of one per module call.
AUTO_PYTORCH_TRACE: str | None = "functions-trace"


#: The two kinds of launch: ``timing`` launches measure step and CPU phase times with tracing that
#: costs (nearly) nothing; a ``profile`` launch traces CUDA for GPU idle, GPU time per phase,
#: kernels, copies and the diagnosis. Measured on the H100 (benchmarks/capture_overhead.py, docs/measurements/capture-cost.md):
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
    timing launches did not PASS: perfgate.pipeline.workload_run). A trace set given by the user is used for every
    launch instead (they all measure the same way, as before)."""
    return gpu_count > 0 and settings.trace == "auto" and settings.profile in ("auto", "always")


@dataclass(frozen=True)
class Rendezvous:
    """One node of a job of ``spec.nnodes``: its ``--node-rank`` and the c10d rendezvous they share."""

    node: int
    endpoint: str        # host:port
    run_id: str
    hosted: bool = False     # the c10d store at the endpoint is hosted outside the nodes (capture.nodes)


def workload_command(spec: WorkloadSpec, python: str = sys.executable, extra_args: Sequence[str] = (),
                     rendezvous: Rendezvous | None = None) -> list[str]:
    """The command that runs the workload itself (``python -m MODULE`` or torchrun; one node of
    several with ``rendezvous``)."""
    args = [*spec.args, *extra_args]
    if spec.launcher == "torchrun":
        where = ["--standalone"] if rendezvous is None else [
            f"--nnodes={spec.nnodes}", f"--node-rank={rendezvous.node}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rendezvous.endpoint}", f"--rdzv-id={rendezvous.run_id}",
            *(["--rdzv-conf=is_host=0"] if rendezvous.hosted else [])]
        return [python, "-m", "torch.distributed.run", *where, f"--nproc-per-node={spec.nproc}",
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
    wait_primary: bool = False,
    session: str | None = None,
    rendezvous: Rendezvous | None = None,
) -> list[str]:
    """The full ``nsys profile ... <workload>`` command writing ``<output>.nsys-rep`` + ``.sqlite``;
    ``pytorch`` (a mode list such as ``functions-trace``) adds ``--pytorch=<pytorch>``;
    ``cuda_memory_usage`` adds ``--cuda-memory-usage=true`` when ``trace`` has ``cuda`` (the
    trace's peak GPU memory: perfgate.analysis.resources); ``wait_primary`` adds ``--wait=primary`` (nsys
    ends with the workload's own process, not with the last process it left behind: a daemon,
    persistent DataLoader workers; the supervisor ends those); ``session`` names nsys's session
    (``--session-new``); ``rendezvous``: the command of one node of several (perfgate.capture.nodes)."""
    cmd = [str(nsys), "profile", f"--trace={trace}", "--sample=none", "--cpuctxsw=none"]
    if wait_primary:
        cmd.append("--wait=primary")
    if session:
        cmd.append(f"--session-new={session}")
    if cuda_memory_usage and "cuda" in trace.split(","):
        cmd.append("--cuda-memory-usage=true")
    if pytorch:
        cmd.append(f"--pytorch={pytorch}")
    if capture_range == "cudaProfilerApi":
        cmd += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    elif capture_range.startswith("nvtx:"):
        cmd += ["--capture-range=nvtx", "-p", capture_range.split(":", 1)[1], "--capture-range-end=stop"]
    cmd += ["--export=sqlite", "-o", str(output), "-f", "true"]
    return cmd + workload_command(spec, python, extra_args, rendezvous)


def pytorch_trace_mode(setting: str, nsys: Path | str) -> str | None:
    """The nsys ``--pytorch`` value for the ``pytorch_trace`` setting, or None for no flag.

    ``off``: None. ``auto``: AUTO_PYTORCH_TRACE where this nsys has ``--pytorch`` (None for now).
    A mode list (``functions-trace``, ``autograd-nvtx``, ...): itself; ConfigError when this nsys
    has no ``--pytorch`` (Nsight Systems 2024.x added it)."""
    from perfgate.system.nsys import supports_option

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
    base: Mapping[str, str], capture_range: str = "none", *, autostep: bool = True, threads: int | None = None,
) -> dict[str, str]:
    """The profiled process's environment: ``base`` without secrets (nor other variables holding
    a secret's value), unbuffered Python output,
    and NSYS_NVTX_PROFILER_REGISTER_ONLY=0 for an NVTX capture range (torch's ranges are not
    registered strings). ``autostep``: ``PERFGATE_AUTOSTEP=1`` and autostep's sitecustomize
    folder first on ``PYTHONPATH`` (an existing PYTHONPATH kept after it); off:
    ``PERFGATE_AUTOSTEP=0``. ``threads`` (the ``threads`` setting): ``OMP_NUM_THREADS`` and
    ``MKL_NUM_THREADS``, the CPU threads torch's operators use."""
    from perfgate.system.secrets import scrubbed_environment, secret_values

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
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def prepend_path(entry: str, path: str) -> str:
    """``entry`` first in the ``os.pathsep``-separated ``path``, once, the rest kept in order."""
    rest = [p for p in path.split(os.pathsep) if p != entry] if path else []
    return os.pathsep.join([entry, *rest])
