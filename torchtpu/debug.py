"""Debug-mode tools.

shadow(): in debug mode, also run every op on the CPU with the same inputs
and raise at the first op whose result differs beyond tolerance, naming the
op, the shapes and dtypes, and the largest absolute and relative errors.
This finds the op behind a numerical divergence in one run.

Where PyTorch's CPU kernel and its meta kernel (which CUDA and the device
follow) disagree on a result's dtype or shape, the device's is accepted and
the values are compared where both have them. An op the CPU has no kernel
for (the fused LSTM/GRU cells are CUDA's only) is counted in the metric
shadow_skipped_ops instead of checked; checked ops count in
shadow_checked_ops.

    with torchtpu.eager_mode("debug"), torchtpu.debug.shadow():
        loss = model(x).sum()
"""
import contextlib

from . import _C


def shadow_enabled() -> bool:
    return _C._debug_shadow()


def set_shadow(enabled: bool) -> None:
    """Turns the shadow check on or off (process-wide)."""
    _C._set_debug_shadow(bool(enabled))


@contextlib.contextmanager
def shadow(enabled: bool = True):
    """Shadow-checks the block (debug mode only); restores on exit."""
    previous = _C._debug_shadow()
    _C._set_debug_shadow(bool(enabled))
    try:
        yield
    finally:
        _C._set_debug_shadow(previous)
