"""Hooks for PyTorch trainers: a plain training loop (C4StepHook) and, when Lightning is
installed, a Lightning callback (C4Callback). Neither imports torch."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Iterator, Optional

import c4

__all__ = ["C4StepHook", "C4Callback"]


class C4StepHook:
    """For a plain loop: tell C4 the step every `every_n_steps` steps, and wrap checkpoints.

        hook = C4StepHook(every_n_steps=100)
        for step in range(hook.start_step, total):
            train_step()
            hook.step(step)
            if step % 500 == 0:
                with hook.checkpointing(expect_seconds=90):
                    path = save(step)
                hook.saved(path)
        hook.finished()
    """

    def __init__(self, every_n_steps: int = 100) -> None:
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) \
                or every_n_steps < 1:
            raise ValueError(f"every_n_steps must be a positive integer, got '{every_n_steps}'")
        self.every_n_steps = every_n_steps
        self.current_step: Optional[int] = None

    @property
    def start_step(self) -> int:
        """The first step to run: one past $C4_RESUME_STEP, or 0 on a fresh start."""
        resumed = c4.resume_step()
        return 0 if resumed is None else resumed + 1

    def step(self, step: int) -> bool:
        """Call after each step; sends a progress notice every `every_n_steps` steps."""
        self.current_step = step
        if step % self.every_n_steps != 0:
            return False
        return c4.progress(step)

    def checkpointing(self, expect_seconds: Optional[int] = None) -> Any:
        """A `with` block around writing a checkpoint (a checkpointing pause)."""
        return c4.phase("checkpointing", expect_seconds, self.current_step)

    def evaluating(self, expect_seconds: Optional[int] = None) -> Any:
        """A `with` block around an evaluation (an evaluating pause)."""
        return c4.phase("evaluating", expect_seconds, self.current_step)

    def saved(self, path: str, step: Optional[int] = None) -> bool:
        """The checkpoint of `step` (default: the current step) is complete at `path`."""
        s = self.current_step if step is None else step
        if s is None:
            raise ValueError("saved() needs a step: call step() first or pass step=")
        return c4.checkpoint_saved(s, path)

    def finished(self) -> bool:
        """Training is over."""
        return c4.finished(self.current_step)


def _lightning_callback_base() -> Optional[type]:
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(name).Callback
        except (ImportError, AttributeError):
            continue
    return None


_Base = _lightning_callback_base()

if _Base is not None:

    class C4Callback(_Base):  # type: ignore[misc, valid-type]
        """Lightning callback: progress every `every_n_steps` global steps, evaluation as an
        evaluating pause, checkpoints (written by ModelCheckpoint) announced with their path
        at the next batch end, finished at the end of fit."""

        def __init__(self, every_n_steps: int = 100,
                     validation_seconds: Optional[int] = None,
                     checkpoint_seconds: Optional[int] = None) -> None:
            super().__init__()
            self.hook = C4StepHook(every_n_steps)
            self.validation_seconds = validation_seconds
            self.checkpoint_seconds = checkpoint_seconds
            self._announced: set = set()
            self._phase: Optional[contextlib.AbstractContextManager] = None

        def _enter(self, reason: str, seconds: Optional[int]) -> None:
            if self._phase is None:
                self._phase = c4.phase(reason, seconds, self.hook.current_step)
                self._phase.__enter__()

        def _leave(self) -> None:
            if self._phase is not None:
                phase, self._phase = self._phase, None
                phase.__exit__(None, None, None)

        def _announce_checkpoints(self, trainer: Any) -> None:
            for cb in getattr(trainer, "checkpoint_callbacks", None) or []:
                path = getattr(cb, "last_model_path", "") or getattr(cb, "best_model_path", "")
                if path and path not in self._announced:
                    self._announced.add(path)
                    c4.checkpoint_saved(int(trainer.global_step), str(path))

        def on_train_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            self._leave()  # a checkpoint written at the previous batch end is complete
            self._announce_checkpoints(trainer)
            self.hook.step(int(trainer.global_step))

        def on_validation_start(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            if not getattr(trainer, "sanity_checking", False):
                self._enter("evaluating", self.validation_seconds)

        def on_validation_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            self._leave()

        def on_save_checkpoint(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            self._enter("checkpointing", self.checkpoint_seconds)

        def on_fit_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            self._leave()
            self._announce_checkpoints(trainer)
            c4.finished(int(trainer.global_step))

        def on_exception(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            self._leave()
else:
    C4Callback = None  # type: ignore[assignment, misc]
