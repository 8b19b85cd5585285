"""torch.tpu.memory: the summary, snapshot and allocation history of
torch.cuda.memory, over torchtpu's own accounting.

The allocator does not pool: each allocation is one storage, so a snapshot
has one segment per live allocation (reserved == allocated), and the trace
has "alloc" and "free_completed" events. Snapshots are in the format
PyTorch's memory viewer reads (torch.cuda._memory_viz, or the page at
pytorch.org/memory_viz for a pickle from _dump_snapshot).
"""
import pickle
import sys

import torch

from . import _C

__all__ = ["memory_summary", "memory_snapshot"]


def _record_memory_history(enabled="all", context="all", stacks="python",
                           max_entries=sys.maxsize, device=None):
    """Starts (enabled="all" or "state") or stops (enabled=None) recording
    every tpu allocation and free with the Python stack that made it, as
    torch.cuda.memory._record_memory_history. `stacks` must be "python"
    (C++ frames are not gathered); `context` and `device` are accepted for
    the same calls to work on tpu."""
    if enabled not in (None, "all", "state"):
        raise ValueError(f"_record_memory_history: enabled must be None, 'all' or 'state', "
                         f"not {enabled!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"_record_memory_history: stacks must be 'python' or 'all', "
                         f"not {stacks!r}")
    if int(max_entries) <= 0:
        raise ValueError("_record_memory_history: max_entries must be positive")
    _C._record_memory_history(enabled is not None, min(int(max_entries), sys.maxsize))


def _snapshot(device=None):
    """{"segments": [...], "device_traces": [[...] per device],
    "allocator_settings": {...}}, the layout of torch.cuda.memory._snapshot."""
    from . import tpu
    segments, traces = _C._memory_snapshot(max(tpu.device_count(), 1))
    segments.sort(key=lambda s: (s["device"], s["address"]))
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"pooling": False}}


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """Pickles _snapshot() to `filename` (open it at pytorch.org/memory_viz)."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def memory_snapshot():
    """The segments of every tpu device (torch.cuda.memory_snapshot)."""
    return _snapshot()["segments"]


def _format_bytes(n):
    for unit in ("B ", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:6.0f} {unit}" if unit == "B " else f"{n:6.1f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device=None, abbreviated=False):
    """A printable table of the device's memory, as torch.cuda.memory_summary:
    current, peak, cumulative allocated and freed bytes and counts from
    memory_stats, the device's (free, total) from mem_get_info and the
    largest live allocations (unless abbreviated)."""
    from . import tpu
    index = tpu._device_index(device, optional=True)
    if index is None:
        index = tpu.current_device()
    s = tpu.memory_stats(index)
    free, total = tpu.mem_get_info(index)
    width = 75
    rule = "|" + "=" * (width - 2) + "|"
    lines = [rule, f"|{'torchtpu memory summary, device tpu:' + str(index):^{width - 2}}|", rule,
             f"| {'Metric':<25}| {'Cur Usage':>10} | {'Peak Usage':>10} | {'Tot Alloc':>10} |"
             f" {'Tot Freed':>9} |",
             "|" + "-" * (width - 2) + "|"]

    def row(name, key, fmt):
        vals = [s.get(f"{key}.all.{k}") for k in ("current", "peak", "allocated", "freed")]
        cells = ["-" if v is None else fmt(v) for v in vals]
        lines.append(f"| {name:<25}| {cells[0]:>10} | {cells[1]:>10} | {cells[2]:>10} |"
                     f" {cells[3]:>9} |")

    row("Allocated memory", "allocated_bytes", _format_bytes)
    row("Active memory", "active_bytes", _format_bytes)
    row("Reserved memory", "reserved_bytes", _format_bytes)
    row("Allocations", "allocation", str)
    lines.append("|" + "-" * (width - 2) + "|")
    lines.append(f"| {'Device free / total':<25}| {_format_bytes(free) + ' / ' + _format_bytes(total):>44} |")
    lines.append(f"| {'Out-of-memory errors':<25}| {s['num_ooms']:>44} |")
    if not abbreviated:
        segs = [g for g in memory_snapshot() if g["device"] == index]
        segs.sort(key=lambda g: -g["total_size"])
        lines.append("|" + "-" * (width - 2) + "|")
        lines.append(f"| {'Largest live allocations':<{width - 3}}|")
        for g in segs[:5]:
            where = ""
            if g["frames"]:
                f = g["frames"][0]
                where = f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']} {f['name']}"
            lines.append(f"|   {_format_bytes(g['total_size'])}  {where[:width - 19]:<{width - 18}}|")
        if not segs:
            lines.append(f"|   {'(none)':<{width - 5}}|")
    lines.append(rule)
    return "\n".join(lines) + "\n"
