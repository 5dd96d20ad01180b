"""The gate's stages wired together, shared by the pytest plugin and the CLI.

``run_workload``: the launches (each captured, analyzed, checked and diagnosed: ``launch_analysis``)
-> the looks against this machine's baseline and the verdict (perfgate.gate.sequential_looks.run_looks)
-> when it fails or is unclear, the base measured in this job beside this checkout (perfgate.pipeline.confirmation)
-> ``judge`` (perfgate.pipeline.judge: notes, noise, the diagnosis of a change) -> WorkloadResult (the
command writes it as ``result.json`` in the run directory); or ``record`` a baseline. Each stage is
walked once, in that order.
"""
from __future__ import annotations

import contextlib
import statistics
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.analysis.resources import attach_resources
from perfgate.capture.gpu_monitor import GpuMonitor
from perfgate.system.secrets import WITHHELD_SUFFIX
from perfgate.errors import PerfgateError, StaleBaselineError, TraceError, os_error_message
from perfgate.baselines.store import (
    Baseline, baseline_from_analyses, baseline_path, check_identity, load_baseline, profile_metrics, write_baseline,
)
from perfgate.baselines.lock import recording_lock
from perfgate.baselines.provenance import command_line, recording
from perfgate.pipeline.confirmation import ConfirmRun, confirm_if_wanted, pull_request_commit
from perfgate.pipeline.inputs import diagnosed
from perfgate.pipeline.judge import judge
from perfgate.records.launch_checks import GpuClocks
from perfgate.records.model import Analysis, Capture, Verdict, WorkloadResult
from perfgate.records.notes import SUMMARY, WARNING, Note
from perfgate.settings.config import Settings
from perfgate.settings.workloads import WorkloadSpec
from perfgate.system.machine import this_machine
from perfgate.system.process_tree import swallowed_interrupt

if TYPE_CHECKING:
    from perfgate.analysis import AnalysisOptions
    from perfgate.trace.export import Trace
    from perfgate.gate.compare import ComparePolicy, Outcome
    from perfgate.gate.sequential_looks import LookRun
    from perfgate.settings.pyproject import WorkloadConfig



def compare_policy(settings: Settings, spec: WorkloadSpec | WorkloadConfig | None = None) -> ComparePolicy:
    """The ComparePolicy of a workload (its spec, or its ``[tool.perfgate.workloads]`` table; None:
    the global tables alone). Tolerances, first match wins: the command line's, the workload
    table's, the ``[tool.perfgate.tolerance]`` table's, the metric's default. ``perfgate run``,
    ``pytest --perfgate`` and ``perfgate compare`` all take theirs from here."""
    from perfgate.gate.compare import ComparePolicy

    overrides = (settings.option_tolerances, *([spec.tolerances] if spec else []))
    return ComparePolicy(tolerances=settings.tolerances, tolerance_overrides=overrides, alpha=settings.alpha,
                         strict_new=settings.strict, gate_alone=spec.gate_alone if spec else ())


