"""The step model on loops of every shape, captured by the real nsys (2022.4 here) with autostep on
and no NVTX of the loops' own: each loop below counts its iterations and times them itself, and the
analysis must find exactly its iterations (a GAN's two optimizer steps are one iteration, LBFGS's
closure calls are not iterations, an evaluation every N iterations is an interlude), with the
step time within a tolerance of the loop's own iteration time.

Each loop prints ``LOOP <iterations> <own median ms> <own mean ms>`` (the iterations it timed
after its first), sleeping a fixed time per iteration so that the times stand above a loaded
machine's noise.
"""
from __future__ import annotations

import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from nsys_run import run_supervised

from perfgate.analysis import AnalysisOptions, analyze
from perfgate.capture.command import capture_environment, prepend_path
from perfgate.trace.export import load_trace
from layout import REPO


PRELUDE = r'''
import sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
torch.set_num_threads(1)
own = []
def timed(loop_body, n):
    t = time.perf_counter()
    for i in range(n):
        loop_body(i)
        now = time.perf_counter()
        own.append((now - t) * 1e3)
        t = now
def report(n):
    import statistics
    times = own[1:]
    print("LOOP", n, statistics.median(times), statistics.mean(times))
'''

LOOPS: dict[str, str] = {
    # two optimizers stepped per iteration: one iteration is D's step then G's
    "gan": r'''
D, G = torch.nn.Linear(16, 1), torch.nn.Linear(8, 16)
opt_d, opt_g = torch.optim.Adam(D.parameters()), torch.optim.Adam(G.parameters())
loader = DataLoader(TensorDataset(torch.randn(8 * 24, 16)), batch_size=8)
it = iter(loader)
def body(i):
    (real,) = next(it)
    fake = G(torch.randn(8, 8))
    loss_d = D(real).mean() - D(fake.detach()).mean()
    opt_d.zero_grad(); loss_d.backward(); opt_d.step()
    time.sleep(0.004)
    loss_g = -D(G(torch.randn(8, 8))).mean()
    opt_g.zero_grad(); loss_g.backward(); opt_g.step()
    time.sleep(0.006)
timed(body, 24); report(24)
''',
    # a critic stepped five times per generator step (WGAN): a cycle of six steps
    "critic": r'''
C, G = torch.nn.Linear(4, 1), torch.nn.Linear(4, 4)
opt_c, opt_g = torch.optim.RMSprop(C.parameters()), torch.optim.RMSprop(G.parameters())
def body(i):
    for _ in range(5):
        loss = C(G(torch.randn(4, 4)).detach()).mean(); opt_c.zero_grad(); loss.backward(); opt_c.step()
        time.sleep(0.001)
    loss = -C(G(torch.randn(4, 4))).mean(); opt_g.zero_grad(); loss.backward(); opt_g.step()
    time.sleep(0.004)
timed(body, 20); report(20)
''',
    # no torch.optim: parameters updated by hand, batches sliced from a tensor (no DataLoader)
    "manual": r'''
w = torch.zeros(32, 1, requires_grad=True)
data, target = torch.randn(640, 32), torch.randn(640, 1)
def body(i):
    x, y = data[i * 16:(i + 1) * 16], target[i * 16:(i + 1) * 16]
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w.sub_(0.01 * w.grad)
        w.grad.zero_()
    time.sleep(0.008)
timed(body, 40); report(40)
''',
    # LBFGS: forward and backward run inside optimizer.step(closure), several times a step
    "lbfgs": r'''
model = torch.nn.Linear(8, 1)
opt = torch.optim.LBFGS(model.parameters(), max_iter=4, history_size=4, tolerance_grad=-1.0, tolerance_change=-1.0)
x, y = torch.randn(64, 8), torch.randn(64, 1)
def body(i):
    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        time.sleep(0.002)
        return loss
    opt.step(closure)
    time.sleep(0.004)
timed(body, 16); report(16)
''',
    # gradient accumulation: four DataLoader batches per optimizer step
    "accumulate": r'''
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(6 * 4 * 16, 8), torch.randn(6 * 4 * 16, 1)), batch_size=6)
it = iter(loader)
def body(i):
    for _ in range(4):
        x, y = next(it)
        (torch.nn.functional.mse_loss(model(x), y) / 4).backward()
        time.sleep(0.002)
    opt.step(); opt.zero_grad()
timed(body, 16); report(16)
''',
    # GradScaler (CPU): every fifth iteration's gradients are inf, and the scaler skips that step
    "scaler": r'''
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
def body(i):
    loss = torch.nn.functional.mse_loss(model(torch.randn(16, 8)), torch.randn(16, 1))
    if i % 5 == 4:
        loss = loss * float("inf")
    scaler.scale(loss).backward()
    scaler.step(opt); scaler.update(); opt.zero_grad()
    time.sleep(0.008)
timed(body, 30); report(30)
''',
    # an evaluation and a checkpoint every 8 iterations, inside the loop
    "interludes": r'''
import os, tempfile
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(16 * 33, 8), torch.randn(16 * 33, 1)), batch_size=16)
it = iter(loader)
path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
train_times = []
def body(i):
    x, y = next(it)
    torch.nn.functional.mse_loss(model(x), y).backward(); opt.step(); opt.zero_grad()
    time.sleep(0.008)
    if i % 8 == 7:
        model.eval()
        with torch.no_grad():
            model(x)
        time.sleep(0.05)
        model.train()
        torch.save(model.state_dict(), path)
timed(body, 33)
import statistics
steady = [t for k, t in enumerate(own) if k % 8 != 7 and k > 0]   # the iterations without an interlude
print("LOOP", 33, statistics.median(steady), statistics.mean(steady))
''',
    # an evaluation left the way Lightning leaves it: each module's training flag assigned back
    "restored": r'''
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def body(i):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    torch.nn.functional.mse_loss(model(x), y).backward(); opt.step(); opt.zero_grad()
    time.sleep(0.008)
    if i % 8 == 7:
        modes = {m: m.training for m in model.modules()}
        model.eval()
        with torch.no_grad():
            model(x)
        time.sleep(0.05)
        for m, mode in modes.items():
            m.training = mode
timed(body, 33)
import statistics
steady = [t for k, t in enumerate(own) if k % 8 != 7 and k > 0]
print("LOOP", 33, statistics.median(steady), statistics.mean(steady))
''',
    # periods in a cycle (a loader handing over batches in bursts): 21 ms, 2 ms, 2 ms, 21 ms, ...
    "bursts": r'''
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(4 * 40, 8), torch.randn(4 * 40, 1)), batch_size=4)
it = iter(loader)
def body(i):
    x, y = next(it)
    torch.nn.functional.mse_loss(model(x), y).backward(); opt.step(); opt.zero_grad()
    time.sleep(0.021 if i % 3 == 0 else 0.002)
timed(body, 40); report(40)
''',
    # a DataLoader with 2 workers made anew each of 6 epochs (12 worker processes over the run)
    "epochs": r'''
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(8 * 6, 8), torch.randn(8 * 6, 1)), batch_size=8, num_workers=2)
t = time.perf_counter()
for epoch in range(6):
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward(); opt.step(); opt.zero_grad()
        time.sleep(0.004)
        now = time.perf_counter(); own.append((now - t) * 1e3); t = now
report(36)
''',
}

