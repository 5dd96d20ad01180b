"""Autostep's search for the batches a program makes itself (perfgate/capture/autostep/inputs.py):
a ``get_batch()`` of the training loop, no DataLoader, becomes the ``perfgate/data_load`` range
once the model's forward has taken what it returned, whatever the place of its call in the loop.

Real CPU training scripts in a child process with autostep on; ``PERFGATE_AUTOSTEP_DEBUG`` writes
their ranges and marks to a file (as in tests/capture/test_autostep.py)."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from perfgate.capture.autostep import install as autostep
from perfgate.records.autostep_ranges import BACKWARD, DATA_LOAD, FORWARD, MARK_INPUT
from test_autostep import child_env, events, main_pid, marks, our_notes, run_python

HEAD = '''
import os, sys
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def step(loss):
    loss.backward()
    opt.step()
    opt.zero_grad()
'''
TAIL = 'print("pid", os.getpid())\n'

BEFORE = HEAD + '''
def get_batch():
    return torch.randn(4, 8), torch.randn(4, 1)
for i in range(6):
    x, y = get_batch()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
''' + TAIL

# nanoGPT's order: the next batch is fetched after the forward (a prefetch), then backward
PREFETCH = HEAD + '''
def get_batch():
    return torch.randn(4, 8), torch.randn(4, 1)
x, y = get_batch()
for i in range(6):
    loss = torch.nn.functional.mse_loss(model(x), y)
    x, y = get_batch()
    step(loss)
''' + TAIL

METHOD = HEAD + '''
class Data:
    def get_batch(self):
        return {"x": torch.randn(4, 8), "y": torch.randn(4, 1)}
class Shuffled(Data):
    pass
data = Shuffled()
for i in range(6):
    batch = data.get_batch()
    step(torch.nn.functional.mse_loss(model(batch["x"]), batch["y"]))
print("on_subclass", "get_batch" in Shuffled.__dict__,
      "wrapped", getattr(Data.__dict__["get_batch"], "__perfgate_autostep__", False))
''' + TAIL

GENERATOR = HEAD + '''
def batches():
    for _ in range(3):
        yield torch.randn(4, 8), torch.randn(4, 1)
for epoch in range(3):
    for x, y in batches():
        step(torch.nn.functional.mse_loss(model(x), y))
''' + TAIL

CLOSURE = HEAD + '''
def main():
    get = lambda: (torch.randn(4, 8), torch.randn(4, 1))
    for i in range(6):
        x, y = get()
        step(torch.nn.functional.mse_loss(model(x), y))
main()
''' + TAIL

# word_language_model's shape: the forward takes (data, hidden); hidden comes back from
# repackage_hidden, data from get_batch (argv "slice": from indexing a tensor, no call)
RECURRENT = HEAD + '''
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
    def forward(self, data, hidden):
        out = torch.tanh(self.lin(data) + hidden)
        return out, out
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
source = torch.randn(6, 4, 8)
def get_batch(source, i):
    return source[i], source[i].sum(1)
def repackage_hidden(h):
    return h.detach()
def train():
    hidden = torch.zeros(4, 8)
    for i in range(6):
        data, targets = get_batch(source, i) if sys.argv[1:] != ["slice"] else (source[i], None)
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        output.sum().backward()
        opt.step()
        opt.zero_grad()
train()
''' + TAIL

# the program's own profiler, set before the loop, stays set and keeps receiving its events
PROFILED = HEAD + '''
seen = []
def profiler(frame, event, arg):
    if event == "call":
        seen.append(frame.f_code.co_name)
sys.setprofile(profiler)
def get_batch():
    return torch.randn(4, 8), torch.randn(4, 1)
for i in range(6):
    x, y = get_batch()
    step(torch.nn.functional.mse_loss(model(x), y))
print("ours", sys.getprofile() is profiler, "calls", seen.count("get_batch"))
sys.setprofile(None)
''' + TAIL

B, D, F = BACKWARD, DATA_LOAD, FORWARD


def starts(path: Path) -> list[str]:
    return [n for _, e, n in events(path) if e == "start" and n in (B, D, F)]


def run(tmp_path: Path, code: str, *args: str, **env: str) -> tuple[list[str], list[str], str, list[str]]:
    """The forward/data_load/backward range starts, the input marks, stdout and our notes."""
    debug = tmp_path / "ranges.txt"
    proc = run_python(code, tmp_path, child_env(PERFGATE_AUTOSTEP_DEBUG=str(debug), **env), *args)
    main_pid(proc)
    assert len(events(debug)) % 2 == 0
    return starts(debug), [m for m in marks(debug) if m.startswith(MARK_INPUT)], proc.stdout, our_notes(proc.stderr)


# the first iteration opens the window (first backward), the second's forward takes the batch
FIRST_TWO = [B, F, B]


@pytest.mark.parametrize(("code", "iteration", "mark"), [
    (BEFORE, [D, F, B], "__main__.get_batch"),
    (PREFETCH, [F, D, B], "__main__.get_batch"),
    (METHOD, [D, F, B], "__main__.Data.get_batch"),
], ids=["before-forward", "prefetch-after-forward", "method"])
def test_the_programs_batch_function_is_the_data_load_range_from_the_third_iteration(
        tmp_path: Path, torch_module: object, code: str, iteration: list[str], mark: str) -> None:
    found, input_marks, stdout, notes = run(tmp_path, code)
    assert found == FIRST_TWO + iteration * 4
    assert input_marks == [f"{MARK_INPUT}:{mark}"]
    assert notes == []
    if code is METHOD:    # wrapped on the class that defines it
        assert "on_subclass False wrapped True" in stdout


def test_a_generator_functions_next_generators_are_data_load_ranges(tmp_path: Path, torch_module: object) -> None:
    found, input_marks, _, notes = run(tmp_path, GENERATOR)
    # the first epoch's generator was running when found: the next epochs' each next() (the last
    # one raising StopIteration) is a range
    assert found == [B, F, B, F, B] + ([D, F, B] * 3 + [D]) * 2
    assert input_marks == [f"{MARK_INPUT}:__main__.batches"]
    assert notes == []


def test_a_function_in_a_local_is_named_in_one_note_and_gets_no_range(tmp_path: Path, torch_module: object) -> None:
    found, input_marks, _, notes = run(tmp_path, CLOSURE)
    assert D not in found and input_marks == []
    assert len(notes) == 1 and "main.<locals>.<lambda>" in notes[0] and "cannot be wrapped" in notes[0], notes


def test_only_the_forwards_first_argument_counts(tmp_path: Path, torch_module: object) -> None:
    found, input_marks, _, notes = run(tmp_path, RECURRENT)
    assert found == FIRST_TWO + [D, F, B] * 4
    assert input_marks == [f"{MARK_INPUT}:__main__.get_batch"] and notes == []
    # data made by indexing: repackage_hidden's result is the second argument, never the input
    (tmp_path / "slice").mkdir()
    found, input_marks, _, notes = run(tmp_path / "slice", RECURRENT, "slice")
    assert found == FIRST_TWO + [F, B] * 4 and input_marks == [] and notes == []


def test_inputs_off_gives_no_range(tmp_path: Path, torch_module: object) -> None:
    found, input_marks, _, notes = run(tmp_path, PREFETCH, PERFGATE_AUTOSTEP_INPUTS="0")
    assert found == FIRST_TWO + [F, B] * 4 and input_marks == [] and notes == []


def test_a_program_with_its_own_profiler_is_left_alone(tmp_path: Path, torch_module: object) -> None:
    found, input_marks, stdout, notes = run(tmp_path, PROFILED)
    assert D not in found and input_marks == []
    assert "ours True calls 6" in stdout
    assert len(notes) == 1 and "sys.setprofile" in notes[0], notes


def test_uninstall_restores_the_function_and_the_profiler(torch_module) -> None:
    torch = torch_module
    batches = types.ModuleType("batches")
    exec("import torch\ndef get_batch():\n    return torch.randn(2, 3), torch.randn(2, 1)\n", batches.__dict__)
    original = batches.get_batch
    lin = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    assert not autostep.installed() and sys.getprofile() is None
    try:
        assert autostep.install(environ={})
        for _ in range(4):
            x, y = batches.get_batch()
            torch.nn.functional.mse_loss(lin(x), y).backward()
            opt.step()
        assert batches.get_batch is not original and batches.get_batch.__wrapped__ is original
        assert sys.getprofile() is None      # the window closed once the function was found
    finally:
        autostep.uninstall()
    assert batches.get_batch is original and sys.getprofile() is None