def new_run_dir(artifacts_dir: Path, name: str) -> Path:
    """A fresh ``<artifacts>/<UTC timestamp>-<name>/`` directory."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    run_dir = artifacts_dir / f"{stamp}-{safe}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


Progress = Callable[[str], None]
#: With ``profile = "auto"`` a gate run takes the CUDA profile launch only when there is something to
#: explain or nothing to compare with: a PASS costs its timing launches alone (GPU metrics gate only
#: behind step time, so they cannot fail a run whose step time passed).
PROFILED_VERDICTS = (Verdict.REGRESSED, Verdict.INCONCLUSIVE, Verdict.NEW)


def run_workload(
    spec: WorkloadSpec,
    settings: Settings,
    *,
    update_baseline: bool = False,
    cwd: Path | None = None,
    extra_args: Sequence[str] = (),
    progress: Progress | None = None,
) -> WorkloadResult:
    """Measure ``spec`` under nsys and judge it against its baseline (or record one).

    Timing launches (``nvtx`` only: they measure what the bare run does) are taken one at a time while
    the verdict is not clear, within ``settings.budget`` (perfgate.gate.sequential_looks); then, on a machine with
    a GPU, one CUDA-traced profile launch gives GPU idle, GPU time per phase, kernels and the
    diagnosis. ``progress`` receives a line per launch and per look. Never raises for a problem of
    this workload: it comes back as verdict ERROR with ``error``."""
    started = time.monotonic()
    say = progress or (lambda line: None)
    result = WorkloadResult(workload=spec.name, variant=spec.variant, verdict=Verdict.ERROR, strict=settings.strict)
    try:
        result = replace(result, run_dir=new_run_dir(settings.artifacts_dir, spec.full_name))
        machine = this_machine(settings.nsys, settings.machine_class)
        result = replace(result, machine=machine, record_command=settings.record_command(spec.full_name))
        path = baseline_path(settings.baseline_dir, spec.name, machine.machine_class, spec.variant)
        policy = compare_policy(settings, spec)
        if update_baseline:
            with recording_lock(path):    # a second recording of this baseline at once stops here
                launcher = _Launcher(spec, settings, result, cwd, extra_args, say, time.monotonic(), recording=True)
                launcher.record()
                result = replace(result, analyses=launcher.timing, profile=launcher.profile)
                written = write_recording(result, spec, settings, path, cwd)
            result = recorded(result, written, spec, settings, path, policy)
        else:
            baseline = load_baseline(path) if path.exists() else None
            if baseline is not None:   # the report names the baseline a run used, never one that is not there
                result = replace(result, baseline_path=path)
                check_identity(baseline, spec.name, spec.variant, machine.machine_class)
                from perfgate.baselines.staleness import baseline_staleness

                stale = baseline_staleness(baseline, spec, settings, machine, cwd, base=pull_request_commit(settings))
                if stale.stale or stale.edits:
                    result = replace(result, provenance=stale)
            launcher = _Launcher(spec, settings, result, cwd, extra_args, say, started)
            run = _measure(launcher, baseline, policy, settings)
            result = replace(result, analyses=launcher.timing, profile=launcher.profile)
            confirmed = _confirm(launcher, baseline, run, policy)   # may take the profile launch
            result = judge(replace(result, profile=launcher.profile), spec, settings, baseline, path, run, confirmed)
    except StaleBaselineError as exc:   # the fix is a recording: say how, in this command's words
        result = replace(result, verdict=Verdict.ERROR, error=f"{exc}: {settings.record_command(spec.full_name)}",
                         notes=())
    except PerfgateError as exc:
        result = replace(result, verdict=Verdict.ERROR, error=str(exc), notes=())
    except OSError as exc:  # a full disk, a folder perfgate may not write: the file and why
        result = replace(result, verdict=Verdict.ERROR, error=os_error_message(exc), notes=())
    except Exception as exc:  # a bug must not hide the other workloads' results (a Ctrl-C must stop them)
        if (interrupt := swallowed_interrupt(exc)) is not None:
            raise interrupt from exc
        text = "".join(traceback.format_exception(exc))
        where = ""
        if result.run_dir is not None:
            with contextlib.suppress(OSError):
                (result.run_dir / "error.txt").write_text(text)
                where = f" (traceback in {result.run_dir / 'error.txt'})"
        result = replace(result, verdict=Verdict.ERROR, error=f"internal error: {type(exc).__name__}: {exc}{where}",
                         notes=())
    return replace(result, wall_s=time.monotonic() - started)


def write_recording(result: WorkloadResult, spec: WorkloadSpec, settings: Settings, path: Path,
                    cwd: Path | None) -> Baseline:
    """The baseline of the recording's launches (``result.analyses`` and ``.profile``), written
    atomically at ``path``: PerfgateError when it cannot be (the previous one unchanged)."""
    from perfgate.baselines.staleness import run_provenance

    assert result.machine is not None
    measured = run_provenance(spec, settings, result.machine, cwd)
    baseline = baseline_from_analyses(spec.name, result.analyses, result.machine,
                                      {**recording(settings.root, command_line()), **measured.to_dict()},
                                      spec.variant, profile=result.profile)
    try:
        write_baseline(path, baseline)
    except OSError as exc:   # written atomically: whatever baseline was there is unchanged
        raise PerfgateError(f"{path}: baseline not written: {exc.strerror or exc} "
                            "(the previous baseline, if any, is unchanged)") from None
    return baseline


def recorded(result: WorkloadResult, baseline: Baseline, spec: WorkloadSpec, settings: Settings, path: Path,
             policy: ComparePolicy) -> WorkloadResult:
    """``result`` of a recording written at ``path``: PASS, and a message that says what was recorded
    and what the workload's noise lets the gate catch."""
    from perfgate.gate.sequential_looks import noise_report, noise_warning

    noise = noise_report(baseline.launch_metrics, settings.budget, policy)
    n = len(result.analyses)
    step = [a.steps.time_ms for a in result.analyses]
    profiled = " + a CUDA profile launch" if result.profile is not None else ""
    warning = noise_warning(noise, spec.full_name, policy)
    notes = (Note(SUMMARY, f"baseline recorded: {path} ({n} launch{'es' if n != 1 else ''}{profiled}); "
                           f"step_time_ms {statistics.median(step):.4g} ms; {noise.describe()}"),
             *([Note(WARNING, warning)] if warning else []))
    return replace(result, baseline_path=path, verdict=Verdict.PASS, notes=notes, baseline_updated=True, noise=noise)


