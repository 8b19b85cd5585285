"""torch.tpu memory statistics from our own byte accounting."""
import gc

import torch


def test_allocation_is_counted_and_freed():
    # Earlier tests' garbage first: a collection can leave more (freed
    # objects' finalizers), and pending index checks hold their small flags
    # until a host read or a synchronize.
    for _ in range(3):
        gc.collect()
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    x = torch.empty(1000, dtype=torch.float32, device="tpu")
    held = torch.tpu.memory_allocated()
    assert held - before == 4000
    del x
    gc.collect()
    after = torch.tpu.memory_allocated()
    # its 4000 bytes are released (anything an earlier test still held may
    # go too, never come)
    assert held - after >= 4000 and after <= before


def test_peak_and_reset():
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    a = torch.ones(256, 256, device="tpu")  # 256 KiB
    del a
    peak = torch.tpu.max_memory_allocated()
    assert peak - base >= 256 * 256 * 4
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()


def test_deferred_intermediates_are_not_counted_after_they_die():
    """A run of deferred ops counts only what is alive, as strict does: a
    dead intermediate is never materialised, so it holds no device memory
    (it used to be counted until the run flushed)."""
    import torchtpu
    x = torch.randn(256, 1024).to("tpu")  # 1 MiB
    peaks = {}
    for mode in ("strict", "defer_and_fuse"):
        with torchtpu.eager_mode(mode):
            torch.tpu.synchronize()
            gc.collect()
            torch.tpu.reset_peak_memory_stats()
            base = torch.tpu.memory_allocated()
            for i in range(20):
                y = (x * i).exp()
            torch.tpu.synchronize()
            peaks[mode] = torch.tpu.max_memory_allocated() - base
            torch.testing.assert_close(y.cpu(), (x.cpu() * 19).exp())
            del y
    assert peaks["strict"] <= 4 * 2**20
    assert peaks["defer_and_fuse"] <= peaks["strict"] * 1.2


def test_memory_stats_keys_match_cuda_names():
    stats = torch.tpu.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                "active_bytes.all.peak", "reserved_bytes.all.peak",
                "num_alloc_retries", "num_ooms"):
        assert key in stats
    x = torch.zeros(10, device="tpu")
    assert torch.tpu.memory_stats()["allocated_bytes.all.current"] >= 40
    del x


def test_accelerator_memory_api():
    base = torch.accelerator.memory_allocated()
    x = torch.empty(100, dtype=torch.int64, device="tpu")
    assert torch.accelerator.memory_allocated() - base == 800
    del x


