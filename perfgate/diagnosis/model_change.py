"""A change of the model, in the model's words: the work per step of both runs' profile launches,
read by kernel role (perfgate.analysis.kernel_families), and what changed in it.

The work a step does: the launches and GPU time of its layers' kernels (GEMMs, convolutions,
attention, normalization, cuDNN's recurrent layers) outside the optimizer; the parameters, read
from the kernels that run over all of them (an optimizer's, a gradient clipping's foreach norms):
the threads they launch (grid x block: a multi-tensor kernel's grid grows with the tensors'
elements), else their GPU time; the loss's threads, which grow with the predictions a step makes
where a loss launch spans more than one block; the bytes copied to the GPU (the inputs: batch
times sample size) and the batch size where the loop's DataLoader says it. What changed, each a
predicate on both sides:

- **deeper**: the layers run more of the same kernels (the layer roles' launches grew by
  ``GREW`` or more, none fell) and the parameters grew with them (where they cannot be read, "or
  layers called more often"). The same parameters with more launches is no model change:
  recomputation, or another path's kernels; unless the loss's work grew with them:
- **a longer sequence**: the layers' kernels run more often per step, the parameters did not grow
  (or cannot be read) and the loss covers ``GREW`` times the threads or more at the same launches:
  more predictions per step, made by more steps through the same layers (a recurrent layer runs
  its kernels once per time step).
- **a larger batch**: the batch size grew (by ``GREW`` or more). Checked first: the layers' launches
  may change with it (cuDNN picks other algorithms for other shapes, and work done once an epoch
  falls on fewer steps); the step is then compared per sample too. Synchronizations per step that
  grew while the launch's measured steps made no more of them in all (the same once-per-epoch
  work over fewer steps: ``spread_syncs``) are the batch's, not new ones.
- **larger inputs**: the bytes copied to the GPU grew at the same batch (or no known batch), or
  where nothing is copied the loss's work grew; the layers' launches and the parameters did not.
- **wider**: the layers' launches are the same, their kernels take longer, the inputs did not
  grow and the parameters did.

None of them (the same work in other kernels: an algorithm, a precision, a path) is left to
perfgate.diagnosis.mechanisms. Pure functions."""
from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from perfgate.analysis.kernel_families import BY_ID, OPTIMIZER_PLACE
from perfgate.diagnosis.differences import MODEL_PHASE
from perfgate.records.diagnosis import Reason
from perfgate.records.facts import TraceFacts
from perfgate.records.model import Analysis

MODEL_MECHANISMS = ("model:deeper", "model:sequence", "model:batch", "model:inputs", "model:wider")
LAYER_ROLES = {"matmul": "GEMMs", "convolution": "convolutions", "attention": "attention kernels",
               "normalization": "normalization kernels", "recurrent": "recurrent-layer kernels"}
MIN_LAUNCHES = 1.0          # launches per step a role needs on both sides to be read
GREW = 1.15                 # a ratio at least this: grew
SAME = 0.10                 # launches within this share of each other: the same
MIN_PARAMS_MS = 0.05        # optimizer ms/step under which its change says nothing
ONE_BLOCK = 1024            # threads: a loss launch larger than this sizes its grid by the predictions


@dataclass(frozen=True)
class Work:
    """One run's work per step: layer role -> (launches, GPU ms); the optimizer's GPU ms; bytes
    copied to the GPU; the batch size (None where not known); the gated step time; the threads the
    optimizer-role kernels launch; the loss's (launches, threads) (None where not known)."""

    layers: dict[str, tuple[float, float]]
    params_ms: float
    input_bytes: float | None
    batch: int | None
    step_ms: float | None = None      # the gated step time
    params_threads: float | None = None
    loss: tuple[float, float] | None = None


@dataclass(frozen=True)
class ModelChange:
    kind: str                   # deeper, batch, inputs, wider
    text: str
    cause: str