class _Launcher:
    """Takes the launches of one gate run into the result's run folder (``launch-<k>/`` timing,
    ``profile/``) and reports each as it ends."""

    def __init__(self, spec: WorkloadSpec, settings: Settings, result: WorkloadResult, cwd: Path | None,
                 extra_args: Sequence[str], say: Progress, started: float, *, recording: bool = False) -> None:
        from perfgate.capture.command import profile_launch_wanted

        assert result.run_dir is not None and result.machine is not None
        self.spec, self.settings, self.run_dir, self.cwd, self.extra_args = spec, settings, result.run_dir, cwd, extra_args
        self.say, self.started, self.recording = say, started, recording
        self.timing: list[Analysis] = []
        self.profile: Analysis | None = None
        self.gpu_count = result.machine.gpu_count
        self.wants_profile = profile_launch_wanted(settings, self.gpu_count)

    def timing_launch(self, k: int) -> Analysis:
        from perfgate.capture.command import TIMING

        analysis = launch_analysis(self.spec, self.settings, self.run_dir / f"launch-{k}", k, TIMING,
                                  cwd=self.cwd, extra_args=self.extra_args, progress=self.say)
        self.timing.append(analysis)
        medians = [a.steps.time_ms for a in self.timing]
        most = self.settings.record_launches if self.recording else self.settings.max_launches
        self.say(f"{self.spec.full_name}: launch {k + 1} of {'' if self.recording else 'up to '}{most}"
                 f"{' (recording)' if self.recording else ''}: step {medians[-1]:.4g} ms"
                 + (f", median of launches {statistics.median(medians):.4g} ms" if len(medians) > 1 else "")
                 + f"; {time.monotonic() - self.started:.0f} s")
        return analysis

    def record(self) -> None:
        """The recording's launches: ``settings.record_launches`` timing launches, then the profile launch."""
        for k in range(self.settings.record_launches):
            self.timing_launch(k)
        self.profile_launch()

    def profile_launch(self) -> None:
        """The CUDA-traced launch, when this machine and the settings want one."""
        from perfgate.capture.command import PROFILE

        if not self.wants_profile:
            return
        self.profile = launch_analysis(self.spec, self.settings, self.run_dir / "profile", 0, PROFILE,
                                      cwd=self.cwd, extra_args=self.extra_args, progress=self.say)
        idle = self.profile.gpu_idle
        self.say(f"{self.spec.full_name}: profile launch (CUDA traced): "
                 + (f"GPU idle {idle.fraction * 100:.1f} %" if idle is not None else "no GPU activity")
                 + f"; {time.monotonic() - self.started:.0f} s")