# --- out of memory: torch.OutOfMemoryError, as CUDA raises it ----------------

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("make", [
    lambda: torch.empty(2**40, device="tpu"),
    lambda: torch.zeros(2**38, 4, device="tpu"),
    lambda: torch.ones(2**41, dtype=torch.uint8, device="tpu"),
    lambda: torch.ones(3, device="tpu").expand(2**40, 3).contiguous(),
])
def test_allocation_beyond_the_device_raises_out_of_memory(make):
    """A request larger than the device raises up front, counts nothing but
    the refusal, and the process continues."""
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    ooms = torch.tpu.memory_stats()["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError, match="TPU out of memory. Tried to allocate"):
        make()
    torch.tpu.synchronize()  # defer_and_fuse: the run let go of its inputs
    assert torch.tpu.memory_allocated() == before
    assert torch.tpu.memory_stats()["num_ooms"] == ooms + 1
    assert (torch.ones(3, device="tpu") * 2).cpu().tolist() == [2.0, 2.0, 2.0]


def test_mem_get_info_matches_accelerator_and_the_host():
    free, total = torch.tpu.mem_get_info()
    assert (free, total) == torch.accelerator.get_memory_info(0) or \
        abs(free - torch.accelerator.get_memory_info(0)[0]) < 2**28  # the host moves
    # The CPU plugin's memory is the host's.
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    assert 0 < free <= total <= info["MemTotal"]


_LIMITED = r"""
import torch, torchtpu
MiB = 2**20
assert torch.tpu.mem_get_info() == (64 * MiB, 64 * MiB), torch.tpu.mem_get_info()
x = torch.empty(16 * MiB, dtype=torch.uint8, device="tpu")
assert torch.tpu.mem_get_info() == (48 * MiB, 64 * MiB), torch.tpu.mem_get_info()
try:
    torch.empty(64 * MiB, dtype=torch.uint8, device="tpu")
    raise SystemExit("no error")
except torch.OutOfMemoryError as e:
    assert "Tried to allocate 64.00 MiB" in str(e) and "48.00 MiB is free" in str(e), e
del x
y = torch.full((16 * MiB,), 7, dtype=torch.int32, device="tpu")   # exactly 64 MiB
assert y[-1].item() == 7 and torch.tpu.mem_get_info()[0] == 0
try:
    y + 1                                                         # its output does not fit
    raise SystemExit("no error")
except torch.OutOfMemoryError:
    pass
del y
print((torch.arange(4, device="tpu") * 2).tolist())
"""


def test_memory_limit_sets_the_capacity():
    """TORCHTPU_MEMORY_LIMIT: mem_get_info's total, and op outputs that do
    not fit raise OutOfMemoryError while the process goes on."""
    env = dict(os.environ, TORCHTPU_MEMORY_LIMIT=str(64 * 2**20))
    r = subprocess.run([sys.executable, "-c", _LIMITED], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[0, 2, 4, 6]"


def test_execution_out_of_memory_names_the_op_and_keeps_earlier_writes():
    """An op whose program cannot get its working memory (topk of a 2**23 x
    2**23 broadcast needs 768 TiB) raises OutOfMemoryError naming that op,
    not the later op that read its result; earlier writes stand."""
    n = 2**23
    x = torch.randn(n, device="tpu")
    v = torch.ones(3, device="tpu")
    v.add_(1)
    with pytest.raises(torch.OutOfMemoryError, match="aten::topk"):
        torch.topk(x.expand(n, n), 3, dim=1).values.sum().item()
    try:
        torch.tpu.synchronize()  # the failure may also be pending here
    except torch.OutOfMemoryError as e:
        assert "aten::topk" in str(e)
    assert v.cpu().tolist() == [2.0, 2.0, 2.0]
    assert (x[:4] * 0 + 1).cpu().tolist() == [1.0] * 4


def _settle():
    for _ in range(3):
        gc.collect()
    torch.tpu.synchronize()


def test_memory_summary_reports_the_accounting():
    import re
    _settle()
    x = torch.empty(3 * 1024 * 1024 // 4, device="tpu")  # 3 MiB
    s = torch.tpu.memory_stats()
    text = torch.tpu.memory_summary()
    assert torch.tpu.memory.memory_summary is torch.tpu.memory_summary

    def cells(name):
        line = next(l for l in text.splitlines() if l.startswith(f"| {name}"))
        return [c.strip() for c in line.strip("|").split("|")[1:]]

    def mib(cell):
        v, unit = cell.split()
        return float(v) * {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]

    cur, peak, tot_alloc, tot_freed = cells("Allocated memory")
    assert abs(mib(cur) - s["allocated_bytes.all.current"] / 2**20) < 0.06
    assert abs(mib(peak) - s["allocated_bytes.all.peak"] / 2**20) < 0.06
    assert int(cells("Allocations")[0]) == s["allocation.all.current"]
    assert int(cells("Allocations")[1]) == s["allocation.all.peak"] >= s["allocation.all.current"]
    free, total = torch.tpu.mem_get_info()
    line = next(l for l in text.splitlines() if "Device free / total" in l)
    got_free, got_total = [mib(p.strip(" |")) for p in line.split("|")[2].split("/")]
    # (printed with one decimal: within half of its last digit)
    assert abs(got_free - free / 2**20) <= max(0.06, free / 2**20 * 3e-3)
    assert abs(got_total - total / 2**20) <= max(0.06, total / 2**20 * 3e-3)
    del x
    _settle()
    after = torch.tpu.memory_summary(abbreviated=True)
    assert "Largest live allocations" not in after
    assert re.search(r"Allocated memory", after)
    with pytest.raises(ValueError):
        torch.tpu.memory_summary(device="cpu")


def test_memory_history_snapshot_has_stacks_and_is_viewable():
    from torch.cuda import _memory_viz
    _settle()

    def make_weights():
        return torch.randn(256, 512, device="tpu")  # 512 KiB

    torch.tpu.memory._record_memory_history(max_entries=1000)
    try:
        w = make_weights()
        tmp = w * 2
        addr_tmp = tmp.untyped_storage().data_ptr()
        del tmp
        _settle()
        snap = torch.tpu.memory._snapshot()
    finally:
        torch.tpu.memory._record_memory_history(enabled=None)
    # the live weights are a segment whose frames name the function
    seg = next(g for g in snap["segments"] if g["address"] == w.untyped_storage().data_ptr())
    assert seg["total_size"] == w.untyped_storage().nbytes() == 256 * 512 * 4
    assert seg["blocks"][0]["state"] == "active_allocated"
    assert any(f["name"] == "make_weights" for f in seg["frames"]), seg["frames"]
    # the trace: the temporary was allocated and freed, with this file's frames
    trace = snap["device_traces"][0]
    acts = [(e["action"], e["size"]) for e in trace if e["addr"] == addr_tmp]
    assert ("alloc", 256 * 512 * 4) in acts and ("free_completed", 256 * 512 * 4) in acts, acts
    assert all(any(f["filename"] == __file__ for f in e["frames"]) for e in trace
               if e["addr"] == addr_tmp)
    # every live segment is counted by the accounting, and vice versa
    live = sum(g["total_size"] for g in snap["segments"] if g["device"] == 0)
    assert live == torch.tpu.memory_allocated(0)
    assert len([g for g in snap["segments"] if g["device"] == 0]) == \
        torch.tpu.memory_stats(0)["allocation.all.current"]
    # PyTorch's viewer reads it
    assert "<html" in _memory_viz.trace_plot(snap).lower()
    assert "<html" in _memory_viz.segment_plot(snap).lower()
    # off: nothing more is traced
    n = len(torch.tpu.memory._snapshot()["device_traces"][0])
    assert n == 0
    x = torch.ones(8, device="tpu")
    assert torch.tpu.memory._snapshot()["device_traces"][0] == []
    del x
    with pytest.raises(ValueError, match="enabled"):
        torch.tpu.memory._record_memory_history(enabled="yes")


def test_dump_snapshot_pickles_the_snapshot(tmp_path):
    import pickle
    x = torch.ones(1000, device="tpu")
    path = tmp_path / "snap.pickle"
    torch.tpu.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert any(g["address"] == x.untyped_storage().data_ptr() for g in snap["segments"])


_HEAP_PROBE = """
import resource, statistics, torch, torchtpu
from torchtpu import _C
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
x = torch.ones(2048, 4096, device="tpu")  # 32 MiB, glibc's largest mmap threshold
per_op = []
for _ in range(16):  # the first ones compile and grow the worker threads' heaps
    before = faults()
    y = x * 2
    torch.tpu.synchronize()
    del y
    per_op.append(faults() - before)
ok = bool(torch.equal((x * 2).cpu(), torch.full((2048, 4096), 2.0)))
print(_C._host_heap_configured(), statistics.median(per_op[6:]), ok)
"""


def test_host_heap_keeps_freed_buffers_for_the_next(py):
    """On the CPU plugin device memory is the process's heap: a 32 MiB result
    freed and computed again reuses the pages (glibc's default unmaps it and
    page-faults all 8,192 pages of the next one in again), with equal
    values; TORCHTPU_HOST_HEAP=0 leaves malloc at its defaults."""
    on = py(_HEAP_PROBE)
    assert on.returncode == 0, on.stderr
    configured, per_op, ok = on.stdout.split()
    assert configured == "True" and ok == "True"
    assert float(per_op) < 500, on.stdout
    off = py(_HEAP_PROBE, {"TORCHTPU_HOST_HEAP": "0"})
    assert off.returncode == 0, off.stderr
    configured, per_op_off, ok = off.stdout.split()
    assert configured == "False" and ok == "True"
    assert float(per_op_off) > 8000, off.stdout


def test_empty_cache_returns_freed_heap_pages(py):
    r = py("""
import torch, torchtpu
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
x = torch.ones(8192, 4096, device="tpu")  # 128 MiB
torch.tpu.synchronize()
del x
held = resident()
torch.tpu.empty_cache()
print(held - resident())
""")
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) > 64 << 20, r.stdout
