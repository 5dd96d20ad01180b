"""Settings resolution (option > env > pyproject > default), validation messages, and workload
discovery from the workloads folder plus [tool.perfgate.workloads.*] tables."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest

from perfgate import cli, plugin
from perfgate.errors import ConfigError
from perfgate.pipeline.workload_run import compare_policy
from perfgate.records.model import Tolerance
from perfgate.settings.config import SETTINGS, Settings, load_settings, parse_tolerance_option
from perfgate.settings.options import add_setting_options, settings_from_args
from perfgate.settings.workloads import discover_workloads, select_workloads


def project(tmp_path: Path, table: str, workloads: tuple[str, ...] = ()) -> Path:
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'demo'\n\n{table}\n")
    folder = tmp_path / "workloads"
    folder.mkdir(exist_ok=True)
    for name in workloads:
        (folder / f"{name}.py").write_text("print('hi')\n")
    return tmp_path


def test_defaults_apply_without_a_perfgate_table(tmp_path: Path) -> None:
    root = project(tmp_path, "")
    s = load_settings(root, env={})
    assert s.baseline_dir == root / "baselines"
    assert s.artifacts_dir == root / ".perfgate" / "runs"
    assert (s.trace, s.capture_range, s.timeout_s, s.launches, s.size, s.strict) == (
        "auto", "none", 900.0, None, "auto", False)
    assert (s.min_launches, s.max_launches, s.record_launches, s.budget_s, s.profile) == (1, 10, 5, 0.0, "auto")


def test_a_fixed_launch_count_sets_every_launch_count_and_bad_budgets_are_named(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate]\nlaunches = 2\n")
    s = load_settings(root, env={})
    assert (s.min_launches, s.max_launches, s.record_launches) == (2, 2, 2)   # a fixed design
    assert s.sources["max_launches"].endswith("[tool.perfgate] launches (launches sets max_launches)")
    assert s.budget.looks == 1 and s.budget.look_alpha(0.01, 2) == 0.01
    for sub in "bcde":
        (tmp_path / sub).mkdir()
    s = load_settings(project(tmp_path / "b", "[tool.perfgate]\nmin_launches = 2\nmax_launches = 6\n"), env={})
    assert s.budget.looks == 5 and 0.002 < s.budget.look_alpha(0.01, 5) < 0.01
    with pytest.raises(ConfigError, match=r"max_launches \(2\) is below min_launches \(3\)"):
        load_settings(project(tmp_path / "c", "[tool.perfgate]\nmin_launches = 3\nmax_launches = 2\n"), env={})
    with pytest.raises(ConfigError, match="PERFGATE_BUDGET_S.*seconds >= 0"):
        load_settings(project(tmp_path / "d", ""), env={"PERFGATE_BUDGET_S": "-1"})
    with pytest.raises(ConfigError, match="option --profile: expected auto, always or off"):
        load_settings(project(tmp_path / "e", ""), env={}, overrides={"profile": "sometimes"}, option_prefix="")


LAUNCH_SOURCES = {   # where the explicit counts come from, with launches = 1 in pyproject
    "option": ({"record_launches": 2, "max_launches": 3}, {}),
    "environment": ({}, {"PERFGATE_RECORD_LAUNCHES": "2", "PERFGATE_MAX_LAUNCHES": "3"}),
}


def _launch_settings(front: str, root: Path, options: dict[str, int], env: dict[str, str],
                     monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> Settings:
    """Settings as the ``perfgate`` command (``front="cli"``) or ``pytest --perfgate`` resolve them
    from these options and this environment, for the project at ``root``."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if front == "cli":
        argv = ["run", "--root", str(root), *(a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", str(v)))]
        return settings_from_args(cli.build_parser(["run"]).parse_args(argv))
    monkeypatch.chdir(root)
    argv = ["--perfgate", *(a for k, v in options.items() for a in (f"--perfgate-{k.replace('_', '-')}", str(v)))]
    return pytester.parseconfigure(*argv).stash[plugin.SETTINGS_KEY]


@pytest.mark.parametrize("front", ["cli", "pytest"])
@pytest.mark.parametrize("source", list(LAUNCH_SOURCES))
def test_launches_in_pyproject_is_a_default_that_options_and_the_environment_override(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester, front: str, source: str) -> None:
    """Issue 30, item 6: with ``launches = 1`` in pyproject, ``--record-launches 2``,
    ``PERFGATE_RECORD_LAUNCHES=2`` and ``--max-launches 3`` were all ignored ("baseline recorded
    ... (1 launch)"), against option > environment > pyproject."""
    root = project(tmp_path, "[tool.perfgate]\nlaunches = 1\n", ("w",))
    options, env = LAUNCH_SOURCES[source]
    s = _launch_settings(front, root, options, env, monkeypatch, pytester)
    assert (s.min_launches, s.max_launches, s.record_launches) == (1, 3, 2)
    assert s.sources["min_launches"].endswith("[tool.perfgate] launches (launches sets min_launches)")
    assert s.sources["record_launches"] == ("environment variable PERFGATE_RECORD_LAUNCHES" if source == "environment"
                                            else f"option --{'perfgate-' if front == 'pytest' else ''}record-launches")


@pytest.mark.parametrize("front", ["cli", "pytest"])
def test_launches_beats_the_counts_below_it_and_disagreeing_at_one_level_is_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester, front: str) -> None:
    prefix = "--perfgate-" if front == "pytest" else "--"
    # an option's launches beats the environment's and pyproject's counts
    for sub in "abc":
        (tmp_path / sub).mkdir()
    root = project(tmp_path / "a", "[tool.perfgate]\nrecord_launches = 5\n", ("w",))
    s = _launch_settings(front, root, {"launches": 2}, {"PERFGATE_MAX_LAUNCHES": "7"}, monkeypatch, pytester)
    assert (s.min_launches, s.max_launches, s.record_launches) == (2, 2, 2)
    monkeypatch.delenv("PERFGATE_MAX_LAUNCHES")
    # the environment's launches beats pyproject's counts, and an option's count beats it
    s = _launch_settings(front, root, {"max_launches": 4}, {"PERFGATE_LAUNCHES": "2"}, monkeypatch, pytester)
    assert (s.min_launches, s.max_launches, s.record_launches) == (2, 4, 2)
    monkeypatch.delenv("PERFGATE_LAUNCHES")
    # two options that disagree: an error naming both, as the command spells them
    with pytest.raises((ConfigError, pytest.UsageError), match=re.escape(
            f"option {prefix}launches (1) and option {prefix}max-launches (3) disagree: launches sets max_launches "
            "too; give one of the two")):
        _launch_settings(front, root, {"launches": 1, "max_launches": 3}, {}, monkeypatch, pytester)
    # the same in the environment, and in pyproject
    with pytest.raises((ConfigError, pytest.UsageError), match=re.escape(
            "environment variable PERFGATE_LAUNCHES (1) and environment variable PERFGATE_RECORD_LAUNCHES (2) disagree")):
        _launch_settings(front, root, {}, {"PERFGATE_LAUNCHES": "1", "PERFGATE_RECORD_LAUNCHES": "2"}, monkeypatch, pytester)
    for name in ("PERFGATE_LAUNCHES", "PERFGATE_RECORD_LAUNCHES"):
        monkeypatch.delenv(name)
    other = project(tmp_path / "b", "[tool.perfgate]\nlaunches = 2\nmax_launches = 9\n", ("w",))
    with pytest.raises((ConfigError, pytest.UsageError), match=r"\[tool.perfgate\] launches \(2\) and .*pyproject.toml "
                       r"\[tool.perfgate\] max_launches \(9\) disagree"):
        _launch_settings(front, other, {}, {}, monkeypatch, pytester)
    # agreeing values at one level are no conflict
    same = project(tmp_path / "c", "[tool.perfgate]\nlaunches = 2\nrecord_launches = 2\n", ("w",))
    assert _launch_settings(front, same, {}, {}, monkeypatch, pytester).record_launches == 2


def test_option_beats_environment_beats_pyproject(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate]\nlaunches = 3\ntimeout_s = 60\nsize = 'cpu'\n")
    env = {"PERFGATE_LAUNCHES": "5", "PERFGATE_TIMEOUT_S": "30"}
    s = load_settings(root, env=env, overrides={"launches": 7})
    assert s.launches == 7          # option
    assert s.timeout_s == 30.0      # environment over pyproject
    assert s.size == "cpu"          # pyproject over default


def test_strict_comes_from_environment_words(tmp_path: Path) -> None:
    root = project(tmp_path, "")
    assert load_settings(root, env={"PERFGATE_STRICT": "yes"}).strict is True
    assert load_settings(root, env={"PERFGATE_STRICT": "0"}).strict is False


def test_autostep_is_on_by_default_and_follows_the_precedence(tmp_path: Path) -> None:
    assert load_settings(project(tmp_path, ""), env={}).autostep is True
    root = project(tmp_path, "[tool.perfgate]\nautostep = false\n")
    assert load_settings(root, env={}).autostep is False
    assert load_settings(root, env={"PERFGATE_AUTOSTEP": "1"}).autostep is True
    assert load_settings(root, env={"PERFGATE_AUTOSTEP": "1"}, overrides={"autostep": False}).autostep is False


def test_pytorch_trace_is_off_by_default_and_validated(tmp_path: Path) -> None:
    root = project(tmp_path, "")
    assert load_settings(root, env={}).pytorch_trace == "off"
    env = {"PERFGATE_PYTORCH_TRACE": "autograd-nvtx,functions-trace"}
    assert load_settings(root, env=env).pytorch_trace == "autograd-nvtx,functions-trace"
    for bad in ("Functions Trace", "auto,functions-trace"):
        with pytest.raises(ConfigError, match="PERFGATE_PYTORCH_TRACE: expected off, auto or an nsys --pytorch"):
            load_settings(root, env={"PERFGATE_PYTORCH_TRACE": bad})


def test_relative_directories_resolve_against_the_project_root(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate]\nbaseline_dir = 'perf/base'\n")
    assert load_settings(root, env={}).baseline_dir == root / "perf" / "base"


def test_bad_workload_value_names_the_file_table_and_key(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate.workloads.resnet_cifar]\ntimeout_s = 'abc'\n")
    with pytest.raises(ConfigError) as err:
        load_settings(root, env={})
    text = str(err.value)
    assert "pyproject.toml [tool.perfgate.workloads.resnet_cifar] timeout_s" in text
    assert "expected a positive number, got 'abc'" in text


def test_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    root = project(tmp_path, "")
    with pytest.raises(ConfigError, match="environment variable PERFGATE_LAUNCHES: expected a whole number"):
        load_settings(root, env={"PERFGATE_LAUNCHES": "many"})


def test_unknown_key_and_bad_capture_range_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[tool.perfgate\]: unknown key 'lanches'"):
        load_settings(project(tmp_path, "[tool.perfgate]\nlanches = 2\n"), env={})
    with pytest.raises(ConfigError, match="capture_range: expected none, cudaProfilerApi or nvtx:<range name>"):
        load_settings(project(tmp_path, "[tool.perfgate]\ncapture_range = 'hotkey'\n"), env={})


def test_tolerance_table_and_options_are_parsed_options_winning(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate.tolerance]\nstep_time_ms = '5%'\n'phase.*.cpu_ms' = '10%+0.5'\n")
    s = load_settings(root, env={}, overrides={"tolerance": {"step_time_ms": "8%"}})
    assert s.tolerances == {"step_time_ms": Tolerance(rel=0.05), "phase.*.cpu_ms": Tolerance(rel=0.10, abs=0.5)}
    assert s.option_tolerances == {"step_time_ms": Tolerance(rel=0.08)}
    assert compare_policy(s).tolerance_for("step_time_ms") == Tolerance(rel=0.08)


def test_bad_tolerance_names_where_it_came_from(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate.tolerance]\nstep_time_ms = 'fast'\n")
    with pytest.raises(ConfigError, match=r"\[tool.perfgate.tolerance\] step_time_ms"):
        load_settings(root, env={})


def test_tolerance_option_needs_metric_equals_spec() -> None:
    assert parse_tolerance_option("step_time_ms=5%") == ("step_time_ms", "5%")
    with pytest.raises(ConfigError, match="--perfgate-tolerance: expected METRIC=SPEC"):
        parse_tolerance_option("step_time_ms")


def test_discovery_finds_modules_and_declared_workloads_with_variants(tmp_path: Path) -> None:
    root = project(tmp_path, """
[tool.perfgate.workloads.resnet]
args = ["--steps", "4"]
cpu_args = ["--batch-size", "2"]
gpu_args = ["--batch-size", "256"]
variants = { pinned = ["--pin-memory"] }

[tool.perfgate.workloads.ddp]
launcher = "torchrun"
enabled = false

[tool.perfgate.workloads.external]
module = "mypkg.train"
""", workloads=("resnet", "ddp", "_helpers"))
    specs = {s.full_name: s for s in discover_workloads(load_settings(root, env={}), gpu_count=0)}
    assert sorted(specs) == ["ddp", "external", "resnet", "resnet[pinned]"]
    assert specs["resnet"].module == "workloads.resnet"
    assert specs["resnet"].args == ("--steps", "4", "--batch-size", "2")
    assert specs["resnet[pinned]"].args == ("--steps", "4", "--batch-size", "2", "--pin-memory")
    assert specs["ddp"].nproc == 2 and not specs["ddp"].enabled     # 2 gloo processes without GPU
    assert specs["external"].module == "mypkg.train"


def test_gpu_machine_gets_gpu_args_and_one_process_per_gpu(tmp_path: Path) -> None:
    root = project(tmp_path, """
[tool.perfgate.workloads.resnet]
gpu_args = ["--batch-size", "256"]
[tool.perfgate.workloads.ddp]
launcher = "torchrun"
""", workloads=("resnet", "ddp"))
    specs = {s.name: s for s in discover_workloads(load_settings(root, env={}), gpu_count=4)}
    assert specs["resnet"].args == ("--batch-size", "256")
    assert specs["ddp"].nproc == 4


def test_selection_skips_disabled_unless_named_and_rejects_unknown_names(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate.workloads.ddp]\nenabled = false\n", workloads=("a", "ddp"))
    specs = discover_workloads(load_settings(root, env={}))
    assert [s.name for s in select_workloads(specs, [])] == ["a"]
    assert [s.name for s in select_workloads(specs, ["ddp"])] == ["ddp"]
    with pytest.raises(ConfigError, match="workload 'nope' not found"):
        select_workloads(specs, ["nope"])


def test_declared_workload_without_module_or_file_is_an_error(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate.workloads.ghost]\nargs = []\n")
    with pytest.raises(ConfigError, match=r"\[tool.perfgate.workloads.ghost\]: no module given"):
        discover_workloads(load_settings(root, env={}))


def test_repository_pyproject_declares_the_default_gate(repo_root: Path) -> None:
    s = load_settings(repo_root, env={})
    enabled = {spec.name for spec in discover_workloads(s) if spec.enabled}
    assert {"resnet_cifar", "transformer_lm"} <= enabled
    assert not {"resnet_imagefolder", "ddp", "ladder"} & enabled
    assert s.workloads["ddp"].launcher == "torchrun"


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_timeout_must_be_a_finite_number(tmp_path: Path, value: str) -> None:
    root = project(tmp_path, "")
    with pytest.raises(ConfigError, match=f"environment variable PERFGATE_TIMEOUT_S: expected a finite number, got '{value}'"):
        load_settings(root, env={"PERFGATE_TIMEOUT_S": value})


def test_infinite_whole_number_in_pyproject_is_refused_not_a_crash(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate]\nlaunches = inf\n")
    with pytest.raises(ConfigError, match=r"\[tool.perfgate\] launches: expected a whole number, got inf"):
        load_settings(root, env={})


@pytest.mark.parametrize("machine_class", ["../../outside", "a/b", ".hidden", "x\ny", "-rf", "a b"])
def test_machine_class_must_be_one_safe_path_component(tmp_path: Path, machine_class: str) -> None:
    root = project(tmp_path, "")
    with pytest.raises(ConfigError, match="environment variable PERFGATE_MACHINE_CLASS: not a safe name"):
        load_settings(root, env={"PERFGATE_MACHINE_CLASS": machine_class})
    assert load_settings(root, env={"PERFGATE_MACHINE_CLASS": "nvidia-h100-x1.pool_2"}).machine_class == \
        "nvidia-h100-x1.pool_2"


def test_workload_file_and_variant_names_must_be_safe(tmp_path: Path) -> None:
    root = project(tmp_path, "", workloads=("fine",))
    (root / "workloads" / "a`<b>.py").write_text("")
    settings = load_settings(root, env={})
    with pytest.raises(ConfigError, match=r"a`<b>.py: workload name: 'a`<b>' is not a safe name"):
        discover_workloads(settings)
    (tmp_path / "v").mkdir()
    root = project(tmp_path / "v", "[tool.perfgate.workloads.fine.variants]\n'..' = ['--x']\n", workloads=("fine",))
    with pytest.raises(ConfigError, match=r"variants: variant name: '\.\.' is not a safe name"):
        load_settings(root, env={})


# --------------------------------------------------------------------------- options declared once


def _flags(add_options: Callable[[Callable[..., Any]], None]) -> dict[str, dict[str, Any]]:
    """flag -> keyword arguments, of every option ``add_options(add)`` adds."""
    found: dict[str, dict[str, Any]] = {}

    def add(*names: str, **kwargs: Any) -> None:
        for name in names:
            found[name] = kwargs

    add_options(add)
    return found


class _Group:
    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.calls.append((names, kwargs))

    def getgroup(self, *_args: Any) -> _Group:
        return self


def test_every_setting_is_one_row_with_its_default_only_there() -> None:
    """Settings has a typed field per SETTINGS row and no default of its own (the launches default
    was 3 in the table and 1 in the dataclass)."""
    by_name = {f.name: f for f in fields(Settings)}
    for s in SETTINGS:
        assert s.key in by_name, s.key
        assert by_name[s.key].default is MISSING, f"Settings.{s.key} declares a default of its own"
    others = {"root", "tolerances", "option_tolerances", "workloads", "selected", "pyproject", "sources", "option_prefix"}
    assert set(by_name) - {s.key for s in SETTINGS} == others


def test_pytest_and_cli_options_come_from_the_same_rows(tmp_path: Path) -> None:
    group = _Group()
    plugin.pytest_addoption(group)  # type: ignore[arg-type]
    pytest_flags = {n: kw for names, kw in group.calls for n in names}
    cli_flags = _flags(lambda add: add_setting_options(add))
    expected = {f"--{s.option}" for s in SETTINGS if s.option} | {
        f"--no-{s.option}" for s in SETTINGS if s.option and s.kind == "bool"} | {"--tolerance"}
    assert set(cli_flags) == expected
    assert {f for f in pytest_flags if f.startswith(("--perfgate-", "--no-perfgate-"))} == {
        f.replace("--", "--perfgate-", 1).replace("--perfgate-no-", "--no-perfgate-") for f in expected} | {
        "--perfgate-update-baselines", "--perfgate-workload"}
    for flag, kwargs in cli_flags.items():  # same help, same checks, both "not given" by default
        twin = pytest_flags[flag.replace("--", "--perfgate-", 1).replace("--perfgate-no-", "--no-perfgate-")]
        assert kwargs["help"].replace("--perfgate-", "--") == twin["help"].replace("--perfgate-", "--")
        assert kwargs.get("type") == twin.get("type") and kwargs["default"] == twin["default"]
    args = cli.build_parser(["run"]).parse_args(["run", "--no-autostep", "--launches", "5", "--timeout", "60"])
    s = settings_from_args(args)
    assert (s.autostep, s.launches, s.timeout_s) == (False, 5, 60.0)


def test_a_bad_option_is_refused_by_the_parser_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--launches", "0"])
    assert exc.value.code == 2
    assert "argument --launches: expected a whole number >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["run", "--size", "huge"])
    assert "argument --size: expected one of auto, cpu, gpu, got 'huge'" in capsys.readouterr().err


def test_a_bad_value_names_its_source(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate]\nlaunches = 0\n")
    with pytest.raises(ConfigError, match=r"pyproject.toml \[tool.perfgate\] launches: expected a whole number >= 1, got 0"):
        load_settings(root, env={})
    with pytest.raises(ConfigError, match=r"^environment variable PERFGATE_TIMEOUT_S: expected a positive number"):
        load_settings(project(tmp_path, ""), env={"PERFGATE_TIMEOUT_S": "-1"})
    with pytest.raises(ConfigError, match=r"^option --launches: expected a whole number >= 1, got 0"):
        load_settings(project(tmp_path, ""), env={}, overrides={"launches": 0}, option_prefix="")
    with pytest.raises(ConfigError, match=r"^option --perfgate-launches: expected"):
        load_settings(project(tmp_path, ""), env={}, overrides={"launches": 0})
    with pytest.raises(ConfigError, match=r"^option --tolerance: expected METRIC=SPEC"):
        load_settings(project(tmp_path, ""), env={}, overrides={"tolerance": ["step_time_ms"]}, option_prefix="")


def test_alpha_is_checked_with_the_settings_not_after_the_captures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """alpha 0.7 passed the settings (0 < alpha < 1) and failed the comparison (alpha < 0.5) of
    every workload after its launches had run; now the run stops before anything runs."""
    root = project(tmp_path, "[tool.perfgate]\nalpha = 0.7\n", workloads=("tiny",))
    with pytest.raises(ConfigError, match=r"\[tool.perfgate\] alpha: expected a number between 0 and 0.5, got 0.7"):
        load_settings(root, env={})
    assert cli.main(["run", "--root", str(root), "--artifacts-dir", str(tmp_path / "runs")]) == 2
    assert "alpha: expected a number between 0 and 0.5" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    assert load_settings(root, env={"PERFGATE_ALPHA": "0.05"}).alpha == 0.05


def test_tolerance_precedence_option_then_workload_table_then_global_table(tmp_path: Path) -> None:
    """A per-workload tolerance from pyproject overrode the command line."""
    root = project(tmp_path, """
[tool.perfgate.tolerance]
step_time_ms = "4%"
"phase.*.cpu_ms" = "30%"
[tool.perfgate.workloads.tiny]
tolerance = { step_time_ms = "20%", "phase.forward.cpu_ms" = "25%" }
""", workloads=("tiny",))
    s = load_settings(root, env={}, overrides={"tolerance": ["step_time*=2%"]})
    spec = select_workloads(discover_workloads(s), ["tiny"])[0]
    policy = compare_policy(s, spec)
    assert policy.tolerance_for("step_time_ms") == Tolerance(rel=0.02)        # option (a pattern) beats the table's exact name
    assert policy.tolerance_for("phase.forward.cpu_ms") == Tolerance(rel=0.25)  # workload table beats the global one
    assert policy.tolerance_for("phase.backward.cpu_ms") == Tolerance(rel=0.30)
    assert policy.tolerance_for("gpu_idle_fraction") == Tolerance(abs=0.03)    # the metric's default
    assert compare_policy(load_settings(root, env={}), spec).tolerance_for("step_time_ms") == Tolerance(rel=0.20)


def test_the_old_warmup_steps_key_still_sets_the_skipped_steps(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate]\nwarmup_steps = 2\n[tool.perfgate.workloads.tiny]\nwarmup_steps = 4\n",
                   workloads=("tiny", "other"))
    s = load_settings(root, env={})
    assert s.skip_steps == 2 and s.workloads["tiny"].skip_steps == 4
    specs = {w.name: w for w in discover_workloads(s)}
    assert (specs["tiny"].skip_steps, specs["other"].skip_steps) == (4, 2)
    assert load_settings(project(tmp_path, "[tool.perfgate]\nskip_steps = 1\n"), env={}).skip_steps == 1
    assert load_settings(project(tmp_path, ""), env={"PERFGATE_WARMUP_STEPS": "3"}).skip_steps == 3
    with pytest.raises(ConfigError, match="warmup_steps and skip_steps are the same setting"):
        load_settings(project(tmp_path, "[tool.perfgate]\nwarmup_steps = 1\nskip_steps = 1\n"), env={})
    with pytest.raises(ConfigError, match=r"\[tool.perfgate\] warmup_steps: expected a whole number >= 0"):
        load_settings(project(tmp_path, "[tool.perfgate]\nwarmup_steps = -1\n"), env={})


