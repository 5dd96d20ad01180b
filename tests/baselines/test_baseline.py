"""Baseline files: path layout, diff-friendly atomic writes, round trip, refusal of unknown versions."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.errors import BaselineError, StaleBaselineError
from perfgate.baselines.store import (
    baseline_from_analyses, baseline_path, load_baseline, summarize_launches, write_baseline,
)
from perfgate.baselines.provenance import recording
from perfgate.records.model import Analysis, MachineInfo, PhaseStats
from perfgate.records.steps import StepStats, Summary

MACHINE = MachineInfo(machine_class="cpu-x86_64", gpu_model=None, gpu_count=0, driver=None, cuda=None,
                      torch="2.13.0", nsys="2022.4.2.1", hostname="runner-17", cpu="EPYC", python="3.11.7")


def analysis(step_ms: list[float], forward_ms: float) -> Analysis:
    """A hand-built Analysis record (the stage record, not an imitation of nsys output)."""
    n = len(step_ms)
    ordered = sorted(step_ms)
    summary = Summary(count=n, mean=sum(step_ms) / n, median=ordered[n // 2], stdev=0.0, p10=ordered[0],
                      p90=ordered[-1], min=ordered[0], max=ordered[-1])
    steps = StepStats(range_name="step", count=n, warmup_skipped=0, durations_ms=tuple(step_ms), summary_ms=summary,
                      window_start_ns=0, window_end_ns=int(sum(step_ms) * 1e6))
    forward = PhaseStats(name="forward", count=n, cpu_total_ms=forward_ms * n, cpu_median_ms=forward_ms,
                         cpu_mean_ms=forward_ms, cpu_per_step_ms=forward_ms, share_of_step=0.5)
    return Analysis(source="t.sqlite", nsys_version="2022.4.2.1", schema_version=None, steps=steps,
                    phases={"forward": forward}, ranges={})


def test_baselines_live_under_workload_and_machine_class(tmp_path: Path) -> None:
    assert baseline_path(tmp_path, "resnet_cifar", "cpu-x86_64") == tmp_path / "resnet_cifar" / "cpu-x86_64.json"
    assert baseline_path(tmp_path, "resnet_cifar", "nvidia-h100-80gb-hbm3-x1", "pinned") == (
        tmp_path / "resnet_cifar" / "pinned" / "nvidia-h100-80gb-hbm3-x1.json")


def test_written_baseline_round_trips_launches_and_step_samples(tmp_path: Path) -> None:
    record = baseline_from_analyses("resnet_cifar", [analysis([10, 12, 11], 5.0), analysis([20, 22, 21], 7.0)],
                                    MACHINE, {"git_commit": "abc"})
    path = write_baseline(tmp_path / "b" / "resnet_cifar" / "cpu-x86_64.json", record)
    loaded = load_baseline(path)
    assert loaded.launch_metrics == [
        {"step_time_ms": 11.0, "step_time_mean_ms": 11.0, "step_time_p90_ms": 12.0, "phase.forward.cpu_ms": 5.0,
         "step_time_p99_ms": 11.98},    # interpolated between order statistics (11 and 12), as numpy
        {"step_time_ms": 21.0, "step_time_mean_ms": 21.0, "step_time_p90_ms": 22.0, "phase.forward.cpu_ms": 7.0,
         "step_time_p99_ms": 21.98},
    ]
    assert loaded.step_durations_ms == [10, 12, 11, 20, 22, 21]
    assert loaded.machine_class == "cpu-x86_64" and loaded.path == path
    assert loaded.launch_analyses[1].phases["forward"].cpu_per_step_ms == 7.0


def test_baseline_file_is_sorted_indented_versioned_and_has_no_hostname(tmp_path: Path) -> None:
    record = baseline_from_analyses("w", [analysis([10, 30], 5.0), analysis([20, 40], 9.0)], MACHINE, {})
    path = write_baseline(tmp_path / "w.json", record)
    text = path.read_text()
    doc = json.loads(text)
    assert text.endswith("}\n") and text.startswith('{\n  "format": "perfgate-baseline"')
    assert list(doc) == sorted(doc)
    assert (doc["format"], doc["version"]) == ("perfgate-baseline", 2)
    assert "hostname" not in doc["machine"] and doc["machine"]["nsys"] == "2022.4.2.1"
    assert doc["summary"]["phase.forward.cpu_ms"] == {"count": 2, "median": 7.0, "mean": 7.0,
                                                       "stdev": pytest.approx(2.8284271)}
    assert [p.name for p in tmp_path.iterdir()] == ["w.json"]       # no temp file left behind


def test_unknown_version_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "future.json"
    path.write_text(json.dumps({"format": "perfgate-baseline", "version": 99, "launches": []}))
    with pytest.raises(BaselineError, match=r"future.json: baseline format version 99 is not supported"):
        load_baseline(path)


def test_broken_json_and_foreign_files_are_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{\"format\": ")
    with pytest.raises(BaselineError, match="broken.json: not valid JSON"):
        load_baseline(broken)
    foreign = tmp_path / "other.json"
    foreign.write_text("{\"benchmarks\": []}")
    with pytest.raises(BaselineError, match="other.json: not a perfgate baseline"):
        load_baseline(foreign)


def test_summaries_use_only_launches_that_have_the_metric() -> None:
    out = summarize_launches([{"a": 1.0, "b": 4.0}, {"a": 3.0}])
    assert out["a"] == {"count": 2, "median": 2.0, "mean": 2.0, "stdev": pytest.approx(1.41421356)}
    assert out["b"] == {"count": 1, "median": 4.0, "mean": 4.0, "stdev": 0.0}


def test_provenance_records_commit_date_version_and_command(repo_root: Path) -> None:
    info = recording(repo_root, "pytest --perfgate")
    assert info["command"] == "pytest --perfgate"
    assert info["created_utc"].endswith("Z") and info["perfgate_version"]
    assert info["git_commit"] is None or len(info["git_commit"]) == 40


def test_a_version_1_baseline_is_refused_with_the_step_time_change_and_how_to_rerecord(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": "perfgate-baseline", "version": 1,
                                "launches": [{"metrics": {"step_time_ms": 10.0}}]}))
    with pytest.raises(StaleBaselineError, match=r"old.json: .*step range's duration.*iteration period.*: "
                                                 r"re-record it on the gate's machine$"):
        load_baseline(path)   # the command in use says how (tests/report/test_messages.py)
    path.write_text(json.dumps({"format": "perfgate-baseline", "version": 3,
                                "launches": [{"metrics": {"step_time_ms": 10.0}}]}))
    with pytest.raises(StaleBaselineError, match=r"old.json: baseline format version 3 is not supported by this "
                       r"perfgate \(it reads version 2\): it was written by a newer perfgate; upgrade perfgate, or "
                       r"re-record it on the gate's machine$"):
        load_baseline(path)


@pytest.mark.parametrize("parts", [("..", "cpu"), ("w", "../../etc"), ("w", "a/b"), ("w", "")])
def test_baseline_path_never_leaves_the_baseline_folder(tmp_path: Path, parts: tuple[str, str]) -> None:
    from perfgate.errors import ConfigError

    with pytest.raises(ConfigError, match="is not a safe name"):
        baseline_path(tmp_path, *parts)
    with pytest.raises(ConfigError, match="variant: '../x' is not a safe name"):
        baseline_path(tmp_path, "w", "cpu", "../x")


def _hostile(tmp_path: Path, value: str, metric: str = "step_time_ms") -> Path:
    """A real baseline file whose first launch's ``metric`` is replaced by the JSON text ``value``."""
    record = baseline_from_analyses("w", [analysis([10, 12, 11], 5.0), analysis([11, 12, 13], 5.0)], MACHINE, {})
    path = write_baseline(tmp_path / "w" / "cpu-x86_64.json", record)
    doc = json.loads(path.read_text())
    doc["launches"][0]["metrics"][metric] = "@VALUE@"
    path.write_text(json.dumps(doc).replace('"@VALUE@"', value))
    return path