def _measure(launcher: _Launcher, baseline: Baseline | None, policy: ComparePolicy, settings: Settings) -> LookRun:
    """Timing launches one at a time, a look after each, then the profile launch when
    ``settings.profile`` asks for it (PROFILED_VERDICTS under auto), its GPU metrics in the verdict:
    perfgate.gate.sequential_looks.run_looks, the one place the looks and the verdict are compared."""
    from perfgate.gate.sequential_looks import Look, run_looks

    def on_look(look: Look) -> None:
        if look.outcome.verdict != Verdict.NEW:
            launcher.say(f"{launcher.spec.full_name}: after {look.launches} launch"
                         f"{'es' if look.launches != 1 else ''}: {look.outcome.summary.splitlines()[0]}")

    def profile(last: Outcome) -> dict[str, float] | None:
        if settings.profile != "always" and last.verdict not in PROFILED_VERDICTS:
            return None
        launcher.profile_launch()
        if launcher.profile is None:
            return None
        return profile_metrics(launcher.profile, [a.metrics() for a in launcher.timing])

    return run_looks(baseline.launch_metrics if baseline else [], lambda k: launcher.timing_launch(k).metrics(),
                     policy, settings.budget, profile=profile, on_look=on_look)


def _confirm(launcher: _Launcher, baseline: Baseline | None, run: LookRun,
             policy: ComparePolicy) -> ConfirmRun | None:
    """The confirmation against the base (perfgate.pipeline.confirmation), when the settings want one.
    A checked PASS (no profile launch was taken after it) that the pairs fail takes the head's
    profile launch afterwards (``launcher.profile``), and the base's with it, for the diagnosis."""
    def launch(spec: WorkloadSpec, launch_dir: Path, k: int, kind: str, cwd: Path) -> Analysis:
        return launch_analysis(spec, launcher.settings, launch_dir, k, kind, cwd=cwd, extra_args=launcher.extra_args,
                               progress=launcher.say)

    confirmed = confirm_if_wanted(launcher.spec, launcher.settings, baseline, run.outcome, policy, launcher.run_dir,
                                  launch, cwd=launcher.cwd, gpu_count=launcher.gpu_count, say=launcher.say,
                                  started=launcher.started,
                                  profile_base=launcher.wants_profile,
                                  noisy=run.noise is not None and run.noise.too_noisy)
    changed = confirmed is not None and confirmed.outcome is not None and confirmed.outcome.verdict in (
        Verdict.REGRESSED, Verdict.IMPROVED)
    if changed and launcher.profile is None:
        launcher.profile_launch()         # the base's was taken beside the pairs (wants_profile)
    return confirmed


def launch_analysis(spec: WorkloadSpec, settings: Settings, launch_dir: Path, k: int, kind: str, *,
                    cwd: Path | None = None, extra_args: Sequence[str] = (),
                    progress: Progress | None = None) -> Analysis:
    """One launch of ``kind`` (perfgate.capture.command.TIMING or PROFILE) into ``launch_dir``, analyzed,
    checked and diagnosed; ``launch.kind`` says its kind, ``launch.number`` its number. The
    one capture-and-analyze path of the gate, ``perfgate ab`` and ``perfgate calibrate``.
    ``progress`` hears of a capture taken again after a transient nsys failure."""
    return launch_capture_and_analysis(spec, settings, launch_dir, k, kind, cwd=cwd, extra_args=extra_args,
                                       progress=progress)[1]