# ----------------------------------------------------------------------------- issue 16: honest errors


def test_a_pyproject_value_must_have_its_toml_type(tmp_path: Path) -> None:
    root = project(tmp_path, '[tool.perfgate]\nstrict = "yes"\n')
    with pytest.raises(ConfigError, match=r"pyproject.toml \[tool.perfgate\] strict: expected true or false "
                                          r"\(a TOML boolean, unquoted\), got 'yes'"):
        load_settings(root, env={})
    assert load_settings(root, env={"PERFGATE_STRICT": "yes"}).strict is True    # an environment variable is text
    root = project(tmp_path, '[tool.perfgate]\nlaunches = "3"\n')
    with pytest.raises(ConfigError, match=r"\[tool.perfgate\] launches: expected a whole number, got '3'"):
        load_settings(root, env={})
    root = project(tmp_path, "[tool.perfgate.workloads.w]\nmodule = 'm'\nenabled = 'no'\n")
    with pytest.raises(ConfigError, match=r"\[tool.perfgate.workloads.w\] enabled: expected true or false"):
        load_settings(root, env={})


def test_errors_name_the_option_as_the_caller_offers_it(tmp_path: Path) -> None:
    root = project(tmp_path, "")
    with pytest.raises(ConfigError, match=r"^option --timeout: expected a positive number, got -1"):
        load_settings(root, env={}, overrides={"timeout_s": -1}, options={"timeout_s": "--timeout"})
    with pytest.raises(ConfigError, match=r"^option --tolerance: no metric is named 'stepp_time_ms'"):
        load_settings(root, env={}, overrides={"tolerance": {"stepp_time_ms": "5%"}}, options={"tolerance": "--tolerance"})
    settings = load_settings(root, env={"PERFGATE_NSYS": "/nonexistent/nsys"})
    assert settings.sources["nsys"] == "environment variable PERFGATE_NSYS"
    assert settings.sources["launches"] == "default"


