"""Runtime counters: bytes moved, host syncs, CPU fallbacks per op ..."""
from . import _C


def metrics():
    """All counters as a dict (name -> int)."""
    return dict(_C._metrics())


def fallback_counts():
    """{aten op name: number of times it ran on the CPU fallback}."""
    prefix = "fallback::"
    return {k[len(prefix):]: v for k, v in _C._metrics().items()
            if k.startswith(prefix) and v}


def fallback_reasons():
    """{"aten::op.overload": why it ran on the CPU} for ops the lowering
    table has a row for but could not run on the device."""
    prefix = "fallback_reason::"
    out = {}
    for k in _C._metrics():
        if k.startswith(prefix):
            op, _, why = k[len(prefix):].partition(": ")
            out[op] = why
    return out


def reset():
    _C._reset_metrics()


def report():
    """A human-readable report of every nonzero counter."""
    lines = ["torchtpu metrics:"]
    for name, value in sorted(_C._metrics().items()):
        if value:
            lines.append(f"  {name}: {value}")
    return "\n".join(lines)