def work(a: Analysis, facts: TraceFacts | None) -> Work | None:
    """The work per step of one run's profile launch; None without kernels by family."""
    if facts is None or not facts.kernels_by_family:
        return None
    layers: dict[str, list[float]] = {}
    params = 0.0
    threads: dict[str, float | None] = {"optimizer": 0.0, "loss": 0.0}
    loss_launches = 0.0
    for place, families in facts.kernels_by_family.items():
        for family, names in families.items():
            role = BY_ID[family].role if family in BY_ID else family
            n, ms = sum(v[0] for v in names.values()), sum(v[1] for v in names.values())
            if role in threads:
                size = facts.threads_by_family.get(place, {}).get(family)
                known = threads[role]
                threads[role] = None if size is None or known is None else known + size
            if role == "optimizer":
                params += ms
            elif role == "loss":
                loss_launches += n
            elif role in LAYER_ROLES and not OPTIMIZER_PLACE.search(place):
                into = layers.setdefault(role, [0.0, 0.0])
                into[0] += n
                into[1] += ms
    inputs = a.gpu.h2d_bytes_per_step if a.gpu is not None else None
    loss = threads["loss"]
    return Work({r: (v[0], v[1]) for r, v in layers.items()}, params, inputs or None, a.steps.batch_size,
                a.steps.location_ms, threads["optimizer"] or None,
                (loss_launches, loss) if loss_launches and loss else None)


def _ratio(b: float, c: float) -> float:
    return c / b if b > 0 else float("inf")


def _counts(base: Work, cur: Work, roles: list[str]) -> str:
    return ", ".join(f"{LAYER_ROLES[r]} {base.layers[r][0]:.0f} -> {cur.layers[r][0]:.0f}" for r in roles)


def _layer_ms(w: Work, roles: list[str]) -> float:
    return sum(w.layers[r][1] for r in roles)


