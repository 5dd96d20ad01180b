"""perfgate's NVTX ranges for the Hugging Face ``transformers.Trainer``.

    from perfgate.integrations.hf import PerfgateCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[PerfgateCallback()])

The order in which ``Trainer`` runs one optimizer step and calls its callbacks (checked on
transformers 5.17; 4.46+ prefetch the step's micro-batches the same way), and the ranges this
callback opens and closes there, on the training thread:

    get_batch_samples()       the step's micro-batches are fetched   (outside: between_steps)
    on_step_begin             push step, push forward_backward
      training_step()         forward + backward, per micro-batch (on_substep_end between them)
      gradient clipping
    on_pre_optimizer_step     pop forward_backward, push optimizer
      optimizer.step()
    on_optimizer_step         pop optimizer
      lr_scheduler.step(), model.zero_grad()                          (inside step, no phase)
    on_step_end               pop step
      logging, saving, evaluation                                     (outside: between_steps)

One ``step`` range per optimizer step: with gradient accumulation, ``on_step_begin`` fires once
per accumulation window and ``forward_backward`` spans all its micro-batches. Versions of
transformers without ``on_pre_optimizer_step`` get the ``step`` ranges only.

``Trainer`` has no hook on an exception; the ranges an exception leaves open are closed at the
next ``on_train_begin`` (``auto_find_batch_size`` retrying after an out-of-memory error) or
``on_step_begin``, and :meth:`PerfgateCallback.close` closes them from the user's code.
"""
from __future__ import annotations

from typing import Any

try:
    # from the module that defines them: the one of transformers that mypy reads (pyproject.toml)
    from transformers.trainer_callback import CallbackHandler, TrainerCallback
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("perfgate.integrations.hf needs transformers: pip install 'perfgate[hf]'") from exc

from perfgate.integrations import STEP_RANGE
from perfgate.integrations._ranges import OpenRanges

__all__ = ["PerfgateCallback"]

FORWARD_BACKWARD = "forward_backward"
OPTIMIZER = "optimizer"


class PerfgateCallback(TrainerCallback):
    """One NVTX ``step`` range per optimizer step, holding ``forward_backward`` and ``optimizer``.

    ``phases=False`` emits the ``step`` ranges only.
    """

    def __init__(self, phases: bool = True) -> None:
        self.phases = phases and hasattr(CallbackHandler, "on_pre_optimizer_step")
        self._open = OpenRanges()

    @property
    def open_ranges(self) -> tuple[str, ...]:
        """The ranges this callback has open now, outermost first."""
        return self._open.names

    def close(self) -> None:
        """Close every range this callback opened (e.g. in the user's ``finally``)."""
        self._open.close_all()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._open.close_all()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._open.close_all()
        self._open.push(STEP_RANGE)
        if self.phases:
            self._open.push(FORWARD_BACKWARD)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._open.pop_if(FORWARD_BACKWARD):
            self._open.push(OPTIMIZER)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._open.pop_if(OPTIMIZER)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._open.close_all()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._open.close_all()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._open.close_all()
