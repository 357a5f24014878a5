"""Tell C4 where this training process is: checkpoints, pauses, progress.

Each call sends one notice to the node plugin ($C4_AGENT_SOCKET), the same datagram `c4-notify`
sends, and returns True when it was delivered. Without a node plugin (no socket, nobody
listening, no rank identity) it returns False and logs one warning: training goes on. Bad
arguments raise ValueError.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Iterator, Optional

from . import _identity, _socket, _wire

__all__ = [
    "checkpoint_saved",
    "finished",
    "last_step",
    "pause",
    "phase",
    "progress",
    "resume",
    "resume_step",
]
__version__ = "0.1.0"

log = logging.getLogger("c4")

_lock = threading.Lock()
_last_step: Optional[int] = None
_warned = False


def _check_step(step: object) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= _wire.INT64_MAX:
        raise ValueError(f"step must be a non-negative integer, got '{step}'")
    return step


def _check_state(state: object, allowed: tuple, what: str) -> str:
    if state not in allowed:
        names = ", ".join(allowed[:-1]) + " or " + allowed[-1]
        raise ValueError(f"{what} must be {names}, got '{state}'")
    return str(state)


def _check_seconds(seconds: object) -> int:
    if (isinstance(seconds, bool) or not isinstance(seconds, int)
            or not 1 <= seconds <= _wire.MAX_PAUSE_SECONDS):
        raise ValueError(f"expect_seconds must be an integer in [1, 86400], got '{seconds}'")
    return seconds


def _step_or_last(step: Optional[int]) -> int:
    global _last_step
    with _lock:
        if step is not None:
            _last_step = _check_step(step)
            return step
        if _last_step is None:
            try:
                _last_step = resume_step() or 0
            except ValueError:
                _last_step = 0
        return _last_step


def _not_sent(why: str) -> bool:
    global _warned
    with _lock:
        first, _warned = not _warned, True
    if first:
        log.warning("c4: notice not sent: %s (training goes on; further misses at debug level)",
                    why)
    else:
        log.debug("c4: notice not sent: %s", why)
    return False


def _deliver(encode) -> bool:
    socket_path = os.environ.get("C4_AGENT_SOCKET", "")
    if not socket_path:
        return _not_sent("C4_AGENT_SOCKET is unset (no node plugin)")
    identity, why = _identity.from_environment()
    if identity is None:
        return _not_sent(why)
    data = encode(identity, time.time_ns())
    error = _socket.send(socket_path, data)
    if error is not None:
        return _not_sent(f"not delivered to {socket_path}: {error}")
    return True


def _progress(step: Optional[int], state: str, expected_seconds: int = 0) -> bool:
    s = _step_or_last(step)
    return _deliver(lambda ident, now: _wire.progress_notice(ident, now, s, state,
                                                             expected_seconds))


def progress(step: int) -> bool:
    """The rank is training at `step` (c4-notify progress --step N)."""
    return _progress(_check_step(step), "training")


def pause(seconds: Optional[int] = None, reason: str = "checkpointing",
          step: Optional[int] = None) -> bool:
    """A pause begins: C4D's hang rules rest until resume(), at most `seconds` when given.

    `reason` is checkpointing, evaluating or idle; `step` defaults to the last step told.
    """
    _check_state(reason, _wire.PAUSES, "reason")
    expected = 0 if seconds is None else _check_seconds(seconds)
    if step is not None:
        _check_step(step)
    return _progress(step, reason, expected)


def resume(step: Optional[int] = None) -> bool:
    """Back to training after a pause (state training; `step` defaults to the last step)."""
    if step is not None:
        _check_step(step)
    return _progress(step, "training")


def finished(step: Optional[int] = None) -> bool:
    """The rank has finished its training (state finished)."""
    if step is not None:
        _check_step(step)
    return _progress(step, "finished")


def checkpoint_saved(step: int, path: str) -> bool:
    """The checkpoint of `step` is complete at `path` (c4-notify checkpoint)."""
    _check_step(step)
    if not isinstance(path, str) or not path:
        raise ValueError("checkpoint needs path")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        size = -1
    if not 0 < size <= _wire.MAX_TEXT_BYTES:
        raise ValueError("path must be UTF-8 text of at most 4096 bytes")
    s = _step_or_last(step)
    return _deliver(lambda ident, now: _wire.checkpoint_notice(ident, now, s, path))


@contextlib.contextmanager
def phase(reason: str, expect_seconds: Optional[int] = None,
          step: Optional[int] = None) -> Iterator[None]:
    """A pause around a block: pause(reason) on entry, resume() on exit, even on an exception."""
    _check_state(reason, _wire.PAUSES, "reason")
    if expect_seconds is not None:
        _check_seconds(expect_seconds)
    pause(expect_seconds, reason, step)
    try:
        yield
    finally:
        resume()


def last_step() -> Optional[int]:
    """The step the last notice carried (None before the first)."""
    with _lock:
        return _last_step


def resume_step() -> Optional[int]:
    """$C4_RESUME_STEP, the checkpoint step to load, as an int; None when unset (fresh start)."""
    value = os.environ.get("C4_RESUME_STEP")
    if value is None or value.strip() == "":
        return None
    text = value.strip()
    if not text.isdigit() or not text.isascii():
        raise ValueError(f"C4_RESUME_STEP must be a non-negative integer, got '{value}'")
    return int(text)