def test_a_tolerance_must_name_a_metric_of_the_gate(tmp_path: Path) -> None:
    root = project(tmp_path, '[tool.perfgate.tolerance]\n"step_time_ms" = "5%"\n"phase.*.cpu_ms" = "20%"\n'
                             '"phase.data_load.gpu_ms" = "1%"\n"step_time*" = "4%"\n"phase.Forward Pass.cpu_ms" = "9%"\n')
    assert set(load_settings(root, env={}).tolerances) == {
        "step_time_ms", "phase.*.cpu_ms", "phase.data_load.gpu_ms", "step_time*", "phase.Forward Pass.cpu_ms"}
    for bad in ("no_such_metric", "step_time", "phase.forward.cpu", "phase.*.cpu_s"):
        root = project(tmp_path, f'[tool.perfgate.tolerance]\n"{bad}" = "5%"\n')
        with pytest.raises(ConfigError, match=rf"pyproject.toml \[tool.perfgate.tolerance\]: no metric is named '{re.escape(bad)}'"):
            load_settings(root, env={})
    root = project(tmp_path, "[tool.perfgate.workloads.w]\nmodule = 'm'\ntolerance = { gpu_idle = '+0.05' }\n")
    with pytest.raises(ConfigError, match=r"\[tool.perfgate.workloads.w\] tolerance: no metric is named 'gpu_idle'"):
        load_settings(root, env={})


