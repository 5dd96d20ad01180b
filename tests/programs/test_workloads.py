"""The instrumented workloads: knob resolution, and their CPU configurations under the real nsys
(phase ranges in the trace, step counts, the self-report, an injected slowdown, two DDP ranks).

Each capture runs once per module and is shared by the tests that read it."""
from __future__ import annotations

import importlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nsys_run import run_supervised
from workloads import WORKLOADS
from workloads.ladder import (
    MAX_RUNG,
    SEED_V100_SAMPLES_PER_S,
    format_table,
    parse_self_report,
    rung_knobs,
)

PHASES = ("data_load", "h2d", "forward", "backward", "optimizer")
NSYS_OPTIONS = ("--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none", "--export=sqlite", "-f", "true")
SELF_REPORT_KEYS = {"workload", "device", "steps", "warmup_steps", "batch_size", "world_size",
                    "step_ms_median", "step_ms_mean", "samples_per_s"}
STEPS = 4
WARMUP = 1


@dataclass(frozen=True)
class Range:
    name: str
    start: int
    end: int
    pid: int
    tid: int

    @property
    def ms(self) -> float:
        return (self.end - self.start) / 1e6


@dataclass(frozen=True)
class Captured:
    ranges: tuple[Range, ...]
    report: dict[str, Any]
    output: str

    def named(self, name: str) -> list[Range]:
        return [r for r in self.ranges if r.name == name]


