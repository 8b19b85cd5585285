"""torch.profiler shows the device's work.

While a ``torch.profiler.profile()`` (or ``torch.autograd.profiler.profile``)
records, the core traces each PJRT execution, compile (or load from the
disk caches), host<->device transfer and defer_and_fuse flush as a range
on the thread where it happens: ``tpu::execute <op>`` (the launcher's
thread for queued executions), ``tpu::compile <op>``, ``tpu::to_device``,
``tpu::to_host``, ``tpu::flush <reason>`` (csrc/torch/profiler.cpp). They
appear in ``prof.key_averages()`` and in ``prof.export_chrome_trace(path)``
beside the ATen ops and ``record_function`` ranges. With
``record_shapes=True`` an execution carries ``queue_wait_ns`` and a
transfer ``bytes`` as event arguments.

How the trace follows the profiler: torch's profiler starts and stops
through two functions of ``torch.autograd.profiler``
(``_enable_profiler`` / ``_disable_profiler``, which ``torch.profiler``
uses too); :func:`install` wraps them, starting the device trace right
after the profiler started on this thread (so its state can be shared
with the launcher's thread) and, before it stops, waiting for the
launcher's queue (so no range is being written while the profiler
collects). PyTorch offers no start/stop hook for a CPU-only profile, and
its PrivateUse1 activity-profiler registry is consulted only when the
user asks for ``ProfilerActivity.PrivateUse1``.

:func:`device_spans` gives the last trace's spans as recorded by the core
(monotonic nanoseconds, queue waits, bytes, thread ids), whether or not a
profiler consumed them.
"""

import functools

import torch.autograd.profiler as _autograd_profiler

from . import _C

_installed = False


def install():
    """Wraps torch's profiler start/stop (idempotent)."""
    global _installed
    if _installed:
        return
    enable = _autograd_profiler._enable_profiler
    disable = _autograd_profiler._disable_profiler

    @functools.wraps(enable)
    def _enable_profiler(*args, **kwargs):
        out = enable(*args, **kwargs)
        _C._trace_start(True)
        return out

    @functools.wraps(disable)
    def _disable_profiler(*args, **kwargs):
        if _C._trace_enabled():
            _C._trace_stop()
        return disable(*args, **kwargs)

    _autograd_profiler._enable_profiler = _enable_profiler
    _autograd_profiler._disable_profiler = _disable_profiler
    _installed = True


def device_spans():
    """The spans of the last device trace, in the order they ended: dicts
    with ``kind`` (execute, compile, to_device, to_host, flush), ``name``
    (the op, or the flush reason, or the dtype of a transfer),
    ``start_ns``/``end_ns`` (CLOCK_MONOTONIC), ``wait_ns`` (an execution's
    time in the launcher's queue), ``bytes`` (transfers) and
    ``thread_id`` (the OS thread)."""
    return _C._trace_spans()


def dropped_spans():
    """Spans the last trace could not keep (it holds 262,144)."""
    return _C._trace_dropped()
