"""perfgate as a user installs it: a wheel built from this checkout, installed into a fresh virtual
environment, used from a folder outside the repository.

The environment reuses the packages of the interpreter running the tests (torch, numpy, pandas,
duckdb, ...) through a ``.pth`` file listing its site-packages folders, so nothing is downloaded;
those folders come after the environment's own, so what is installed into it (perfgate's wheel, a
CPU-only torch) wins. The listed folders' own ``.pth`` files are not run: an editable install of
perfgate in the test interpreter cannot leak into the environment.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Left out of the copy a wheel is built from: version control, environments, build output, and the
#: committed traces (58 MB; no package may include them). Everything else is copied, so that what
#: pyproject.toml's package discovery picks up is what a build of the checkout picks up.
NOT_COPIED = (".git", ".venv", "venv", "__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".perfgate",
              ".pytest_cache", ".benchmarks", "node_modules", "traces")


def run(command: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def build_wheel(work: Path) -> Path:
    """perfgate's wheel, built from a copy of the checkout (the checkout gets no build/ or egg-info)
    with the setuptools already installed (no build isolation, no index)."""
    src = work / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)
    done = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                "-w", str(work / "dist"), str(src)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (work / "dist").glob("perfgate-*.whl")
    return wheel


def wheel_top_level(wheel: Path) -> set[str]:
    """The first path component of every file in ``wheel``."""
    with zipfile.ZipFile(wheel) as z:
        return {name.split("/", 1)[0] for name in z.namelist()}


def site_packages_of_this_interpreter() -> list[str]:
    return [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)]


def make_venv(path: Path) -> Path:
    """A new virtual environment at ``path`` reusing this interpreter's packages; its python."""
    done = run([sys.executable, "-m", "venv", "--without-pip", str(path)])
    assert done.returncode == 0, done.stderr[-2000:]
    python = path / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "_reuse_test_interpreter.pth").write_text("\n".join(site_packages_of_this_interpreter()) + "\n")
    return python


def pip_install(python: Path, *args: str, timeout: float = 600) -> None:
    """``pip install`` into the environment of ``python`` (pip itself comes from the reused packages;
    pip's own configuration, e.g. a local wheel folder, applies)."""
    done = run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args], timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def user_env(venv: Path, **extra: str) -> dict[str, str]:
    """The environment of a user's shell with ``venv`` activated: its bin first on PATH, no
    PYTHONPATH (nothing of this checkout importable), no PERFGATE_* settings of the test run."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME") and not k.startswith("PERFGATE_")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env.update(extra)
    return env