@pytest.mark.parametrize("value, problem", [
    ("NaN", "expected a finite, non-negative number, got nan"),
    ("Infinity", "expected a finite, non-negative number, got inf"),
    ("-11.0", "expected a finite, non-negative number, got -11.0"),
    ('"11"', "expected a number, got '11'"),
    ("true", "expected a number, got True"),
    ("null", "expected a number, got None"),
])
def test_unchecked_values_in_a_baseline_are_refused_naming_file_and_field(tmp_path: Path, value: str,
                                                                         problem: str) -> None:
    path = _hostile(tmp_path, value)
    with pytest.raises(BaselineError) as err:
        load_baseline(path)
    assert str(err.value) == f"{path}: launches[0].metrics.step_time_ms: {problem}"
    phase = _hostile(tmp_path, value, "phase.forward.cpu_ms")
    with pytest.raises(BaselineError, match=r"launches\[0\]\.metrics\.phase\.forward\.cpu_ms: expected"):
        load_baseline(phase)


def test_a_baseline_launch_without_the_primary_metric_or_with_bad_steps_is_refused(tmp_path: Path) -> None:
    path = _hostile(tmp_path, "1.0")
    doc = json.loads(path.read_text())
    del doc["launches"][1]["metrics"]["step_time_ms"]
    path.write_text(json.dumps(doc))
    with pytest.raises(BaselineError, match=r"launches\[1\]\.metrics has no step_time_ms"):
        load_baseline(path)
    doc = json.loads(_hostile(tmp_path, "1.0").read_text())
    doc["launches"][0]["step_durations_ms"][2] = -3
    path.write_text(json.dumps(doc))
    with pytest.raises(BaselineError, match=r"launches\[0\]\.step_durations_ms\[2\]: expected a finite"):
        load_baseline(path)
    doc["launches"][0]["step_durations_ms"][2] = 3
    doc["machine_class"] = "../../etc"
    path.write_text(json.dumps(doc))
    with pytest.raises(BaselineError, match=r"machine_class: '../../etc' is not a safe name"):
        load_baseline(path)


def test_a_second_recording_of_a_baseline_stops_while_the_first_holds_its_lock(tmp_path: Path) -> None:
    """Two recordings at once each wrote the baseline, the later one silently replacing the other."""
    from perfgate.baselines.lock import recording_lock
    from perfgate.errors import BaselineError

    path = tmp_path / "baselines" / "w" / "m.json"
    with recording_lock(path):
        with pytest.raises(BaselineError, match=r"m\.json: another perfgate process is recording a baseline in .*/w now"):
            with recording_lock(path):
                pass
    with recording_lock(path):      # released: the next recording goes ahead
        path.write_text("{}")
    assert [p.name for p in path.parent.iterdir()] == ["m.json"]
    with recording_lock(tmp_path / "baselines" / "v" / "m.json"):
        pass
    assert not (tmp_path / "baselines" / "v").exists()   # a failed first recording leaves no empty folder
