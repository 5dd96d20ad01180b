"""The pipeline on the repository's real resnet_cifar workload under nsys: NEW without a baseline,
recording a baseline, judging against it, result.json, errors as results, and compare_files."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.errors import TraceError
from perfgate.baselines.store import load_baseline
from perfgate.gate.compare import ComparePolicy
from perfgate.gate.sequential_looks import LaunchBudget, LookRun, run_looks
from perfgate.pipeline.inputs import compare_files, metrics_from_document
from perfgate.pipeline.judge import judge
from perfgate.pipeline.workload_run import compare_policy, run_workload
from perfgate.records.model import Verdict
from perfgate.settings.config import load_settings
from perfgate.commands.run import gate_workload
from perfgate.settings.workloads import discover_workloads, select_workloads
from perfgate.report.digest import result_message

SMALL = ("--steps", "3", "--warmup-steps", "1", "--image-size", "32", "--batch-size", "2")


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory, repo_root: Path, nsys_path: str, torch_module: object):
    tmp = tmp_path_factory.mktemp("pipeline")
    settings = load_settings(repo_root, env={}, overrides={
        "artifacts_dir": str(tmp / "runs"), "baseline_dir": str(tmp / "baselines"),
        "report_dir": str(tmp / "report"), "size": "cpu", "timeout_s": 300, "launches": 1})
    spec = select_workloads(discover_workloads(settings), ["resnet_cifar"])[0]
    spec = replace(spec, args=(*spec.args, *SMALL))
    recorded, _ = gate_workload(spec, settings, update=True, progress=None)   # the gate run: result.json too
    return settings, spec, recorded


def test_update_records_a_baseline_of_the_real_workload(gate) -> None:
    settings, _spec, recorded = gate
    assert recorded.verdict == Verdict.PASS, recorded.error
    assert recorded.baseline_path == settings.baseline_dir / "resnet_cifar" / f"{recorded.machine.machine_class}.json"
    baseline = load_baseline(recorded.baseline_path)
    assert len(baseline.launches) == 1 and len(baseline.step_durations_ms) == 2   # 3 step ranges: 2 periods
    metrics = baseline.launch_metrics[0]
    assert {f"phase.{p}.cpu_ms" for p in ("data_load", "h2d", "forward", "backward", "optimizer")} <= set(metrics)
    # the batch size comes from the workload's PERFGATE_SELF_REPORT line (2 samples per step)
    assert metrics["samples_per_s"] == pytest.approx(2 * 1000 / metrics["step_time_mean_ms"], rel=1e-6)


def test_run_directory_keeps_launch_artifacts_and_result_json(gate) -> None:
    _settings, _spec, recorded = gate
    launch = recorded.run_dir / "launch-0"
    assert (launch / "command.txt").exists() and (launch / "workload.log").exists()
    doc = json.loads((recorded.run_dir / "result.json").read_text())
    assert doc["workload"] == "resnet_cifar" and doc["verdict"] == "PASS"
    assert doc["analyses"][0]["self_report"]["steps"] == 3
    assert doc["analyses"][0]["launch"] == 0


def looked(result, baseline, policy: ComparePolicy) -> LookRun:
    """The looks of a gate run whose timing launches were ``result``'s, all taken before one look."""
    n = len(result.analyses)
    return run_looks(baseline.launch_metrics if baseline else [], lambda k: result.analyses[k].metrics(), policy,
                     LaunchBudget(n, n))


def test_same_measurements_pass_against_their_baseline(gate) -> None:
    settings, spec, recorded = gate
    result = replace(recorded, comparisons=[], baseline_updated=False, noise=None)
    baseline = load_baseline(recorded.baseline_path)
    result = judge(result, spec, settings, baseline, recorded.baseline_path,
                   looked(result, baseline, compare_policy(settings, spec)))
    assert result.verdict == Verdict.PASS
    assert result.baseline_step_times_ms == load_baseline(recorded.baseline_path).step_durations_ms
    assert not result.failed and not replace(result, strict=True).failed