def _read_ranges(sqlite_path: Path) -> tuple[Range, ...]:
    with sqlite3.connect(sqlite_path) as db:
        rows = db.execute(
            "SELECT text, start, end, globalTid FROM NVTX_EVENTS "
            "WHERE eventType = 59 AND text IS NOT NULL AND end IS NOT NULL ORDER BY start"
        ).fetchall()
    return tuple(Range(text, start, end, (gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF)
                 for text, start, end, gtid in rows)


def _capture(nsys: str, repo: Path, out: Path, launch: list[str]) -> Captured:
    env = {k: v for k, v in os.environ.items() if k != "PERFGATE_NVTX"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    command = [nsys, "profile", *NSYS_OPTIONS, "-o", str(out), *launch]
    done = run_supervised(command, cwd=repo, env=env, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{command}\n{output[-4000:]}"
    report = parse_self_report(done.stdout)
    assert report is not None, f"no PERFGATE_SELF_REPORT line in:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return Captured(_read_ranges(out.with_suffix(".sqlite")), report, done.stdout)


def _python_m(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"workloads.{name}", "--device", "cpu", "--size", "cpu",
            "--steps", str(STEPS), "--warmup-steps", str(WARMUP), *args]


@pytest.fixture(scope="module")
def cifar(nsys_path, torch_module, repo_root, tmp_path_factory) -> Captured:
    return _capture(nsys_path, repo_root, tmp_path_factory.mktemp("cifar") / "base", _python_m("resnet_cifar"))


@pytest.fixture(scope="module")
def lm_slow_forward(nsys_path, torch_module, repo_root, tmp_path_factory) -> Captured:
    """The LM's forward takes a few ms on the CPU, so the injected 50 ms stands out of the
    noise of a busy machine (ResNet-18's forward varies by tens of ms there)."""
    launch = _python_m("transformer_lm", "--slow-phase", "forward", "--slow-ms", "50")
    return _capture(nsys_path, repo_root, tmp_path_factory.mktemp("lm") / "slow", launch)


@pytest.fixture(scope="module")
def imagefolder_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("imagefolder") / "folder"


@pytest.fixture(scope="module")
def imagefolder(nsys_path, torch_module, repo_root, tmp_path_factory, imagefolder_dir) -> Captured:
    launch = _python_m("resnet_imagefolder", "--images", "24", "--data-dir", str(imagefolder_dir))
    return _capture(nsys_path, repo_root, tmp_path_factory.mktemp("imagefolder") / "run", launch)


@pytest.fixture(scope="module")
def lm(nsys_path, torch_module, repo_root, tmp_path_factory) -> Captured:
    return _capture(nsys_path, repo_root, tmp_path_factory.mktemp("lm") / "run", _python_m("transformer_lm"))


@pytest.fixture(scope="module")
def ddp_two(nsys_path, torch_module, repo_root, tmp_path_factory) -> Captured:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone"]
    launch = torchrun + _python_m("ddp")[1:]          # "-m workloads.ddp ..."
    return _capture(nsys_path, repo_root, tmp_path_factory.mktemp("ddp") / "run", launch)


def _assert_steps_hold_each_phase_once(captured: Captured, steps: int, processes: int = 1) -> None:
    """Per process: ``steps`` step ranges and ``WARMUP`` warmup_step ranges, each holding exactly
    one range of every phase, in loop order."""
    outers = [r for r in captured.ranges if r.name in ("step", "warmup_step")]
    by_pid: dict[int, list[Range]] = defaultdict(list)
    for outer in outers:
        by_pid[outer.pid].append(outer)
    assert len(by_pid) == processes
    for pid, own in by_pid.items():
        assert [r.name for r in own] == ["warmup_step"] * WARMUP + ["step"] * steps
        for outer in own:
            inside = [r for r in captured.ranges
                      if r.pid == pid and r.tid == outer.tid and r.name in PHASES
                      and outer.start <= r.start and r.end <= outer.end]
            assert [r.name for r in inside] == list(PHASES)


@pytest.mark.parametrize("name", WORKLOADS)
def test_help_lists_the_common_knobs(name: str, torch_module, capsys) -> None:
    module = importlib.import_module(f"workloads.{name}")
    with pytest.raises(SystemExit) as exited:
        module.main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--device", "--steps", "--warmup-steps", "--batch-size", "--workers", "--no-pin-memory",
                 "--non-blocking", "--amp", "--compile", "--channels-last", "--overlap-copy",
                 "--cudnn-benchmark", "--deterministic", "--size", "--slow-phase", "--slow-ms",
                 "--sync-phase", "--profile-range", "--ladder-rung"):
        assert flag in text, flag


def _knobs(name: str, *argv: str):
    from workloads._common import parse_knobs

    module = importlib.import_module(f"workloads.{name}")
    return parse_knobs(module.WORKLOAD, list(argv))


def test_cpu_size_is_small_and_gpu_size_is_the_real_job(torch_module) -> None:
    cpu = _knobs("resnet_cifar", "--device", "cpu")
    assert (cpu.size, cpu.batch_size, cpu.extra["image_size"], cpu.threads) == ("cpu", 4, 64, 1)
    gpu = _knobs("resnet_cifar", "--device", "cpu", "--size", "gpu")
    assert (gpu.batch_size, gpu.extra["image_size"], gpu.steps, gpu.workers) == (256, 224, 60, 8)


def test_ladder_rung_sets_seed_knobs_and_explicit_flags_win(torch_module) -> None:
    rung5 = _knobs("resnet_cifar", "--device", "cpu", "--ladder-rung", "5")
    assert (rung5.workers, rung5.pin_memory, rung5.non_blocking, rung5.amp, rung5.batch_size,
            rung5.compile, rung5.overlap_copy) == (8, True, True, True, 512, False, False)
    overridden = _knobs("resnet_cifar", "--device", "cpu", "--ladder-rung", "5", "--batch-size", "7", "--no-amp")
    assert (overridden.batch_size, overridden.amp, overridden.workers) == (7, False, 8)


def test_ladder_rungs_add_one_change_each() -> None:
    assert rung_knobs(0) == {"workers": 0, "pin_memory": False, "non_blocking": False, "amp": False,
                             "batch_size": 32, "compile": False, "overlap_copy": False}
    changed = [{k for k in rung_knobs(r) if rung_knobs(r)[k] != rung_knobs(r - 1)[k]}
               for r in range(1, MAX_RUNG + 1)]
    assert changed == [{"workers"}, {"pin_memory"}, {"non_blocking"}, {"amp"}, {"batch_size"},
                       {"compile"}, {"overlap_copy"}]
    with pytest.raises(ValueError, match="--ladder-rung"):
        rung_knobs(8)


def test_self_report_is_found_amid_other_processes_output() -> None:
    report = '{"steps": 4, "world_size": 2}'
    output = f"noise\n[W] rank 1 warningPERFGATE_SELF_REPORT {report}[1/2] [0%   ]\nPERFGATE_SELF_REPORT {{broken\n"
    assert parse_self_report(output) == {"steps": 4, "world_size": 2}
    assert parse_self_report("PERFGATE_SELF_REPORT [1, 2]\nnothing here") is None


def test_ladder_table_shows_each_rung_beside_the_seed() -> None:
    table = format_table([{"ladder_rung": 0, "samples_per_s": 100.0}, {"ladder_rung": 1, "samples_per_s": 150.0}])
    lines = table.splitlines()
    assert len(lines) == 3
    assert "100.0" in lines[1] and f"{SEED_V100_SAMPLES_PER_S[0]:.1f}" in lines[1]
    assert "+50.0%" in lines[2] and "+47.0%" in lines[2]       # ours, then the seed's 797.8/542.7


@pytest.mark.parametrize("argv, message", [
    (["--slow-ms", "5"], "--slow-ms and --slow-gpu-ms need --slow-phase"),
    (["--slow-phase", "forward"], "--slow-phase needs --slow-ms"),
    (["--steps", "0"], "must be >= 1"),
])
def test_bad_knobs_exit_2_naming_the_flag(argv: list[str], message: str, torch_module, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        _knobs("resnet_cifar", "--device", "cpu", *argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_resnet_cifar_trace_has_steps_with_every_phase(cifar: Captured) -> None:
    _assert_steps_hold_each_phase_once(cifar, STEPS)


def test_self_report_line_parses_with_the_run_numbers(cifar: Captured) -> None:
    report = cifar.report
    assert SELF_REPORT_KEYS <= set(report)
    assert (report["workload"], report["device"], report["steps"], report["warmup_steps"],
            report["batch_size"], report["world_size"]) == ("resnet_cifar", "cpu", STEPS, WARMUP, 4, 1)
    assert cifar.output.count("PERFGATE_SELF_REPORT ") == 1
    step_ms = [r.ms for r in cifar.named("step")]
    assert report["step_ms_median"] == pytest.approx(statistics.median(step_ms), rel=0.05, abs=2.0)
    assert report["samples_per_s"] == pytest.approx(4 * STEPS / (sum(step_ms) / 1e3), rel=0.05)


def test_slow_forward_makes_every_forward_range_50ms_longer(lm: Captured, lm_slow_forward: Captured) -> None:
    base = [r.ms for r in lm.named("forward")]
    slow = [r.ms for r in lm_slow_forward.named("forward")]
    assert len(slow) == STEPS + WARMUP
    assert min(slow) >= 50.0
    # the sleep adds 50 ms; the forward's own work varies as much as it did across the unchanged
    # launch's forward ranges (more on a loaded machine: issue 30, item 8), at least 5 ms
    assert min(slow) - min(base) >= 50.0 - max(5.0, max(base) - min(base))
    assert statistics.median(slow) - statistics.median(base) >= 40.0
    backward_gap = statistics.median(r.ms for r in lm_slow_forward.named("backward")) - statistics.median(
        r.ms for r in lm.named("backward"))
    assert backward_gap < 25.0                                  # the sleep stays in its own phase


def test_imagefolder_trace_has_steps_with_every_phase(imagefolder: Captured) -> None:
    _assert_steps_hold_each_phase_once(imagefolder, STEPS)
    assert imagefolder.report["workload"] == "resnet_imagefolder"


def test_imagefolder_generates_decodable_jpegs_into_data_dir(imagefolder: Captured, imagefolder_dir: Path) -> None:
    from PIL import Image

    files = sorted((imagefolder_dir / "train").glob("*/*.JPEG"))
    assert len(files) == 24
    assert len({f.parent.name for f in files}) == 24           # fewer images than classes: one each
    with Image.open(files[0]) as image:
        assert (image.format, image.size, image.mode) == ("JPEG", (64, 64), "RGB")


def test_transformer_lm_trace_has_steps_with_every_phase(lm: Captured) -> None:
    _assert_steps_hold_each_phase_once(lm, STEPS)
    assert (lm.report["workload"], lm.report["batch_size"]) == ("transformer_lm", 4)


def test_ddp_under_torchrun_traces_two_ranks(ddp_two: Captured) -> None:
    _assert_steps_hold_each_phase_once(ddp_two, STEPS, processes=2)
    assert ddp_two.report["world_size"] == 2
    assert ddp_two.output.count("PERFGATE_SELF_REPORT ") == 1   # rank 0 only


def test_ddp_runs_alone_as_world_size_one(torch_module, repo_root) -> None:
    launch = _python_m("ddp")[:-4] + ["--steps", "2", "--warmup-steps", "0"]
    env = {**os.environ, "PYTHONPATH": str(repo_root)}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    done = subprocess.run(launch, cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = parse_self_report(done.stdout)
    assert report is not None
    assert (report["world_size"], report["steps"], report["warmup_steps"]) == (1, 2, 0)
    assert json.loads(json.dumps(report)) == report


def test_slow_data_ms_costs_each_batch_that_much_in_the_dataset(torch_module) -> None:
    """``--slow-data-ms`` sleeps in ``__getitem__`` (where a DataLoader worker runs the transform):
    one batch of 4 samples costs 40 ms more to load, none of it in the training loop's phases."""
    import time

    from workloads import _common, resnet_cifar

    knobs = _common.parse_knobs(resnet_cifar.WORKLOAD, ["--device", "cpu", "--batch-size", "4",
                                                         "--slow-data-ms", "40"])
    assert knobs.slow_data_ms == 40.0 and knobs.slow_phase is None
    parts = resnet_cifar.build(knobs, 8)
    slow = _common._SlowItems(parts.dataset, knobs.slow_data_ms / 1e3 / knobs.batch_size)
    loader = _common.make_loader(slow, knobs, 8, _common.Dist(), False)
    began = time.perf_counter()
    next(iter(loader))
    assert time.perf_counter() - began >= 0.040
    assert len(slow) == len(parts.dataset) and slow[0][1] == parts.dataset[0][1]
