"""Autostep: NVTX ranges from hooks perfgate installs in a profiled process through its
environment (``PERFGATE_AUTOSTEP=1``, ``perfgate/capture/autostep/site`` first on ``PYTHONPATH``).

The training scripts below have no NVTX of their own. Without nsys, ``PERFGATE_AUTOSTEP_DEBUG``
makes every push/pop also land in a file; with the real nsys the ranges are read back from the
SQLite export."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsys_run import run_supervised
from perfgate.capture.autostep import install as autostep
from perfgate.capture.autostep.post_import import PostImportFinder
from perfgate.capture.command import capture_environment, prepend_path
from perfgate.records.autostep_ranges import BACKWARD, DATA_LOAD, FORWARD, NOTE_PREFIX, OPTIMIZER
from layout import REPO


# argv: batches, steps to run before breaking out (0: the whole loader), workers, context
TRAIN = r'''
import os, sys
import torch
from torch.utils.data import DataLoader, TensorDataset
given = [int(a) for a in sys.argv[1:4]]
batches, max_steps, workers = given + [3, 0, 0][len(given):]
extra = {"multiprocessing_context": sys.argv[4]} if len(sys.argv) > 4 else {}
torch.manual_seed(0)
data = TensorDataset(torch.randn(4 * batches, 8), torch.randn(4 * batches, 1))
loader = DataLoader(data, batch_size=4, num_workers=workers, **extra)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps = 0
for x, y in loader:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    steps += 1
    if steps == max_steps:
        break
print("pid", os.getpid(), "steps", steps, "autostep", "perfgate.capture.autostep.install" in sys.modules)
'''

# Re-entrancy: a DataLoader whose dataset iterates another DataLoader (nested __next__), a
# reentrant checkpoint (torch.autograd.backward inside backward), an optimizer whose step runs
# another optimizer's step (nested step hooks).
NESTED = r'''
import os
import torch
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, IterableDataset, TensorDataset
inner = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
class Through(IterableDataset):
    def __iter__(self):
        for (x,) in inner:
            yield x
class Wrapping(torch.optim.Optimizer):
    def __init__(self, params):
        params = list(params)
        super().__init__(params, {})
        self.inner = torch.optim.SGD(params, lr=0.1)
    def step(self, closure=None):
        return self.inner.step()
lin = torch.nn.Linear(4, 4)
opt = Wrapping(lin.parameters())
for x in DataLoader(Through(), batch_size=None):
    y = checkpoint(lin, x.requires_grad_(), use_reentrant=True)
    y.sum().backward()
    opt.step()
print("pid", os.getpid())
'''

# torch.compile (backend "eager": dynamo's tracing and graph breaks, no code generation) of a
# whole training step: dynamo breaks the graph at loss.backward(), which then runs eagerly.
COMPILED = r'''
import os
import torch
import torch._dynamo
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(12, 8), torch.randn(12, 1)), batch_size=4)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
@torch.compile(backend="eager")
def train_step(x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss
for x, y in loader:
    train_step(x, y)
    opt.step()
    opt.zero_grad()
breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
print("pid", os.getpid(), "graph_breaks", breaks)
'''

# The forward hooks' rules: a LightningModule-like wrapper whose own forward is never called (its
# child's is), an evaluation in eval mode under no_grad, a frozen module (no parameter needing a
# gradient), and a forward that raises (the range still ends).
WRAPPED_MODEL = r'''
import os
import torch
class Wrapper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    def training_step(self, x, y):
        return torch.nn.functional.mse_loss(self.net(x), y)
frozen = torch.nn.Linear(8, 8).requires_grad_(False)
model = Wrapper()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(4, 8), torch.randn(4, 1)
for step in range(3):
    loss = model.training_step(frozen(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    model.eval()
    with torch.no_grad():
        model.net(x)
    model.train()
try:
    model.net(torch.randn(4, 3))
except RuntimeError:
    pass
torch.save(model, "model.pt")     # a whole module: pickled with its hooks
with open("model.pt", "rb") as fh:
    saved = fh.read()
print("perfgate_in_checkpoint", b"perfgate" in saved, "hooks_after_save", len(model.net._forward_hooks))
print("pid", os.getpid())
'''

STEP = [("start", DATA_LOAD), ("end", DATA_LOAD), ("start", BACKWARD), ("end", BACKWARD),
        ("start", OPTIMIZER), ("end", OPTIMIZER)]
# from the second step on: the model's forward, hooked at the first backward pass (forward.py)
STEP_WITH_FORWARD = [*STEP[:2], ("start", FORWARD), ("end", FORWARD), *STEP[2:]]
LAST_NEXT = [("start", DATA_LOAD), ("end", DATA_LOAD)]  # the __next__ that raises StopIteration
TRAIN_RANGES = STEP + STEP_WITH_FORWARD * 2 + LAST_NEXT   # TRAIN's three steps and its last __next__


def child_env(base_pythonpath: str = "", **extra: str) -> dict[str, str]:
    """The environment perfgate gives a profiled process (capture_environment), with perfgate
    importable from the repository too, and ``extra`` on top (``None`` values removed)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
    base["PYTHONPATH"] = prepend_path(base_pythonpath, str(REPO)) if base_pythonpath else str(REPO)
    env = capture_environment(base)
    env.update(extra)
    return env


