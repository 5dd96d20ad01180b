"""A CPU-only build of torch is named as the cause when a capture has no NVTX ranges, instead of
the analysis's "no NVTX_EVENTS table ... does the workload push NVTX ranges?".

The real thing: a fresh virtual environment with perfgate's wheel and a CPU-only torch wheel (from
pip's configured sources, e.g. a local wheel folder, else download.pytorch.org's CPU index), the
example project's plain loop gated under the real nsys."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from wheel_env import REPO, build_wheel, make_venv, pip_install, run, user_env

from perfgate.capture.torch_build import cpu_only_message, probe


def _missing(what: str) -> None:
    if os.environ.get("PERFGATE_REQUIRE_REAL") == "1":
        pytest.fail(f"{what} is required in CI (PERFGATE_REQUIRE_REAL=1) but missing", pytrace=False)
    pytest.skip(f"{what} not available")


@pytest.fixture(scope="module")
def cpu_torch_venv(tmp_path_factory: pytest.TempPathFactory, torch_module) -> Path:
    work = tmp_path_factory.mktemp("cpu-torch")
    python = make_venv(work / "env")
    pip_install(python, "--no-index", "--no-deps", "--force-reinstall", str(build_wheel(work / "wheel")))
    wanted = f"torch=={torch_module.__version__.split('+')[0]}+cpu"
    for source in (["--no-index"], ["--index-url", "https://download.pytorch.org/whl/cpu"]):
        done = run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    *source, wanted], timeout=900)
        if done.returncode == 0:
            return work / "env"
    _missing(f"a CPU-only torch wheel ({wanted}: {done.stderr.strip()[-300:]})")
    raise AssertionError("unreachable")


def test_the_probe_tells_a_cpu_only_build_from_a_cuda_build(cpu_torch_venv: Path, torch_module) -> None:
    import sys

    here = probe(sys.executable)
    assert here is not None and here["version"] == torch_module.__version__
    assert (here["cuda"] is None) == (torch_module.version.cuda is None)
    cpu = probe(str(cpu_torch_venv / "bin" / "python"))
    assert cpu is not None and cpu["version"].endswith("+cpu") and cpu["cuda"] is None and cpu["nvtx"] is False
    assert "is a CPU-only build" in cpu_only_message(cpu, "py")
    if torch_module.version.cuda is not None:
        assert cpu_only_message(here, sys.executable) is None


def test_a_cpu_only_torch_is_named_as_the_cause(cpu_torch_venv: Path, tmp_path: Path, nsys_path: str) -> None:
    project = tmp_path / "plain-loop"
    shutil.copytree(REPO / "examples" / "plain-loop", project, ignore=shutil.ignore_patterns("baselines", ".perfgate"))
    done = run(["perfgate", "run", "--launches", "1"], cwd=project, env=user_env(cpu_torch_venv), timeout=600)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    version = probe(str(cpu_torch_venv / "bin" / "python"))["version"]
    assert (f"the capture recorded no NVTX ranges: torch {version} of {cpu_torch_venv / 'bin' / 'python'} "
            "is a CPU-only build (torch.version.cuda is None, torch._C._nvtx is missing)") in done.stdout
    assert "no NVTX_EVENTS table" not in done.stdout          # what it said before, hiding the cause
