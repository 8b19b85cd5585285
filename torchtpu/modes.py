"""Eager modes: how each op on a tpu tensor runs.

- "strict" (default): each op is compiled once per signature and runs
  asynchronously; errors from a running program surface at the next sync.
- "debug": each op runs synchronously, so an error names the op and the
  line that caused it; indexing ops check their indices on the host and
  raise IndexError / RuntimeError as on the CPU; with the shadow check on
  (torchtpu.debug.shadow(), TORCHTPU_DEBUG_SHADOW=1) every op is also run on
  the CPU and the first result that differs raises.
- "defer_and_fuse": ops are recorded, not run; a run of them is flushed as
  one fused program when the host needs a value (item, cpu, print, ...), an
  op cannot be deferred (CPU fallback, data-dependent shapes), the run ends
  with the same ops twice in a row (a loop boundary), or it reaches
  TORCHTPU_DEFER_MAX_OPS. Fused programs are cached by structure, so a
  training step compiles once. An error inside a run is raised at the flush,
  naming the op. torchtpu.flush() runs the pending ops now.

The mode is process-wide (TORCHTPU_EAGER_MODE, set_eager_mode) with a
per-thread override (the eager_mode context manager). Autograd runs backward
ops on its own device thread, which follows the process-wide mode.
"""
import contextlib

from . import _C

MODES = ("strict", "debug", "defer_and_fuse")


def set_eager_mode(mode: str) -> None:
    """Sets the process-wide eager mode ("strict", "debug" or "defer_and_fuse")."""
    _check(mode)
    _C._set_eager_mode(mode, False)


def get_eager_mode() -> str:
    """The calling thread's eager mode."""
    return _C._get_eager_mode()


@contextlib.contextmanager
def eager_mode(mode: str):
    """Runs the block's ops on this thread in `mode`; restores on exit."""
    _check(mode)
    previous = _C._thread_eager_mode_override()  # "" = follows the process
    _C._set_eager_mode(mode, True)
    try:
        yield
    finally:
        if previous:
            _C._set_eager_mode(previous, True)
        else:
            _C._clear_thread_eager_mode()


def _check(mode):
    if not isinstance(mode, str):
        raise TypeError(f"torchtpu: an eager mode is a str, got {type(mode).__name__}")
    if mode not in MODES:
        raise ValueError(f"torchtpu: unknown eager mode {mode!r}; expected one of "
                         + ", ".join(MODES))


def flush(device=None) -> None:
    """Runs the ops defer_and_fuse has recorded on `device` (default: all
    devices) now, as one program per device. A no-op in other modes."""
    from . import tpu
    if device is None:
        for d in range(tpu.device_count()):
            _C._defer_flush(d)
    else:
        _C._defer_flush(tpu._device_index(device))


def pending_ops(device=None) -> int:
    """How many recorded ops wait for a flush on `device` (default: current)."""
    from . import tpu
    return _C._defer_pending_ops(tpu._device_index(device) if device is not None else tpu.current_device())