def _bytes(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def _threads(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k"


def _parameters(base: Work, cur: Work) -> tuple[float | None, str]:
    """How the parameters grew (a ratio; None where they cannot be read) and the words for it: the
    threads the kernels over all parameters launch where both sides have them, else the
    optimizer's GPU time where it is large enough to read."""
    if base.params_threads and cur.params_threads:
        return (_ratio(base.params_threads, cur.params_threads),
                f"the kernels over all parameters (optimizer, foreach) {_threads(base.params_threads)} -> "
                f"{_threads(cur.params_threads)} threads/step")
    if max(base.params_ms, cur.params_ms) >= MIN_PARAMS_MS:
        return (_ratio(base.params_ms, cur.params_ms),
                f"the optimizer's kernels {base.params_ms:.2f} -> {cur.params_ms:.2f} ms/step")
    return None, ""


def _predictions(base: Work, cur: Work) -> tuple[float | None, str]:
    """How the loss's work grew (a ratio of its threads per step at the same launches; None where it
    cannot say: no loss, other launches, or a loss of one block whatever its input) and the words."""
    if base.loss is None or cur.loss is None or base.loss[0] < MIN_LAUNCHES:
        return None, ""
    (bn, bt), (cn, ct) = base.loss, cur.loss
    if abs(_ratio(bn, cn) - 1) > SAME or bt / bn <= ONE_BLOCK:
        return None, ""
    return _ratio(bt, ct), f"the loss's {cn:.0f} launches/step cover {_threads(bt)} -> {_threads(ct)} threads/step"


def model_change(base: Work | None, cur: Work | None) -> ModelChange | None:
    """What changed in the model's work per step from ``base`` to ``cur``, or None when none of the
    predicates above holds (module docstring)."""
    if base is None or cur is None:
        return None
    roles = [r for r in LAYER_ROLES if base.layers.get(r, (0, 0))[0] >= MIN_LAUNCHES
             and cur.layers.get(r, (0, 0))[0] >= MIN_LAUNCHES]
    if not roles:
        return None
    counts = {r: _ratio(base.layers[r][0], cur.layers[r][0]) for r in roles}
    b_ms, c_ms = _layer_ms(base, roles), _layer_ms(cur, roles)
    time = f"{b_ms:.2f} -> {c_ms:.2f} ms/step of GPU time"
    if base.batch and cur.batch and cur.batch >= GREW * base.batch:
        return _larger_batch(base, cur, roles, time)
    params, optimizer = _parameters(base, cur)
    outputs, loss = _predictions(base, cur)
    if median(counts.values()) >= GREW and min(counts.values()) >= 1 - SAME:
        grew = [r for r in roles if counts[r] >= GREW]
        more = f"same kernels run more often per step ({_counts(base, cur, grew)} launches/step; {time})"
        if params is not None and params >= GREW:
            return ModelChange("deeper", f"more layers: the {more}; {optimizer} (more parameters to update): "
                                         "a deeper model", "deeper model")
        if outputs is not None and outputs >= GREW:
            same = f", {optimizer} (the same parameters)" if params is not None else ""
            return ModelChange("sequence", f"a longer sequence: the {more}, and {loss} (x{outputs:.2f}: more "
                                           f"predictions per step){same}: longer sequences through a recurrent "
                                           "layer?", "longer sequence")
        if params is not None:
            return None       # the same parameters: layers run again (recomputation), or other kernels
        if outputs is not None and abs(outputs - 1) <= SAME:
            return ModelChange("deeper", f"the {more}, and {loss} (the same predictions): a deeper model, or "
                                         "layers called more often per step?", "deeper model")
        return ModelChange("deeper", f"the {more}; a deeper model, or layers called more often per step (a longer "
                                     "sequence through a recurrent layer)?", "deeper model")
    if not all(abs(c - 1) <= SAME for c in counts.values()):
        return None
    longer = f"the layers' {sum(cur.layers[r][0] for r in roles):.0f} kernel launches/step take x{c_ms / b_ms:.2f} as long ({time})"
    inputs = (_ratio(base.input_bytes, cur.input_bytes)
              if base.input_bytes and cur.input_bytes else None)
    # more predictions at the same launches and parameters: more samples or tokens through the same
    # layers, whether or not their GPU time shows it (a launch-bound step's kernels wait on the host)
    if inputs is None and outputs is not None and outputs >= GREW and params is not None and params < GREW:
        return ModelChange("inputs", f"larger inputs: {loss} (x{outputs:.2f}: more predictions per step); {longer}, "
                                     f"{optimizer} (the same parameters): a larger batch or longer sequences?",
                           "larger inputs")
    if _ratio(b_ms, c_ms) < GREW:
        return None
    if inputs is not None and inputs >= GREW and (params is None or params < GREW):
        batch = (f" (the same batch of {cur.batch}: larger samples)" if base.batch and base.batch == cur.batch else "")
        unchanged = f", {optimizer} (the same parameters)" if params is not None else ""
        what = ("larger images or longer sequences" if batch else "a larger batch, longer sequences or larger images")
        return ModelChange("inputs", f"larger inputs: {_bytes(base.input_bytes or 0)} -> {_bytes(cur.input_bytes or 0)} "
                                     f"copied to the GPU per step{batch}; {longer}{unchanged}: {what}?", "larger inputs")
    if params is not None and params >= GREW and (inputs is None or inputs < GREW) and (outputs is None or outputs < GREW):
        same = ("with the same inputs" if inputs is not None else
                f"with the same predictions ({loss})" if outputs is not None else "with no inputs copied to the GPU")
        return ModelChange("wider", f"wider layers: {longer}, and {optimizer} (more parameters to update), "
                                    f"{same}: a wider model (hidden sizes or channels)?", "wider model")
    return None


def _larger_batch(base: Work, cur: Work, roles: list[str], time: str) -> ModelChange:
    """The batch grew: the step per sample beside the step, and the layers' work."""
    assert base.batch and cur.batch
    text = f"a larger batch: {base.batch} -> {cur.batch} samples per step"
    if base.step_ms and cur.step_ms:
        per = (base.step_ms / base.batch, cur.step_ms / cur.batch)
        text += (f"; the step {base.step_ms:.1f} -> {cur.step_ms:.1f} ms, per sample {per[0]:.3f} -> {per[1]:.3f} ms "
                 f"(x{per[1] / per[0]:.2f})")
    b_n, c_n = (sum(w.layers[r][0] for r in roles) for w in (base, cur))
    launches = (f"{b_n:.0f} -> {c_n:.0f} kernel launches/step" if abs(_ratio(b_n, c_n) - 1) > SAME
                else f"the same {c_n:.0f} kernel launches/step")
    return ModelChange("batch", f"{text}; the layers: {launches}, {time}", "larger batch")


def spread_syncs(reasons: list[Reason], change: ModelChange, base_syncs: dict[str, float],
                 cur_syncs: dict[str, float], base_steps: int, cur_steps: int) -> list[Reason]:
    """After a larger batch: the synchronization reasons whose place made no more synchronizations in
    all of the measured steps (``cur_syncs[place] x cur_steps`` within SAME of the base's or below:
    work done once an epoch, now over fewer steps), told with the batch change and credited to it."""
    if change.kind != "batch" or base_steps <= 0 or cur_steps <= 0:
        return reasons
    spread = [r for r in reasons if r.mechanism == "syncs" and r.where is not None
              and cur_syncs.get(r.where, 0.0) * cur_steps <= (1 + SAME) * base_syncs.get(r.where, 0.0) * base_steps]
    if not spread:
        return reasons
    total = (sum(base_syncs.get(r.where or "", 0.0) for r in spread) * base_steps,
             sum(cur_syncs.get(r.where or "", 0.0) for r in spread) * cur_steps)
    places = ", ".join(r.where or "" for r in spread)
    lead = next((r for r in reasons if r.mechanism == f"model:{change.kind}"), None)
    words = (f"; synchronizations in {places}: {total[0]:.0f} -> {total[1]:.0f} in the launch's measured steps, "
             f"over {base_steps} -> {cur_steps} steps (work done once an epoch falls on fewer steps)")
    rest = [r for r in reasons if r not in spread and r is not lead]
    ms = sum(r.ms for r in spread) + (lead.ms if lead is not None else 0.0)
    told = Reason(f"model:{change.kind}", lead.where if lead is not None else spread[0].where, ms,
                  (lead.text if lead is not None else change.text) + words, change.cause)
    return sorted(rest + [told], key=lambda r: -r.ms)


def told_as_model_change(reasons: list[Reason], change: ModelChange, kernel_mechanisms: tuple[str, ...],
                         faster: bool = False) -> list[Reason]:
    """The reasons with every kernel difference (each place's, and the replacements they were told
    as: other kernels chosen for the new shapes are the model change's, not an algorithm's or a
    precision's) told as one: the model change, credited with their milliseconds together. In a
    ``faster`` run the model change did not make the step faster by itself: the kernels chosen for
    it did, and the largest of those differences is told after it."""
    kernel = [r for r in reasons if r.mechanism in kernel_mechanisms and r.mechanism != "dtype"]
    if not kernel:
        return reasons
    lead = next((r for r in kernel if r.where is not None and MODEL_PHASE.search(r.where)), kernel[0])
    text = (f"{change.text}; the step is faster with the kernels chosen for it: {max(kernel, key=lambda r: r.ms).text}"
            if faster else change.text)
    told = Reason(f"model:{change.kind}", lead.where, sum(r.ms for r in kernel), text, change.cause)
    return sorted([r for r in reasons if r not in kernel] + [told], key=lambda r: -r.ms)