SKIP = 2


def _capture(nsys: str, folder: Path, name: str) -> subprocess.CompletedProcess[str]:
    """``folder/<name>.py`` (PRELUDE and its loop) under the real nsys with autostep on, exported
    to ``folder/<name>.sqlite``."""
    (folder / f"{name}.py").write_text(PRELUDE + LOOPS[name])
    env = capture_environment({k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")})
    env["PYTHONPATH"] = prepend_path(env.get("PYTHONPATH", ""), str(REPO))
    cmd = [nsys, "profile", "--trace=nvtx", "--sample=none", "--cpuctxsw=none", "--export=sqlite",
           "-o", str(folder / name), "-f", "true", sys.executable, f"{name}.py"]
    proc = run_supervised(cmd, cwd=folder, env=env, text=True, timeout=300)
    assert proc.returncode == 0, (name, (proc.stdout + proc.stderr)[-3000:])
    # nsys that exited 0 without its export (seen once beside another test process): say what it printed
    assert (folder / f"{name}.sqlite").is_file(), (name, (proc.stdout + proc.stderr)[-3000:])
    return proc


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory, nsys_path: str, torch_module: object) -> dict[str, tuple]:
    """name -> (analysis, (iterations, own median ms, own mean ms)) for every loop."""
    tmp = tmp_path_factory.mktemp("loops")
    out = {}
    for name in LOOPS:
        proc = _capture(nsys_path, tmp, name)
        line = re.search(r"^LOOP (\d+) (\S+) (\S+)$", proc.stdout, re.M)
        assert line is not None, proc.stdout[-2000:]
        own = (int(line.group(1)), float(line.group(2)), float(line.group(3)))
        out[name] = (analyze(load_trace(tmp / f"{name}.sqlite"), AnalysisOptions(skip_steps=SKIP)), own)
    return out


def _measured(iterations: int, interludes: int = 0) -> int:
    """Steps measured from a loop of ``iterations``: the first boundary only opens a step, the
    last step has no next start, SKIP are warm-up."""
    return iterations - 1 - SKIP - 1 - interludes


@pytest.mark.parametrize("name", ["gan", "critic", "manual", "lbfgs", "accumulate", "scaler", "bursts"])
def test_each_loop_is_measured_as_its_own_iterations(captured: dict, name: str) -> None:
    analysis, (iterations, own_median, own_mean) = captured[name]
    assert analysis.steps.count == _measured(iterations), analysis.steps.marker
    assert analysis.steps.time_ms == pytest.approx(own_mean, rel=0.15), (analysis.steps.time_ms, own_median, own_mean)


def test_a_gan_iteration_is_one_pass_through_both_optimizers(captured: dict) -> None:
    analysis = captured["gan"][0]
    assert "cycle Adam #1, Adam #2 (it ends at each step of Adam #2)" in analysis.steps.marker
    assert analysis.phases["optimizer"].count == 2 * analysis.steps.count
    assert analysis.phases["backward"].count == 2 * analysis.steps.count


def test_a_critic_stepped_five_times_makes_a_cycle_of_six(captured: dict) -> None:
    assert "RMSprop #1 x5, RMSprop #2" in captured["critic"][0].steps.marker


def test_without_an_optimizer_each_backward_pass_ends_an_iteration(captured: dict) -> None:
    analysis = captured["manual"][0]
    assert analysis.steps.range_name == "backward" and "no optimizer step" in analysis.steps.marker
    assert analysis.steps.samples_per_s is None and analysis.steps.batch_size is None   # no DataLoader


def test_a_closure_runs_outside_the_optimizer_range(captured: dict) -> None:
    """LBFGS calls the closure (forward, backward) up to max_iter times inside step(): backward is a
    phase of its own with those calls, the optimizer phase holds only the optimizer's own work."""
    analysis = captured["lbfgs"][0]
    n = analysis.steps.count
    phases = analysis.phases
    assert phases["backward"].count >= 2 * n
    assert phases["optimizer"].cpu_per_step_ms < phases["backward"].cpu_per_step_ms + 2.0 * 4
    # the closure sleeps 2 ms after each backward: that is outside both ranges (self time)
    inside = sum(p.cpu_per_step_ms for p in phases.values() if p.name != "between_steps")
    assert inside < analysis.steps.time_ms - 2.0


def test_accumulated_batches_make_one_iteration_and_its_batch_size(captured: dict) -> None:
    analysis = captured["accumulate"][0]
    assert analysis.phases["data_load"].count == 4 * analysis.steps.count
    assert analysis.steps.batch_size == 24 and analysis.steps.batch_source == "dataloader"
    assert analysis.steps.samples_per_s == pytest.approx(24 * 1000 / analysis.steps.summary_ms.mean, rel=0.02)


def test_a_step_the_scaler_skipped_still_ends_its_iteration(captured: dict) -> None:
    analysis = captured["scaler"][0]
    assert "skipped by GradScaler" in analysis.steps.marker
    assert analysis.phases["optimizer"].count < analysis.steps.count        # the skipped ones ran no step


def test_evaluation_and_checkpoints_are_interludes_left_out_of_the_steps(captured: dict) -> None:
    analysis, (iterations, own_median, own_mean) = captured["interludes"]
    st = analysis.steps
    # iterations 8, 16, 24 (k % 8 == 7 ends them) fall in the measured window: 3 interludes
    assert st.interludes == 3 and st.count == _measured(iterations, st.interludes)
    assert st.interlude_mean_ms is not None and st.interlude_mean_ms > own_mean + 40
    assert st.time_ms == pytest.approx(own_mean, rel=0.15) and st.summary_ms.max < own_mean + 30
    assert any("3 interludes" in w for w in analysis.warnings)


def test_an_evaluation_left_without_train_ends_when_training_resumes(captured: dict) -> None:
    """Lightning puts the modules back in training mode by assigning their flags, not by train():
    the evaluation range ends at the next backward pass, and its periods are interludes still."""
    analysis, (iterations, own_median, own_mean) = captured["restored"]
    st = analysis.steps
    assert st.interludes == 3 and st.count == _measured(iterations, st.interludes)
    assert st.time_ms == pytest.approx(own_mean, rel=0.15)


def test_the_workers_of_a_loader_made_anew_each_epoch_are_counted_once(captured: dict) -> None:
    """A loop with 2 DataLoader workers, its iterator re-created every epoch, was told "DataLoader
    workers went from 16 to 0" (worker processes counted over the whole capture): the fact the
    diagnosis states is the workers of the iterator in use, from autostep's loader marks."""
    analysis, _ = captured["epochs"]
    assert analysis.steps.count == _measured(36)
    trace = load_trace(Path(analysis.source))
    assert analysis.facts.dataloader_workers == 2
    assert list(trace.marks["text"]).count("perfgate/loader:2") == 6


def test_a_dataloader_only_where_the_loop_iterates_one(captured: dict) -> None:
    """Issue 42: a loop that makes its own batches was told about "DataLoader workers"; the fact is
    autostep's: a loader mark where a DataLoader iterator was made, none where its hooks ran
    without one (and then no worker count, not the capture's 0 worker processes)."""
    for name, (analysis, _) in captured.items():
        uses = "DataLoader(" in LOOPS[name]
        assert analysis.facts.dataloader is uses, name
        if not uses:
            assert analysis.facts.dataloader_workers is None, name


def test_another_programs_dataloader_workers_are_not_the_loops(tmp_path: Path, nsys_path: str,
                                                               torch_module: object) -> None:
    """nsys lists every process of the machine in PROCESSES, another program's DataLoader workers
    among them: a CI run told the critic loop, which makes no DataLoader, that it had one with 2
    workers (the other test process's). Where autostep marked the capture, its marks decide."""
    # another program beside the capture, its DataLoader's 2 worker processes alive all the while
    neighbour = subprocess.Popen([sys.executable, str(REPO / "scripts" / "gpu" / "neighbour_loader.py"),
                                  "--workers", "2"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ready, _, _ = select.select([neighbour.stdout], [], [], 300)
        assert ready and neighbour.stdout is not None and neighbour.stdout.readline().strip() == "READY"
        _capture(nsys_path, tmp_path, "critic")
    finally:
        os.killpg(neighbour.pid, signal.SIGKILL)
        neighbour.wait()
    with sqlite3.connect(tmp_path / "critic.sqlite") as con:      # the premise: nsys listed them
        listed = con.execute("SELECT count(DISTINCT pid) FROM PROCESSES WHERE name = 'pt_data_worker'").fetchone()[0]
    assert listed >= 2
    facts = analyze(load_trace(tmp_path / "critic.sqlite"), AnalysisOptions(skip_steps=SKIP)).facts
    assert facts is not None and facts.dataloader is False and facts.dataloader_workers is None, facts


def test_periods_in_a_cycle_are_gated_on_their_mean_not_on_a_peak(captured: dict) -> None:
    analysis, (iterations, own_median, own_mean) = captured["bursts"]
    st = analysis.steps
    assert st.time_ms == pytest.approx(own_mean, rel=0.1)
    assert st.statistic == "median of 6-iteration means (whole cycles of 3)"
    # the median of the periods is the short peak (about 3 ms), far from the mean (about 9 ms)
    assert abs(st.summary_ms.median - own_mean) > 0.25 * own_mean


@pytest.fixture(scope="module")
def lightning(tmp_path_factory: pytest.TempPathFactory, nsys_path: str, torch_module: object) -> dict[str, object]:
    """workloads/lightning_loop.py captured with autostep on, without and with perfgate's callback."""
    pytest.importorskip("lightning")
    tmp = tmp_path_factory.mktemp("lightning")
    env = capture_environment({k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")})
    env["PYTHONPATH"] = prepend_path(env.get("PYTHONPATH", ""), str(REPO))
    out = {}
    for variant, extra in {"autostep": [], "callback": ["--perfgate-callback"]}.items():
        cmd = [nsys_path, "profile", "--trace=nvtx", "--sample=none", "--cpuctxsw=none", "--export=sqlite",
               "-o", str(tmp / variant), "-f", "true", sys.executable, "-m", "workloads.lightning_loop",
               "--size", "cpu", "--steps", "12", "--warmup-steps", "3", *extra]
        proc = run_supervised(cmd, cwd=REPO, env=env, text=True, timeout=600)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        out[variant] = analyze(load_trace(tmp / f"{variant}.sqlite"), AnalysisOptions(skip_steps=3))
    return out


def test_lightning_without_the_callback_keeps_backward_out_of_the_optimizer(lightning: dict) -> None:
    """Lightning's automatic optimization runs training_step and backward inside optimizer.step's
    closure: the optimizer range used to wrap them (phases data_load and optimizer at 69 % of the
    step, no backward). The closure runs outside it now."""
    a = lightning["autostep"]
    # 15 optimizer steps: 14 iterations between them, 3 warm-up, the last without a next start
    assert a.steps.source == "autostep" and a.steps.count == 15 - 1 - 3 - 1
    assert {"data_load", "backward", "optimizer"} <= set(a.phases)
    assert a.phases["backward"].count == a.steps.count
    assert a.phases["optimizer"].share_of_step < a.phases["backward"].share_of_step + 0.5
    assert a.phases["optimizer"].cpu_per_step_ms + a.phases["backward"].cpu_per_step_ms < a.steps.summary_ms.mean


def test_lightning_with_the_callback_and_autostep_keeps_each_phase_its_own(lightning: dict) -> None:
    """The callback's push/pop ranges and autostep's start/end ranges on one thread: the callback's
    step holds forward, backward and optimizer side by side (forward used to span the whole step,
    the other two nested in it, after the callback's pop closed autostep's range)."""
    a = lightning["callback"]
    assert a.steps.source == "nvtx" and a.steps.range_name == "step"
    assert {"forward", "backward", "optimizer"} <= set(a.phases)
    n = a.steps.count
    assert n == 15 - 3 - 1                                  # 15 step ranges, 3 warm-up, the last one
    assert a.phases["forward"].count == a.phases["backward"].count == a.phases["optimizer"].count == n
    assert a.phases["forward"].share_of_step < 0.8
    total = sum(p.cpu_per_step_ms for p in a.phases.values())
    assert total <= a.steps.summary_ms.mean * 1.001        # side by side: the phases do not overlap
