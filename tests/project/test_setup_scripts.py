"""scripts/setup.sh and scripts/install-nsys.sh as a new user or a CI machine runs them.

setup.sh installs into a virtual environment (here an active one, created by the test and reusing
the installed packages), never into the interpreter that created it, and runs pip with the user's
configuration (a ``log`` set in a pip configuration file must be written). install-nsys.sh reads
/etc/os-release (``PERFGATE_OS_RELEASE`` here) and picks Debian's non-free component of that very
release, or says what to install and exits 2 (Ubuntu, others), changing nothing.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from wheel_env import REPO, make_venv, run, site_packages_of_this_interpreter, user_env

UBUNTU = 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n'
TRIXIE = 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nNAME="Debian GNU/Linux"\nVERSION_ID="13"\nVERSION_CODENAME=trixie\nID=debian\n'
TOOLS = ("bash", "sed", "head", "uname", "cat", "awk", "grep", "id", "dirname", "tr")


def _path_without_nsys(tmp_path: Path) -> str:
    """A PATH holding the shell tools the script uses, and no nsys."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def _install_nsys(tmp_path: Path, os_release: str, *args: str, path: str | None = None) -> tuple[int, str]:
    release = tmp_path / "os-release"
    release.write_text(os_release)
    env = {"PATH": path or _path_without_nsys(tmp_path), "PERFGATE_OS_RELEASE": str(release)}
    done = run(["bash", str(REPO / "scripts" / "install-nsys.sh"), *args], env=env, timeout=60)
    return done.returncode, done.stdout + done.stderr


def test_install_nsys_on_ubuntu_says_what_to_install_and_changes_nothing(tmp_path: Path) -> None:
    rc, out = _install_nsys(tmp_path, UBUNTU)
    assert rc == 2, out
    assert "Ubuntu 22.04.4 LTS" in out and "only on Debian" in out
    assert "repos/ubuntu2204/" in out and "PERFGATE_NSYS" in out
    assert "installing from" not in out and "apt-get" not in out   # no Debian source added to an Ubuntu machine


def test_install_nsys_on_debian_uses_the_release_it_runs_on(tmp_path: Path) -> None:
    rc, out = _install_nsys(tmp_path, TRIXIE, "--dry-run")
    assert rc == 0, out
    assert "installing from Debian trixie, component non-free: package nsight-systems" in out
    assert "bookworm" not in out


def test_install_nsys_keeps_an_installed_nsys(tmp_path: Path, nsys_path: str) -> None:
    path = f"{Path(nsys_path).parent}{os.pathsep}{_path_without_nsys(tmp_path)}"
    rc, out = _install_nsys(tmp_path, UBUNTU, "--dry-run", path=path)
    assert rc == 0, out
    assert f"nsys already installed: {nsys_path}" in out and "NVIDIA Nsight Systems version" in out


def _site_snapshot() -> dict[str, list[tuple[str, int, int]]]:
    """Every entry of the test interpreter's site-packages with its size and modification time (a
    re-pointed editable install rewrites its finder and .pth files under the same names)."""
    out = {}
    for folder in site_packages_of_this_interpreter():
        entries = []
        for entry in os.scandir(folder):
            info = entry.stat(follow_symlinks=False)
            entries.append((entry.name, info.st_size, info.st_mtime_ns))
        out[folder] = sorted(entries)
    return out


def test_setup_installs_into_the_active_environment_with_pips_configuration(tmp_path: Path, nsys_path: str,
                                                                              torch_module: object) -> None:
    checkout = tmp_path / "clone"
    checkout.mkdir()
    for name in ("scripts", "requirements", "perfgate", "pyproject.toml", "README.md"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, checkout / name)
    venv = tmp_path / "env"
    make_venv(venv)
    pip_conf = tmp_path / "pip.conf"            # loaded after the machine's own configuration
    pip_log = tmp_path / "pip.log"
    pip_conf.write_text(f"[global]\nlog = {pip_log}\n")
    before = _site_snapshot()

    env = user_env(venv, PIP_CONFIG_FILE=str(pip_conf))
    env["PATH"] = f"{Path(nsys_path).parent}{os.pathsep}{env['PATH']}"
    done = run(["bash", str(checkout / "scripts" / "setup.sh")], env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"setup: done: {venv} (" in done.stdout

    assert _site_snapshot() == before             # the interpreter that runs the tests is untouched
    assert pip_log.is_file() and "requirements/ci.txt" in pip_log.read_text()   # pip's configuration honoured
    where = run([str(venv / "bin" / "python"), "-c", "import perfgate; print(perfgate.__file__)"],
                cwd=tmp_path, env=user_env(venv))
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip() == str(checkout / "perfgate" / "__init__.py")   # editable, into the environment
