"""perfgate.nvtx: backend choice and fallback, nesting, and ranges that a real nsys records."""
from __future__ import annotations

import os
import sqlite3
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsys_run import run_supervised
from perfgate import nvtx


@pytest.fixture
def restore_backend() -> Iterator[None]:
    """Tests rebind the module; put the real choice back afterwards."""
    yield
    nvtx.select()


def _recording_backend(calls: list[tuple[str, object]]) -> nvtx.Backend:
    return nvtx.Backend(
        name="recording",
        push=lambda name: calls.append(("push", name)),
        pop=lambda: calls.append(("pop", None)),
        start=lambda name: calls.append(("start", name)) or len(calls),
        end=lambda handle: calls.append(("end", handle)),
        mark=lambda name: calls.append(("mark", name)),
    )


def test_torch_binding_is_chosen_on_a_cuda_build_of_torch(torch_module) -> None:
    assert nvtx.choose_backend({}).name == "torch"
    assert nvtx.backend() == "torch"


def test_nvtx_package_is_used_when_torch_has_no_binding(torch_module, monkeypatch) -> None:
    pytest.importorskip("nvtx")
    monkeypatch.delattr(torch_module._C, "_nvtx")
    assert nvtx.choose_backend({}).name == "nvtx"


def test_falls_back_to_noop_without_torch_binding_or_nvtx_package(monkeypatch, restore_backend) -> None:
    monkeypatch.setitem(sys.modules, "torch._C", None)   # import raises ImportError
    monkeypatch.setitem(sys.modules, "nvtx", None)
    chosen = nvtx.select()
    assert chosen.name == "noop"
    assert nvtx.backend() == "noop"
    with nvtx.range("step"):
        with nvtx.range("forward"):
            nvtx.mark("inside")
    assert nvtx.range("a") is nvtx.range("b")          # one shared no-op context manager
    assert nvtx.push("x") is None and nvtx.pop() is None


@pytest.mark.parametrize("value", ["0", "off", "FALSE", " no "])
def test_environment_switch_turns_nvtx_off(value: str) -> None:
    assert nvtx.choose_backend({nvtx.ENV_VAR: value}).name == "noop"


def test_environment_switch_left_on_keeps_a_real_backend(torch_module) -> None:
    assert nvtx.choose_backend({nvtx.ENV_VAR: "1"}).name == "torch"


def test_ranges_nest_and_close_in_reverse_order(restore_backend) -> None:
    calls: list[tuple[str, object]] = []
    nvtx.select(_recording_backend(calls))
    with nvtx.range("step"):
        with nvtx.range("data_load"):
            pass
        with nvtx.range("forward"):
            pass
    assert calls == [("push", "step"), ("push", "data_load"), ("pop", None),
                     ("push", "forward"), ("pop", None), ("pop", None)]


def test_a_range_is_closed_when_its_body_raises(restore_backend) -> None:
    calls: list[tuple[str, object]] = []
    nvtx.select(_recording_backend(calls))
    with pytest.raises(KeyError):
        with nvtx.range("step"):
            raise KeyError("boom")
    assert calls == [("push", "step"), ("pop", None)]


def test_module_functions_follow_the_selected_backend(restore_backend) -> None:
    calls: list[tuple[str, object]] = []
    nvtx.select(_recording_backend(calls))
    handle = nvtx.start("async")
    nvtx.end(handle)
    nvtx.mark("here")
    assert calls == [("start", "async"), ("end", 1), ("mark", "here")]


_SCRIPT = textwrap.dedent("""
    import time
    from perfgate import nvtx
    with nvtx.range("outer"):
        for _ in range(3):
            with nvtx.range("inner"):
                time.sleep(0.002)
    handle = nvtx.start("async_range")
    time.sleep(0.001)
    nvtx.end(handle)
    print("BACKEND", nvtx.backend())
""")


def _capture(nsys: str, script: Path, out: Path, env: dict[str, str]) -> tuple[list[tuple], str]:
    """(the script's NVTX rows, its output) from a real nsys capture."""
    command = [nsys, "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
               "--export=sqlite", "-f", "true", "-o", str(out), sys.executable, str(script)]
    done = run_supervised(command, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with sqlite3.connect(out.with_suffix(".sqlite")) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "NVTX_EVENTS" not in tables:                   # nsys creates tables lazily
            return [], done.stdout
        return db.execute(
            "SELECT text, eventType, start, end FROM NVTX_EVENTS "
            "WHERE text IN ('outer', 'inner', 'async_range') ORDER BY start"
        ).fetchall(), done.stdout


def test_nsys_records_the_helpers_ranges_nested(nsys_path, torch_module, tmp_path: Path) -> None:
    script = tmp_path / "ranges.py"
    script.write_text(_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != nvtx.ENV_VAR}
    rows, output = _capture(nsys_path, script, tmp_path / "on", env)
    assert "BACKEND torch" in output
    names = [row[0] for row in rows]
    assert names == ["outer", "inner", "inner", "inner", "async_range"]
    outer = rows[0]
    assert outer[1] == 59 and rows[-1][1] == 60           # push/pop, then start/end
    for _, _, start, end in rows[1:4]:
        assert outer[2] <= start < end <= outer[3]
        assert end - start >= 2_000_000                   # the 2 ms sleep is inside


def test_nsys_records_nothing_with_the_switch_off(nsys_path, torch_module, tmp_path: Path) -> None:
    script = tmp_path / "ranges.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, nvtx.ENV_VAR: "0"}
    rows, output = _capture(nsys_path, script, tmp_path / "off", env)
    assert "BACKEND noop" in output
    assert rows == []