def run_python(code: str, cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=240, check=False)


def events(path: Path, kinds: tuple[str, ...] = ("start", "end")) -> list[tuple[int, str, str]]:
    """``(pid, start|end|mark, text)`` per line of a PERFGATE_AUTOSTEP_DEBUG file, of ``kinds``
    (the ranges' starts and ends unless told)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        pid, event, name = line.split(" ", 2)
        if event in kinds:
            out.append((int(pid), event, name))
    return out


def marks(path: Path) -> list[str]:
    return [text for _, _, text in events(path, ("mark",))]


def main_pid(proc: subprocess.CompletedProcess[str]) -> int:
    assert proc.returncode == 0, proc.stderr[-2000:]
    words = proc.stdout.split()
    return int(words[words.index("pid") + 1])


def our_notes(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith(NOTE_PREFIX)]


# --------------------------------------------------------------------------- without nsys


def test_each_step_gives_data_load_backward_optimizer(tmp_path: Path, torch_module: object) -> None:
    debug = tmp_path / "ranges.txt"
    proc = run_python(TRAIN, tmp_path, child_env(PERFGATE_AUTOSTEP_DEBUG=str(debug)))
    pid = main_pid(proc)
    assert "steps 3 autostep True" in proc.stdout
    # three steps, then the __next__ that ends the loop (StopIteration) is a data_load range too
    assert [(e, n) for p, e, n in events(debug)] == STEP + STEP_WITH_FORWARD * 2 + LAST_NEXT
    assert {p for p, _, _ in events(debug)} == {pid}
    # the iterator's workers, its batch size once (it does not change), the optimizer's number and
    # class at its first step, then one step mark per step
    assert marks(debug) == ["perfgate/loader:0", "perfgate/batch:4", "perfgate/optimizer_new:1:SGD",
                            *["perfgate/optimizer_step:1"] * 3]
    assert our_notes(proc.stderr) == []


def test_breaking_out_of_the_loop_gives_one_data_load_per_step(tmp_path: Path, torch_module: object) -> None:
    debug = tmp_path / "ranges.txt"
    proc = run_python(TRAIN, tmp_path, child_env(PERFGATE_AUTOSTEP_DEBUG=str(debug)), "5", "3")
    main_pid(proc)
    assert [(e, n) for _, e, n in events(debug)] == STEP + STEP_WITH_FORWARD * 2


def test_nested_calls_give_one_range_each(tmp_path: Path, torch_module: object) -> None:
    debug = tmp_path / "ranges.txt"
    proc = run_python(NESTED, tmp_path, child_env(PERFGATE_AUTOSTEP_DEBUG=str(debug)))
    main_pid(proc)
    # the checkpoint's recomputation inside backward opens no forward range
    assert [(e, n) for _, e, n in events(debug)] == STEP + STEP_WITH_FORWARD * 3 + LAST_NEXT


def test_the_forward_of_the_trained_model_is_one_range_from_the_second_step(tmp_path: Path,
                                                                            torch_module: object) -> None:
    debug = tmp_path / "ranges.txt"
    proc = run_python(WRAPPED_MODEL, tmp_path, child_env(PERFGATE_AUTOSTEP_DEBUG=str(debug)))
    main_pid(proc)
    ranges = [n for e, n in ((e, n) for _, e, n in events(debug)) if e == "start"]
    evaluation = "perfgate/eval"
    first = [BACKWARD, OPTIMIZER, evaluation]
    # the wrapper's child is hooked (its own forward is never called); the frozen module and the
    # evaluation's call emit none; the call that raised is a range that ended
    assert ranges == first + [FORWARD, BACKWARD, OPTIMIZER, evaluation] * 2 + [FORWARD, "perfgate/checkpoint"]
    assert len(events(debug)) == 2 * len(ranges)
    # torch.save of a hooked module: the checkpoint does not name perfgate, the hooks stay on
    assert "perfgate_in_checkpoint False hooks_after_save 1" in proc.stdout
    off = tmp_path / "off.txt"
    main_pid(run_python(WRAPPED_MODEL, tmp_path, child_env(PERFGATE_AUTOSTEP_DEBUG=str(off),
                                                           PERFGATE_AUTOSTEP_FORWARD="0")))
    assert FORWARD not in {n for _, _, n in events(off)}
    assert our_notes(proc.stderr) == []


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_run_and_emit_nothing(tmp_path: Path, torch_module: object, context: str) -> None:
    debug = tmp_path / "ranges.txt"
    proc = run_python(TRAIN, tmp_path, child_env(PERFGATE_AUTOSTEP_DEBUG=str(debug)), "3", "0", "2", context)
    pid = main_pid(proc)
    assert [(e, n) for p, e, n in events(debug) if p == pid] == TRAIN_RANGES
    assert {p for p, _, _ in events(debug)} == {pid}, "a worker process emitted ranges"
    assert our_notes(proc.stderr) == []


def test_torch_compile_keeps_its_graph_breaks_and_the_eager_backward_keeps_its_range(
        tmp_path: Path, torch_module: object) -> None:
    debug = tmp_path / "ranges.txt"
    on = run_python(COMPILED, tmp_path, child_env(PERFGATE_AUTOSTEP_DEBUG=str(debug)))
    off = run_python(COMPILED, tmp_path, child_env(PERFGATE_AUTOSTEP="0"))
    main_pid(on), main_pid(off)
    assert on.stdout.split()[-2:] == off.stdout.split()[-2:] == ["graph_breaks", "1"]  # Tensor.backward()
    # the model's call is traced by torch.compile: its forward hooks emit nothing, and break no graph
    assert [(e, n) for _, e, n in events(debug)] == STEP * 3 + LAST_NEXT


@pytest.mark.parametrize("value", ["0", None])
def test_autostep_off_or_unset_installs_nothing(tmp_path: Path, torch_module: object, value: str | None) -> None:
    debug = tmp_path / "ranges.txt"
    env = child_env(PERFGATE_AUTOSTEP_DEBUG=str(debug))
    if value is None:
        del env["PERFGATE_AUTOSTEP"]
    else:
        env["PERFGATE_AUTOSTEP"] = value
    proc = run_python(TRAIN, tmp_path, env)
    main_pid(proc)
    assert "autostep False" in proc.stdout
    assert not debug.exists()
    assert proc.stderr.count(NOTE_PREFIX) == 0


USER_SITECUSTOMIZE = '''
import os
with open(os.environ["USER_SITE_MARK"], "a") as fh:
    fh.write("ran\\n")
USER_VALUE = 42
'''


@pytest.mark.parametrize("value", ["1", "0"])
def test_users_own_sitecustomize_still_runs_once(tmp_path: Path, torch_module: object, value: str) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    mark, debug = tmp_path / "mark.txt", tmp_path / "ranges.txt"
    env = child_env(str(user), USER_SITE_MARK=str(mark), PERFGATE_AUTOSTEP=value,
                    PERFGATE_AUTOSTEP_DEBUG=str(debug))
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [autostep.site_dir(), str(user)]
    proc = run_python(TRAIN + "import sitecustomize; print('user value', sitecustomize.USER_VALUE)\n", tmp_path, env)
    main_pid(proc)
    assert mark.read_text() == "ran\n"
    assert "user value 42" in proc.stdout
    assert len(events(debug)) == (len(TRAIN_RANGES) if value == "1" else 0)


def test_a_failing_user_sitecustomize_is_one_line_and_the_program_runs(tmp_path: Path, torch_module: object) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("raise RuntimeError('boom')\n")
    debug = tmp_path / "ranges.txt"
    proc = run_python(TRAIN, tmp_path, child_env(str(user), PERFGATE_AUTOSTEP_DEBUG=str(debug)))
    main_pid(proc)
    assert our_notes(proc.stderr) == [
        f"perfgate autostep: error in {user / 'sitecustomize.py'}: RuntimeError: boom"]
    assert [(e, n) for _, e, n in events(debug)] == TRAIN_RANGES


CHAINING_SITECUSTOMIZE = '''
import importlib.machinery, importlib.util, os, sys
here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != here])
if spec is not None:
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
with open(os.environ["USER_SITE_MARK"], "a") as fh:
    fh.write("ran\\n")
'''


def test_a_chaining_user_sitecustomize_does_not_recurse(tmp_path: Path, torch_module: object) -> None:
    """A sitecustomize that itself runs the next one on sys.path finds ours again: ours does
    nothing the second time."""
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text(CHAINING_SITECUSTOMIZE)
    mark, debug = tmp_path / "mark.txt", tmp_path / "ranges.txt"
    proc = run_python(TRAIN, tmp_path, child_env(str(user), USER_SITE_MARK=str(mark), PERFGATE_AUTOSTEP_DEBUG=str(debug)))
    main_pid(proc)
    assert mark.read_text() == "ran\n"
    assert [(e, n) for _, e, n in events(debug)] == TRAIN_RANGES
    assert our_notes(proc.stderr) == []


def test_perfgate_not_importable_is_one_note(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "perfgate"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('simulated: no perfgate here')\n")
    env = child_env(str(shadow.parent))
    proc = run_python("print('ran')", tmp_path, env)
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    notes = our_notes(proc.stderr)
    assert len(notes) == 1 and "perfgate is not importable by" in notes[0] and "simulated" in notes[0]


def test_torch_without_nvtx_gets_no_hooks_and_one_note(tmp_path: Path) -> None:
    """A CPU-only torch build has no torch._C._nvtx: stand-in package with just that shape."""
    pkg = tmp_path / "cpu_torch" / "torch"
    (pkg / "autograd").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from torch import _C, autograd\n")
    (pkg / "_C.py").write_text("")
    (pkg / "autograd" / "__init__.py").write_text("def backward(*args, **kwargs):\n    return 'unhooked'\n")
    proc = run_python("import torch; print(torch.autograd.backward())", tmp_path, child_env(str(pkg.parent)))
    assert proc.returncode == 0 and proc.stdout == "unhooked\n", proc.stderr
    notes = our_notes(proc.stderr)
    assert len(notes) == 1 and notes[0].startswith("perfgate autostep: torch has no NVTX (CPU-only build?): ")


def test_install_does_not_import_torch(tmp_path: Path) -> None:
    proc = run_python("import sys; print('torch' in sys.modules, 'perfgate.capture.autostep.install' in sys.modules)", tmp_path,
                      child_env())
    assert (proc.returncode, proc.stdout) == (0, "False True\n"), proc.stderr


def test_enabled_reads_the_same_words_as_the_config() -> None:
    assert autostep.enabled({"PERFGATE_AUTOSTEP": "1"}) and autostep.enabled({"PERFGATE_AUTOSTEP": " On "})
    assert not autostep.enabled({"PERFGATE_AUTOSTEP": "0"}) and not autostep.enabled({})


def test_install_in_process_hooks_a_loaded_torch_and_uninstall_restores_it(torch_module) -> None:
    torch = torch_module
    from torch.optim import optimizer as optim_module
    from torch.utils.data import dataloader

    before = (torch.autograd.backward, dataloader._BaseDataLoaderIter.__dict__["__next__"],
              len(optim_module._global_optimizer_pre_hooks), len(optim_module._global_optimizer_post_hooks))
    assert not autostep.installed()
    try:
        assert autostep.install(environ={}) and autostep.install(environ={})  # idempotent
        assert getattr(torch.autograd.backward, "__perfgate_autostep__", False)
        assert torch.autograd.backward.__wrapped__ is before[0]
        assert getattr(dataloader._BaseDataLoaderIter.__next__, "__perfgate_autostep__", False)
        assert len(optim_module._global_optimizer_pre_hooks) == before[2] + 1
        assert len(optim_module._global_optimizer_post_hooks) == before[3] + 1
        lin = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        for (x,) in torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)), batch_size=2):
            lin(x).sum().backward()
            opt.step()
    finally:
        autostep.uninstall()
    after = (torch.autograd.backward, dataloader._BaseDataLoaderIter.__dict__["__next__"],
             len(optim_module._global_optimizer_pre_hooks), len(optim_module._global_optimizer_post_hooks))
    assert after == before
    assert not any(isinstance(f, PostImportFinder) for f in sys.meta_path)


# --------------------------------------------------------------------------- with the real nsys


def test_nsys_records_one_range_of_each_kind_per_step(tmp_path: Path, nsys_path: str, torch_module: object) -> None:
    from perfgate.trace.export import load_trace

    (tmp_path / "train.py").write_text(TRAIN)
    cmd = [nsys_path, "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none", "--export=sqlite",
           "-o", str(tmp_path / "trace"), "-f", "true", sys.executable, "train.py", "5", "3"]
    proc = run_supervised(cmd, cwd=tmp_path, env=child_env(), text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    assert "steps 3 autostep True" in proc.stdout
    nvtx = load_trace(tmp_path / "trace.sqlite").nvtx.frame()
    ours = nvtx[nvtx["text"].str.startswith("perfgate/")].sort_values("start", kind="stable")
    assert ours["text"].value_counts().to_dict() == {DATA_LOAD: 3, FORWARD: 2, BACKWARD: 3, OPTIMIZER: 3}
    assert list(ours["text"]) == [DATA_LOAD, BACKWARD, OPTIMIZER] + [DATA_LOAD, FORWARD, BACKWARD, OPTIMIZER] * 2
    assert ours["global_tid"].nunique() == 1 and not ours["unterminated"].any()
    starts, ends = ours["start"].to_numpy(), ours["end"].to_numpy()
    assert (ends > starts).all()
    assert (ends[:-1] <= starts[1:]).all(), "autostep ranges overlap"
