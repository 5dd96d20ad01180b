"""A release (.github/workflows/release.yml, issue 44): the tag must be perfgate's version, and the
sdist and the wheel build from a copy of the checkout and pass ``twine check --strict``, as the
workflow builds and checks them."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import yaml
from wheel_env import NOT_COPIED, REPO, run

import perfgate

WORKFLOW = REPO / ".github" / "workflows" / "release.yml"


def _step(name: str) -> str:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["build"]["steps"]
    return next(s["run"] for s in steps if s.get("name") == name)


def test_the_tag_must_be_perfgates_version() -> None:
    script = _step("The tag is the version")

    def tagged(tag: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=REPO, capture_output=True, text=True,
                              env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "TAG": tag})

    assert tagged(f"v{perfgate.__version__}").returncode == 0
    wrong = tagged("v9.9.9")
    assert wrong.returncode == 1
    assert wrong.stdout.strip() == (f"::error title=release::tag v9.9.9 is not v{perfgate.__version__}, "
                                    "the version in perfgate/__init__.py")


def test_the_sdist_and_the_wheel_build_and_pass_twine_check(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)
    built = run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir",
                 str(tmp_path / "dist"), str(src)])
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    version = perfgate.__version__
    wheel = tmp_path / "dist" / f"perfgate-{version}-py3-none-any.whl"
    sdist = tmp_path / "dist" / f"perfgate-{version}.tar.gz"
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == sorted([wheel.name, sdist.name])
    checked = run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(f"perfgate-{version}.dist-info/METADATA").decode()
    assert "perfgate/capture/autostep/site/sitecustomize.py" in names      # the hooks' start-up file
    assert f"\nVersion: {version}\n" in metadata and "\nRequires-Dist: pandas" in metadata
    with tarfile.open(sdist) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "perfgate/__init__.py", "README.md"} <= members
