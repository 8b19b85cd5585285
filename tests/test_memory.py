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