def launch_capture_and_analysis(spec: WorkloadSpec, settings: Settings, launch_dir: Path, k: int, kind: str, *,
                                cwd: Path | None = None, extra_args: Sequence[str] = (),
                                progress: Progress | None = None) -> tuple[Capture, Analysis]:
    """``launch_analysis``, with the Capture it analyzed (its wall time, its artifacts)."""
    from perfgate.analysis import AnalysisOptions, analyze
    from perfgate.capture.launch import run_capture
    from perfgate.capture.machine_meter import MachineMeter
    from perfgate.trace.nodes import load_job

    with GpuMonitor() as monitor, MachineMeter() as meter:   # the machine beside the launch
        capture = run_capture(spec, settings, launch_dir, cwd=cwd, extra_args=extra_args, kind=kind,
                              progress=progress)
    withheld = sorted(capture.run_dir.glob(f"*{WITHHELD_SUFFIX}"))
    if capture.sqlite_path is None or not capture.sqlite_path.exists():
        exports = [w for w in withheld if w.name.endswith(f".sqlite{WITHHELD_SUFFIX}")]
        if exports:   # nsys wrote one; perfgate could not clean it (a full disk during the redaction)
            with contextlib.suppress(OSError, IndexError):
                why = exports[0].read_text(encoding="utf-8", errors="replace").splitlines()[0]
                raise TraceError(f"{capture.run_dir}: {why} (see {exports[0]})")
        raise TraceError(f"{capture.run_dir}: nsys left no SQLite export{withheld and f' (withheld: {withheld[0]})' or ''}")
    trace = load_job(capture.node_sqlite or [capture.sqlite_path])   # one report, or one per node
    options = AnalysisOptions.given(spec.step_pattern, spec.skip_steps, spec.batch_size)
    analysis = analyze(trace, _with_reported_batch(options, capture.self_report))
    notes = [f"launch {k}: {p.name.removesuffix(WITHHELD_SUFFIX)} withheld ({p})" for p in withheld]
    notes += _steps_trace_file(trace, options, capture.run_dir, k)
    notes += [f"launch {k}: nsys failed ({why}) and the capture was taken again" for why in capture.retried]
    launch = replace(analysis.launch, number=k, kind=kind, self_report=capture.self_report,
                     machine_state=meter.report(),
                     notes=(*analysis.launch.notes, *notes))   # the result's message says so
    analysis = _checked(replace(analysis, launch=launch), k, monitor.report())
    analysis = attach_resources(analysis, monitor.samples, trace.session_start_utc_ns)  # memory, energy
    return capture, diagnosed(analysis)


def _steps_trace_file(trace: Trace, options: AnalysisOptions, run_dir: Path, k: int) -> list[str]:
    """The launch's 3 steps around its median one as a Chrome trace in its folder (Perfetto opens
    it); a launch whose file cannot be made says why in a note, and is analysed all the same."""
    from perfgate.analysis.step_trace import steps_trace
    from perfgate.records.launch import STEPS_TRACE_FILE
    from perfgate.system.files import write_json_atomically

    try:
        write_json_atomically(run_dir / STEPS_TRACE_FILE, steps_trace(trace, options.step_pattern, options.skip_steps,
                                                                      label=f"launch {k}"))
    except (PerfgateError, OSError) as exc:
        return [f"launch {k}: no {STEPS_TRACE_FILE} ({exc})"]
    return []


def _checked(analysis: Analysis, launch: int, clocks: GpuClocks | None) -> Analysis:
    """``analysis`` with the launch's measurement checks: whether its measured steps look stationary
    (no drift, no second level inside the window: stats.stability) and, with NVML, its GPU clocks
    and whether the GPU throttled. A failed check becomes a note of the launch (its record's warnings)."""
    from perfgate.gate.statistics import stability

    notes = list(analysis.launch.notes)
    report = stability(list(analysis.steps.durations_ms))
    facts = replace(analysis.launch, stability=report)
    if not report.stable:
        notes.append(f"launch {launch}: measured steps are not stable ({'; '.join(report.reasons)})")
    if clocks is not None:
        facts = replace(facts, gpu_clocks=clocks)
        if clocks.throttled:
            notes.append(f"launch {launch}: the GPU throttled ({', '.join(clocks.reasons)}); "
                         f"SM clock {clocks.sm_mhz_min}-{clocks.sm_mhz_max} MHz")
    return replace(analysis, launch=replace(facts, notes=tuple(notes)))


def _with_reported_batch(options: AnalysisOptions, self_report: Mapping[str, Any] | None) -> AnalysisOptions:
    """``options`` with the batch size the workload reported (x world size) when none is configured."""
    if options.batch_size is not None or not self_report:
        return options
    batch, world = self_report.get("batch_size"), self_report.get("world_size") or 1
    if isinstance(batch, int) and isinstance(world, int) and batch > 0 and world > 0:
        return replace(options, batch_size=batch * world)
    return options


