"""The hooks :func:`perfgate.capture.autostep.install.install` puts into torch, one patcher per torch module
(``TARGETS``), and the per-thread state they share. perfgate/capture/autostep/install.py says what each emits.

Standard library only at import time (it is imported at interpreter start in every profiled
process); torch's modules arrive as arguments of the patchers.
"""
from __future__ import annotations

import functools
import itertools
import sys
import weakref
from collections.abc import Mapping
from _thread import _local

from perfgate.records.autostep_ranges import (
    BACKWARD, DATA_LOAD, MARK_BATCH, MARK_LOADER, MARK_OPTIMIZER_NEW, MARK_OPTIMIZER_SKIPPED,
    MARK_OPTIMIZER_STEP, MARK_RANK, OPTIMIZER, WRAPPED, note,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

    from perfgate.capture.autostep.installation import Installation

__all__ = ["TARGETS", "bind_evaluation_end", "end_evaluation", "in_range", "is_compiling", "leading_dimension",
           "reset_state", "state", "unbind_is_compiling"]


class _State(_local):
    """Per-thread state; class attributes are each thread's initial values."""

    data_load = False           # inside a data_load range on this thread
    backward = False            # inside a backward range on this thread
    checkpoint = False          # inside a checkpoint range on this thread
    in_train_call = False       # inside a Module.train call (its recursion into the children)
    optimizer_depth = 0         # optimizer step pre hooks minus post hooks seen on this thread
    optimizer_range: Any = None  # the open optimizer range's id (None while a closure runs)
    optimizer_steps = 0         # optimizer steps ended on this thread (GradScaler.step compares)
    eval_range: Any = None      # the open evaluation range's id
    eval_module = 0             # id() of the module whose train(False) opened it
    forward_range: Any = None   # the open forward range's id (perfgate/capture/autostep/forward.py)
    forward_module = 0          # id() of the module whose call opened it


_state = _State()


def state() -> _State:
    """This process's per-thread state (read at each call: ``reset_state`` replaces it)."""
    return _state


def reset_state() -> None:
    """Fresh per-thread state (after fork: the child's threads start outside every range)."""
    global _state
    _state = _State()


def _never_compiling() -> bool:
    return False


def _bind_is_compiling(compiler: ModuleType | None) -> None:
    global _is_compiling
    _is_compiling = getattr(compiler, "is_compiling", None) or _never_compiling


def _first_is_compiling() -> bool:
    """``torch.compiler.is_compiling``, bound on first use where the import hook on
    torch.compiler did not bind it (torch imports torch.compiler after the hooked modules, and
    importing it from their hooks could import it too early)."""
    _bind_is_compiling(sys.modules.get("torch.compiler"))
    return _is_compiling()


_is_compiling: Callable[[], bool] = _first_is_compiling


def is_compiling() -> bool:
    return _is_compiling()


def unbind_is_compiling() -> None:
    global _is_compiling
    _is_compiling = _first_is_compiling


# --------------------------------------------------------------------------- ranges


def in_range(original: Callable[..., Any], flag: str, start: Callable[[], int], end: Callable[[int], None],
              busy: Callable[[], bool] | None = None, training: bool = False) -> Callable[..., Any]:
    """``original`` wrapped in one range: not again while this thread is already inside it
    (``_state.<flag>``), nor while torch.compile traces, nor while ``busy()`` says so. ``training``:
    the call is training work, which ends an evaluation left open (``end_evaluation``)."""
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        state = _state
        if getattr(state, flag) or _is_compiling() or (busy is not None and busy()):
            return original(*args, **kwargs)
        if training and state.eval_range is not None:
            end_evaluation()
        setattr(state, flag, True)
        range_id = start()
        try:
            return original(*args, **kwargs)
        finally:
            end(range_id)
            setattr(state, flag, False)

    return wrapper


# --------------------------------------------------------------------------- DataLoader


def leading_dimension(batch: Any, depth: int = 0) -> int | None:
    """The batch size of what a DataLoader yields: a tensor's (or array's) first dimension; the one
    first dimension shared by the tensors of a tuple, list or mapping (HF's BatchEncoding is one);
    the length of a list of per-sample mappings. None where it cannot tell (no tensor, a 0-d
    tensor, tensors that disagree)."""
    shape = getattr(batch, "shape", None)
    if shape is not None and not isinstance(batch, type):
        try:
            return int(shape[0]) if len(shape) >= 1 else None
        except (TypeError, ValueError, IndexError):
            return None
    if depth >= 3:
        return None
    if isinstance(batch, Mapping):
        items = list(batch.values())
    elif isinstance(batch, (list, tuple)):
        if batch and all(isinstance(x, Mapping) for x in batch):
            return len(batch)                      # a list of samples (a collate_fn that keeps them)
        items = list(batch)
    else:
        return None
    found = {n for n in (leading_dimension(x, depth + 1) for x in items) if n is not None}
    return found.pop() if len(found) == 1 else None


def _patch_dataloader(inst: Installation, module: ModuleType) -> None:
    cls = module._BaseDataLoaderIter
    original_next = cls.__dict__["__next__"]
    if getattr(original_next, WRAPPED, False):
        return
    pair = inst.range(DATA_LOAD)
    if pair is None:
        return
    start, end = pair
    mark = inst.mark

    @functools.wraps(original_next)
    def __next__(self: Any) -> Any:
        state = _state
        if state.data_load or _is_compiling():
            return original_next(self)
        state.data_load = True
        range_id = start()
        try:
            batch = original_next(self)
            size = leading_dimension(batch)
            if size is not None and size != self.__dict__.get("_perfgate_batch"):
                self._perfgate_batch = size
                mark(f"{MARK_BATCH}:{size}")
            return batch
        finally:
            end(range_id)
            state.data_load = False

    original_init = cls.__dict__["__init__"]

    @functools.wraps(original_init)
    def __init__(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, loader, *args, **kwargs)
        workers = getattr(loader, "num_workers", None)
        if isinstance(workers, int):
            mark(f"{MARK_LOADER}:{workers}")

    inst.own(__next__, __init__)
    cls.__next__ = __next__
    cls.__init__ = __init__
    inst.undo.append(lambda: setattr(cls, "__next__", original_next))
    inst.undo.append(lambda: setattr(cls, "__init__", original_init))


# --------------------------------------------------------------------------- backward


def _patch_autograd(inst: Installation, module: ModuleType) -> None:
    original = module.backward
    if getattr(original, WRAPPED, False):
        return
    pair = inst.range(BACKWARD)
    if pair is None:
        return
    # -1 outside a backward pass; >= 0 on any thread running one (a reentrant backward from a
    # checkpointed function may run on an autograd device thread, where our flag is not set)
    graph_task_id = getattr(sys.modules.get("torch._C"), "_current_graph_task_id", None) or (lambda: -1)
    start, end = pair
    started = False

    def start_first() -> int:
        """The first backward pass's start: the model has run its first forward; then ``start``.
        ``inst.each_backward``, while set, is told of every backward pass (it never raises)."""
        nonlocal started
        if not started:
            started = True
            first = inst.first_backward
            if first is not None:
                try:
                    first()
                except Exception as exc:  # noqa: BLE001 - never raise into the user's program
                    note(f"could not hook the model's forward: {type(exc).__name__}: {exc}")
        if inst.each_backward is not None:
            inst.each_backward()
        return start()

    backward = in_range(original, "backward", start_first, end, busy=lambda: graph_task_id() != -1, training=True)
    inst.own(backward)
    setattr(module, "backward", backward)
    inst.undo.append(lambda: setattr(module, "backward", original))


def _never(range_id: int) -> None:
    return None


_end_eval: Callable[[int], None] = _never     # the evaluation range's end (autostep_interludes binds it)


def bind_evaluation_end(end: Callable[[int], None]) -> None:
    global _end_eval
    _end_eval = end


def end_evaluation() -> None:
    """End this thread's open evaluation range: training work (a backward pass, an optimizer step)
    resumed without ``train()`` (Lightning restores each module's ``training`` flag by assignment)."""
    state = _state
    if state.eval_range is not None:
        range_id, state.eval_range = state.eval_range, None
        _end_eval(range_id)


# --------------------------------------------------------------------------- optimizer


class _Numbers:
    """Each optimizer's number in this process (1, 2, ... by first step), announced once."""

    def __init__(self, mark: Callable[[str], None]) -> None:
        self._of: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._next = itertools.count(1)
        self._mark = mark

    def __call__(self, optimizer: Any) -> int:
        try:
            return self._of[optimizer]
        except (KeyError, TypeError):
            pass
        number = next(self._next)
        try:
            self._of[optimizer] = number
        except TypeError:          # not weak-referenceable: numbered anew at each step
            pass
        self._mark(f"{MARK_OPTIMIZER_NEW}:{number}:{type(optimizer).__name__}")
        return number


def _patch_optimizer(inst: Installation, module: ModuleType) -> None:
    if any(getattr(h, WRAPPED, False) for h in module._global_optimizer_pre_hooks.values()):
        return
    pair = inst.range(OPTIMIZER)
    if pair is None:
        return
    start, end = pair
    mark = inst.mark
    number = _Numbers(mark)
    inst.optimizer_number = number   # GradScaler's hook numbers the optimizers the same way

    def outside_range(closure: Callable[..., Any]) -> Callable[..., Any]:
        """``closure`` run with the optimizer range closed: its forward and backward are phases."""
        @functools.wraps(closure)
        def run_closure(*args: Any, **kwargs: Any) -> Any:
            state = _state
            if state.optimizer_range is not None:
                end(state.optimizer_range)
                state.optimizer_range = None
            try:
                return closure(*args, **kwargs)
            finally:
                if state.optimizer_depth > 0 and state.optimizer_range is None:
                    state.optimizer_range = start()

        return run_closure

    def pre_hook(optimizer: Any, args: Any, kwargs: Any) -> Any:
        if _is_compiling():
            return None
        state = _state
        depth = state.optimizer_depth
        state.optimizer_depth = depth + 1
        if depth:
            return None
        if state.eval_range is not None:
            end_evaluation()
        number(optimizer)
        state.optimizer_range = start()
        # args[0] is the optimizer itself: step(closure) or step(closure=...)
        if kwargs and callable(kwargs.get("closure")):
            return args, {**kwargs, "closure": outside_range(kwargs["closure"])}
        if len(args) > 1 and callable(args[1]):
            return (args[0], outside_range(args[1]), *args[2:]), kwargs
        return None

    def post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if _is_compiling():
            return
        state = _state
        depth = state.optimizer_depth
        if depth <= 0:  # no pre hook of ours on this thread (e.g. installed during a step)
            return
        state.optimizer_depth = depth - 1
        if depth != 1:
            return
        if state.optimizer_range is not None:
            end(state.optimizer_range)
            state.optimizer_range = None
        state.optimizer_steps += 1
        mark(f"{MARK_OPTIMIZER_STEP}:{number(optimizer)}")

    inst.own(pre_hook, post_hook, outside_range)
    pre = module.register_optimizer_step_pre_hook(pre_hook)
    post = module.register_optimizer_step_post_hook(post_hook)
    inst.undo.append(pre.remove)
    inst.undo.append(post.remove)


def _patch_grad_scaler(inst: Installation, module: ModuleType) -> None:
    """``GradScaler.step`` that skips ``optimizer.step()`` (inf/NaN gradients) marks the skip, so
    that the iteration still ends there (torch.cuda.amp.GradScaler inherits it)."""
    cls = module.GradScaler
    original = cls.__dict__["step"]
    if getattr(original, WRAPPED, False) or inst.nvtx() is None:
        return
    mark = inst.mark

    @functools.wraps(original)
    def step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        state = _state
        if _is_compiling() or state.optimizer_depth:
            return original(self, optimizer, *args, **kwargs)
        before = state.optimizer_steps
        result = original(self, optimizer, *args, **kwargs)
        number = inst.optimizer_number
        if state.optimizer_steps == before and number is not None:
            mark(f"{MARK_OPTIMIZER_SKIPPED}:{number(optimizer)}")
        return result

    inst.own(step)
    cls.step = step
    inst.undo.append(lambda: setattr(cls, "step", original))


def _patch_compiler(inst: Installation, module: ModuleType) -> None:
    _bind_is_compiling(module)


def _patch_dynamo(inst: Installation, module: ModuleType) -> None:
    inst.skip_frames()


def _mark_rank(inst: Installation, module: ModuleType) -> None:
    """A process torchrun started says which rank it is (``perfgate/rank:RANK:LOCAL_RANK:GROUP_RANK``,
    once, when torch is imported): how the reports of a job's nodes are told apart
    (perfgate/trace/nodes.py). Nothing in a process without them (torchrun's agent, a plain run)."""
    import os

    ranks = [os.environ.get(n, "") for n in ("RANK", "LOCAL_RANK", "GROUP_RANK")]
    if all(r.isdigit() for r in ranks):
        inst.mark(f"{MARK_RANK}:{':'.join(ranks)}")


TARGETS: dict[str, Callable[[Installation, ModuleType], None]] = {
    "torch.utils.data.dataloader": _patch_dataloader,
    "torch.autograd": _patch_autograd,
    "torch.optim.optimizer": _patch_optimizer,
    "torch.amp.grad_scaler": _patch_grad_scaler,
    "torch.compiler": _patch_compiler,            # imported by torch after the ones above
    "torch._dynamo.eval_frame": _patch_dynamo,    # loaded by the first torch.compile, if any
    "torch.distributed": _mark_rank,              # imported by torch
}