def test_no_baseline_is_new_and_fails_only_when_strict(gate) -> None:
    settings, spec, recorded = gate
    strict = replace(settings, strict=True)
    result = replace(recorded, comparisons=[], baseline_updated=False, noise=None)
    result = judge(result, spec, strict, None, settings.baseline_dir / "absent.json",
                   looked(result, None, compare_policy(strict, spec)))
    assert result.verdict == Verdict.NEW
    assert "--perfgate-update-baselines" in result_message(result)
    assert result.strict and result.failed
    lenient = replace(recorded, comparisons=[], baseline_updated=False, noise=None)
    lenient = judge(lenient, spec, settings, None, settings.baseline_dir / "absent.json",
                    looked(lenient, None, compare_policy(settings, spec)))
    assert lenient.verdict == Verdict.NEW and not lenient.failed


def test_crashing_workload_becomes_an_error_result(gate) -> None:
    settings, spec, _recorded = gate
    result, _ = gate_workload(replace(spec, args=("--steps", "0")), settings, update=False, progress=None)
    assert result.verdict == Verdict.ERROR and result.failed
    assert "exited with code 2" in result.error and "--steps" in result.error
    assert json.loads((result.run_dir / "result.json").read_text())["verdict"] == "ERROR"


def test_compare_files_reads_baselines_and_result_json(gate) -> None:
    _settings, _spec, recorded = gate
    outcome = compare_files(recorded.baseline_path, recorded.run_dir / "result.json", ComparePolicy())
    assert outcome.verdict == Verdict.PASS
    assert outcome.row("step_time_ms").change == pytest.approx(0.0)


def test_documents_without_launches_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="x.json: not a perfgate baseline, result or analysis JSON"):
        metrics_from_document({"hello": 1}, tmp_path / "x.json")
    two = {"results": [{"name": "a", "analyses": []}, {"name": "b", "analyses": []}]}
    with pytest.raises(TraceError, match=r"holds 2 workload results \(a, b\)"):
        metrics_from_document(two, tmp_path / "r.json")
    assert metrics_from_document({"metrics": {"step_time_ms": 5}}, tmp_path / "a.json") == [{"step_time_ms": 5.0}]


def test_a_full_disk_while_writing_result_json_is_an_error_naming_the_file(
        gate, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while writing the artifacts gave a traceback and exit 1 ("regression"). The
    run folder's result.json is a link to /dev/full, where every write fails with ENOSPC."""
    import perfgate.pipeline.workload_run as pipeline

    settings, spec, _recorded = gate
    made = pipeline.new_run_dir

    def run_dir_with_a_full_result(artifacts_dir: Path, name: str) -> Path:
        run_dir = made(artifacts_dir, name)
        (run_dir / "result.json").symlink_to("/dev/full")
        return run_dir

    monkeypatch.setattr(pipeline, "new_run_dir", run_dir_with_a_full_result)
    result, _ = gate_workload(spec, settings, update=False, progress=None)
    assert result.verdict == Verdict.ERROR and result.failed
    assert result.error.startswith(f"{result.run_dir / 'result.json'}: No space left on device "
                                   "(the measured verdict was ")
    assert (result.run_dir / "launch-0" / "trace.sqlite").is_file()   # the partial artifacts stay


def test_a_baseline_records_what_it_measured_and_a_gate_against_other_code_says_so_first(gate, tmp_path: Path) -> None:
    from perfgate.records.version import RECORD_VERSION

    settings, spec, recorded = gate
    doc = json.loads(recorded.baseline_path.read_text())
    provenance = doc["provenance"]
    assert provenance["workload_command"] == "python -m workloads.resnet_cifar " + " ".join(spec.args)
    assert {"workloads/resnet_cifar.py", "workloads/_common.py", "perfgate/nvtx.py"} <= set(provenance["sources"])
    assert provenance["record_version"] == RECORD_VERSION
    # the same baseline as if recorded from another version of the workload, under another torch
    provenance["sources"]["workloads/resnet_cifar.py"] = "0" * 16
    doc["machine"]["torch"] = "0.0.1"
    path = tmp_path / "baselines" / "resnet_cifar" / recorded.baseline_path.name
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    result = run_workload(spec, replace(settings, baseline_dir=tmp_path / "baselines"))
    torch = f"; torch 0.0.1 -> {result.machine.torch}" if result.machine.torch else ""
    assert result_message(result).splitlines()[0] == \
        f"warning: the baseline was recorded from other code: workloads/resnet_cifar.py changed{torch}"
    assert result.provenance is not None and result.provenance.code == ("workloads/resnet_cifar.py changed",)
