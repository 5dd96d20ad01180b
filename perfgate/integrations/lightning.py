"""perfgate's NVTX ranges for PyTorch Lightning (``lightning.pytorch``, else ``pytorch_lightning``).

    from perfgate.integrations.lightning import PerfgateCallback
    trainer = Trainer(..., callbacks=[PerfgateCallback()])

The order in which Lightning's automatic optimization runs one training batch and calls its
callbacks (checked on lightning 2.6.6), and the ranges this callback opens and closes there, on
the training thread:

    next(data_fetcher), batch_to_device                              (outside: between_steps)
    on_train_batch_start      push step (unless one is open), push forward
      training_step()
      on_before_zero_grad, optimizer.zero_grad()   (first micro-batch of a step only)
    on_before_backward        pop forward, push backward
      backward()
    on_after_backward         pop backward
    on_before_optimizer_step  push optimizer           (last micro-batch of a step only)
      gradient clipping, optimizer.step()
    on_train_batch_end        pop optimizer; pop step after an optimizer step, else push data_load
                              (gradient accumulation: the next micro-batch is loaded inside step)

One ``step`` range per optimizer step: with ``accumulate_grad_batches=N`` a step range spans N
training batches, its ``data_load`` ranges the loading of the micro-batches after the first.
With manual optimization (``automatic_optimization = False``) each training batch is one step,
and ``backward``/``optimizer`` ranges follow ``manual_backward`` and ``optimizer.step()`` calls.

``on_exception``, ``on_train_epoch_end`` and ``on_train_end`` close whatever is still open, so an
exception never leaves a range open on the thread.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typed against lightning's module that mypy reads (pyproject.toml); pytorch_lightning
    # is the same class under its old name
    from lightning.pytorch.callbacks.callback import Callback
else:
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "perfgate.integrations.lightning needs lightning (or pytorch_lightning): "
                "pip install 'perfgate[lightning]'"
            ) from exc

from perfgate.integrations import STEP_RANGE
from perfgate.integrations._ranges import OpenRanges

__all__ = ["PerfgateCallback"]

FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
DATA_LOAD = "data_load"


class PerfgateCallback(Callback):
    """One NVTX ``step`` range per optimizer step, holding ``forward``, ``backward`` and
    ``optimizer`` (and ``data_load`` between accumulated micro-batches).

    ``phases=False`` emits the ``step`` ranges only. Lightning calls the hooks of every object
    in ``callbacks`` by name, so this class (a ``lightning.pytorch.Callback``) works with a
    ``pytorch_lightning.Trainer`` too.
    """

    def __init__(self, phases: bool = True) -> None:
        self.phases = phases
        self._open = OpenRanges()
        self._stepped = False          # an optimizer step happened in the open step range

    @property
    def open_ranges(self) -> tuple[str, ...]:
        """The ranges this callback has open now, outermost first."""
        return self._open.names

    def close(self) -> None:
        """Close every range this callback opened."""
        self._open.close_all()
        self._stepped = False

    def _phase(self, name: str) -> None:
        """End the open phase, if any, and start ``name`` inside the step range."""
        if not self.phases:
            return
        if not len(self._open):
            self._open.push(STEP_RANGE)
        self._open.pop_to(1)
        self._open.push(name)

    def _end_phase(self) -> None:
        self._open.pop_to(min(len(self._open), 1))

    # -- fit ----------------------------------------------------------------------------------

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.close()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if not len(self._open):
            self._open.push(STEP_RANGE)
            self._stepped = False
        self._phase(FORWARD)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self._phase(BACKWARD)

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self._end_phase()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._stepped = True
        self._phase(OPTIMIZER)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._end_phase()
        if self._stepped or not getattr(pl_module, "automatic_optimization", True):
            self.close()
        elif self.phases and len(self._open):
            self._open.push(DATA_LOAD)     # accumulating: the next micro-batch belongs to this step

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._open.pop_if(DATA_LOAD)       # validation inside an accumulation window: step's own time

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.close()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.close()
