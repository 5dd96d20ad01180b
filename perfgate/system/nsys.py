"""Finding and driving the ``nsys`` executable: where it is, which version, SQLite export, and
``nsys stats`` reports under either naming scheme (``nvtxsum`` on 2022.4, ``nvtx_sum`` later)."""
from __future__ import annotations

import functools
import glob
import io
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfgate.errors import ConfigError, NsysNotFoundError, TraceError

ENV_VAR = "PERFGATE_NSYS"

# Globs searched after the explicit option, $PERFGATE_NSYS and $PATH, in this order.
SEARCH_GLOBS: tuple[str, ...] = (
    "/usr/local/cuda*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/target-linux-x64/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)

# Current report name -> the name nsys used before the 2023 rename (None: no old equivalent).
REPORT_ALIASES: dict[str, str | None] = {
    "nvtx_sum": "nvtxsum",
    "nvtx_pushpop_sum": "nvtxppsum",
    "nvtx_pushpop_trace": "nvtxpptrace",
    "nvtx_startend_sum": "nvtxsesum",
    "nvtx_kern_sum": "nvtxkernsum",
    "nvtx_gpu_proj_trace": "nvtxgpuproj",
    "nvtx_gpu_proj_sum": None,
    "cuda_gpu_kern_sum": "gpukernsum",
    "cuda_api_sum": "cudaapisum",
    "cuda_api_trace": "cudaapitrace",
    "cuda_gpu_mem_time_sum": "gpumemtimesum",
    "cuda_gpu_mem_size_sum": "gpumemsizesum",
    "cuda_gpu_sum": "gpusum",
    "cuda_gpu_trace": "gputrace",
    "cuda_api_gpu_sum": "apigpusum",
    "osrt_sum": "osrtsum",
}


# What nsys printed when it failed beside other nsys sessions of the machine, before it recorded
# anything or while it collected (nsys 2022.4; seen on this project's CPU machine with 4 captures
# at once, and in CI runs): its agent, its session table, not the workload. Worth another try.
TRANSIENT_FAILURES = re.compile(
    r"Connection reset by peer|End of file|sem_open|Local Endpoint is not available|GetLocalEndpoint"
    r"|Connection to the Agent lost|Agent launcher failed|ProcessWaiterImpl"
)


def transient_failure(log: str) -> str | None:
    """The first line of an nsys log that names one of TRANSIENT_FAILURES, shortened; else None."""
    for line in log.splitlines():
        line = line.rsplit("\r", 1)[-1].strip()
        if TRANSIENT_FAILURES.search(line):
            return line if len(line) <= 160 else line[:157] + "..."
    return None


def started_workload(supervisor: int) -> bool:
    """Whether nsys, run under perfgate's supervisor (pid ``supervisor``), has started the program
    it profiles (perfgate.system.nsys_program.started of the supervisor's child). True where it
    cannot be told (no child yet, a wrapper script, a process that cannot be read)."""
    from perfgate.system.nsys_program import started
    from perfgate.system.supervisor import descendants

    tree = descendants(supervisor)
    return not tree or started(tree[0], descendants)


def await_start(supervisor: int, ended: Callable[[], bool], deadline: float) -> None:
    """Return once the nsys that perfgate's supervisor (pid ``supervisor``) runs has started the
    program it profiles (or it cannot be told: perfgate.system.nsys_program.started), has ended
    (``ended()``), or ``time.monotonic()`` passed ``deadline``; the caller holds its turn to start meanwhile
    (nsys_program.turn_to_start)."""
    from perfgate.system.nsys_program import POLL_S, started
    from perfgate.system.supervisor import descendants

    while not ended() and time.monotonic() < deadline:
        tree = descendants(supervisor)
        if tree and _executed(tree[0], supervisor) and started(tree[0], descendants):
            return
        time.sleep(POLL_S)


def _executed(child: int, parent: int) -> bool:
    """Whether ``child`` runs its own program yet: forked and not yet executed, it has its parent's
    command line."""
    try:
        return Path(f"/proc/{child}/cmdline").read_bytes() != Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        return True


SHARED_MEMORY = Path("/dev/shm")


def clear_stale_session_table(shm: Path = SHARED_MEMORY) -> list[Path]:
    """Remove nsys's session table (``/dev/shm/NSys-<version>``, this user's) where no nsys runs on
    the machine; returns what was removed. nsys keeps one table for all its sessions and removes it
    when the last one ends; a session killed in a hang left it behind (seen with nsys 2022.4 on this
    project's CPU machine), and every nsys after it, one at a time too, failed with "Agent launcher
    failed." (and left its agent running) until the file was removed."""
    if _nsys_running():
        return []
    removed = []
    for table in shm.glob("NSys-*"):
        try:
            if table.is_file() and table.stat().st_uid == os.getuid():
                table.unlink()
                removed.append(table)
        except OSError:
            continue
    return removed


def _nsys_running() -> bool:
    """Whether any live process of the machine is nsys (its command name, readable for every
    process; a zombie, ended but not yet reaped, does not count)."""
    from perfgate.system.supervisor import live_processes

    return any(name == "nsys" for _, _, name in live_processes())


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_nsys(explicit: str | None = None, source: str = "option", option: str = "--nsys") -> Path:
    """The nsys to use: ``explicit`` (a setting's value; ``source`` says where it came from, e.g.
    ``environment variable PERFGATE_NSYS``), then ``$PERFGATE_NSYS``, then ``$PATH``, then the
    CUDA toolkit and Nsight Systems/Compute install folders. ``option``: the command's option for
    it, named when none is found (``--nsys``, ``--perfgate-nsys``)."""
    looked: list[str] = []
    for source, value in ((source, explicit), (f"environment variable {ENV_VAR}", os.environ.get(ENV_VAR))):
        if not value:
            continue
        path = Path(value).expanduser()
        if path.is_dir():
            path = path / "nsys"
        if _is_executable(path):
            return path
        raise NsysNotFoundError(f"nsys not found: {source} names {value}, which is not an executable file")
    on_path = shutil.which("nsys")
    looked.append("$PATH")
    if on_path:
        return Path(on_path)
    for pattern in SEARCH_GLOBS:
        looked.append(pattern)
        for candidate in sorted(glob.glob(pattern), reverse=True):  # newest version first
            if _is_executable(Path(candidate)):
                return Path(candidate)
    raise NsysNotFoundError(
        "nsys not found; looked in " + ", ".join(looked)
        + f". Install Nsight Systems or set {ENV_VAR} / {option} to its path"
    )


@functools.lru_cache(maxsize=16)
def nsys_version(nsys: Path) -> str:
    """The version nsys reports, e.g. ``2022.4.2.1`` (from ``... version 2022.4.2.1-df9881f``)."""
    out = _run([str(nsys), "--version"], what="nsys --version").stdout
    match = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", out)
    if match is None:
        raise NsysNotFoundError(f"{nsys} --version printed no version: {out.strip()[:200]!r}")
    return match.group(1)


def supports_option(nsys: Path | str, option: str, command: str = "profile") -> bool:
    """Whether ``nsys <command>`` offers ``option`` (e.g. ``--pytorch``, added in 2024.x),
    judged by the options its ``--help`` lists (cached per nsys and command)."""
    return option in _help_options(Path(nsys), command)


@functools.lru_cache(maxsize=16)
def _help_options(nsys: Path, command: str) -> frozenset[str]:
    # each option is listed at the start of a line: "\t--cpuctxsw=" or "\t-t, --trace="
    out = _run([str(nsys), command, "--help"], what=f"nsys {command} --help", check=False)
    text = out.stdout + out.stderr
    return frozenset(re.findall(r"^[ \t]*(?:-[A-Za-z],[ \t]*)?(--[a-z][a-z0-9-]*)", text, flags=re.M))


def export_sqlite(report: Path, nsys: Path | None = None) -> Path:
    """Export an ``.nsys-rep`` to SQLite beside it (reusing an export newer than the report)."""
    report = Path(report)
    if not report.is_file():
        raise TraceError(f"{report}: no such nsys report")
    out = report.with_suffix(".sqlite")
    if out.is_file() and out.stat().st_mtime >= report.stat().st_mtime:
        return out
    exe = nsys or find_nsys()
    # nsys deletes its --output before it writes (--force-overwrite): export beside the report under
    # a name of our own and move it into place only once the export succeeded, so that a failed
    # export (a corrupt report, a full disk) never destroys an existing ``<name>.sqlite``.
    partial = out.with_name(f".{out.stem}.perfgate-export-{os.getpid()}.sqlite")
    try:
        proc = subprocess.run(
            [str(exe), "export", "--type", "sqlite", "--force-overwrite", "true",
             "--output", str(partial), str(report)],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0 or not partial.is_file():
            tail = (proc.stdout + proc.stderr).strip()[-800:]
            raise TraceError(f"{report}: nsys export to SQLite failed (exit {proc.returncode}): {tail}")
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def stats_report_names(nsys: Path) -> set[str]:
    """Names of the built-in ``nsys stats`` reports this nsys offers (``--help-reports``)."""
    return set(_report_names(Path(nsys)))


@functools.lru_cache(maxsize=16)
def _report_names(nsys: Path) -> frozenset[str]:
    # nsys 2022.4 exits 1 after printing the list, so judge by the output, not the exit status
    what = "nsys stats --help-reports"
    out = _run([str(nsys), "stats", "--help-reports"], what=what, check=False).stdout
    # a report may take several option groups: cuda_gpu_kern_sum[:nvtx-name][:base|:mangled] (2025.x)
    names = frozenset(re.findall(r"^\s+([a-z][a-z0-9_]*)(?:\[[^\]]*\])*\s+--", out, flags=re.M))
    if not names:
        raise NsysNotFoundError(f"{what} ({nsys}) listed no reports: {out.strip()[-400:]!r}")
    return names


def resolve_report_name(nsys: Path, report_name: str) -> str:
    """The name under which this nsys offers ``report_name`` (given in either naming scheme)."""
    names = stats_report_names(nsys)
    if report_name in names:
        return report_name
    candidates = [REPORT_ALIASES.get(report_name)]
    candidates += [new for new, old in REPORT_ALIASES.items() if old == report_name]
    for candidate in candidates:
        if candidate and candidate in names:
            return candidate
    raise ConfigError(
        f"nsys {nsys} has no stats report {report_name!r} (nor an older/newer name for it); "
        f"it offers: {', '.join(sorted(names))}"
    )


def stats_csv(nsys: Path, report_name: str, trace: Path) -> Any:
    """Run ``nsys stats -r <report> -f csv`` on ``trace`` and return its table as a pandas frame
    (empty when nsys skips the report because the trace has no such data)."""
    import pandas as pd

    name = resolve_report_name(nsys, report_name)
    with tempfile.TemporaryDirectory(prefix="perfgate-stats-") as tmp:
        prefix = Path(tmp) / "out"
        proc = subprocess.run(
            [str(nsys), "stats", "-q", "-r", name, "-f", "csv", "-o", str(prefix), str(trace)],
            capture_output=True, text=True, check=False,
        )
        produced = Path(f"{prefix}_{name}.csv")
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip()[-800:]
            raise TraceError(f"{trace}: nsys stats -r {name} failed (exit {proc.returncode}): {tail}")
        if not produced.is_file():
            return pd.DataFrame()
        text = produced.read_text()
    if not text.strip():
        return pd.DataFrame()
    return pd.read_csv(io.StringIO(text))


def _run(cmd: list[str], what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
    except OSError as exc:
        raise NsysNotFoundError(f"{what}: cannot run {cmd[0]}: {exc}") from exc
    if check and proc.returncode != 0:
        raise NsysNotFoundError(f"{what} failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
    return proc