def test_workloads_dir_that_was_set_must_exist(tmp_path: Path) -> None:
    from perfgate.settings.workloads import discover_workloads

    root = project(tmp_path, "[tool.perfgate]\nworkloads_dir = 'perf'\n")
    with pytest.raises(ConfigError, match=r"\[tool.perfgate\] workloads_dir: .*/perf is not a folder"):
        discover_workloads(load_settings(root, env={}))
    root = project(tmp_path, "")                                  # an empty workloads/ folder
    with pytest.raises(ConfigError, match=r"no workloads: .*/workloads \(default workloads_dir\) holds no <name>.py file"):
        discover_workloads(load_settings(root, env={}))
    (root / "workloads").rmdir()
    with pytest.raises(ConfigError, match=r"no workloads: .*/workloads \(default workloads_dir\) does not exist, and "
                                          r".*pyproject.toml has no \[tool.perfgate.workloads.<name>\] tables"):
        discover_workloads(load_settings(root, env={}))
    with pytest.raises(ConfigError, match=r"environment variable PERFGATE_WORKLOADS_DIR: .*/elsewhere is not a folder"):
        discover_workloads(load_settings(root, env={"PERFGATE_WORKLOADS_DIR": "elsewhere"}))
    root = project(tmp_path, "[tool.perfgate.workloads.train]\nmodule = 'train'\n")   # no folder needed
    (root / "workloads").rmdir()
    assert [s.module for s in discover_workloads(load_settings(root, env={}))] == ["train"]
