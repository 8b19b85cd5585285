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


def reset():
    _C._reset_metrics()


def report():
    """A human-readable report of every nonzero counter."""
    lines = ["torchtpu metrics:"]
    for name, value in sorted(_C._metrics().items()):
        if value:
            lines.append(f"  {name}: {value}")
    return "\n".join(lines)
