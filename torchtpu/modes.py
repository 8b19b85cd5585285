"""Eager modes: how each op on a tpu tensor runs.

- "strict" (default): each op is compiled once per signature and runs
  asynchronously; errors from a running program surface at the next sync.
- "debug": each op runs synchronously, so an error names the op and the
  line that caused it; indexing ops check their indices on the host and
  raise IndexError / RuntimeError as on the CPU; with the shadow check on
  (torchtpu.debug.shadow(), TORCHTPU_DEBUG_SHADOW=1) every op is also run on
  the CPU and the first result that differs raises.

The mode is process-wide (TORCHTPU_EAGER_MODE, set_eager_mode) with a
per-thread override (the eager_mode context manager). Autograd runs backward
ops on its own device thread, which follows the process-wide mode.
"""
import contextlib

from . import _C

MODES = ("strict", "debug")


def set_eager_mode(mode: str) -> None:
    """Sets the process-wide eager mode ("strict" or "debug")."""
    _check(mode)
    _C._set_eager_mode(mode, False)


def get_eager_mode() -> str:
    """The calling thread's eager mode."""
    return _C._get_eager_mode()


@contextlib.contextmanager
def eager_mode(mode: str):
    """Runs the block's ops on this thread in `mode`; restores on exit."""
    _check(mode)
    previous = _C._get_eager_mode()
    _C._set_eager_mode(mode, True)
    try:
        yield
    finally:
        _C._set_eager_mode(previous, True)


def _check(mode):
    if not isinstance(mode, str):
        raise TypeError(f"torchtpu: an eager mode is a str, got {type(mode).__name__}")
    if mode == "defer_and_fuse":
        raise NotImplementedError(
            "torchtpu: the defer_and_fuse eager mode is not implemented yet; "
            "available modes: " + ", ".join(MODES))
    if mode not in MODES:
        raise ValueError(f"torchtpu: unknown eager mode {mode!r}; expected one of "
                         + ", ".join(MODES))
