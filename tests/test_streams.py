"""Streams, events, pinned memory and non_blocking copies on "tpu": the API
stream-using code expects, with results checked against CPU."""
import pytest
import torch

import torchtpu  # noqa: F401


def test_streams_switch_and_order_work():
    s = torch.tpu.Stream()
    assert isinstance(s, torch.tpu.Stream) and isinstance(s, torch.Stream)
    assert s != torch.tpu.current_stream()
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    x = torch.arange(6.0).to("tpu")
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        y = x * 2
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    torch.tpu.current_stream().wait_stream(s)
    assert (y + 1).cpu().tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
    s.synchronize()
    assert s.query()
    torch.accelerator.synchronize()


def test_events_record_wait_synchronize_and_time():
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    assert isinstance(start, torch.tpu.Event)
    start.record()
    a = torch.randn(256, 256, device="tpu")
    b = a @ a
    end.record()
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) >= 0
    s = torch.tpu.Stream()
    ev = torch.tpu.current_stream().record_event()
    s.wait_event(ev)
    with torch.tpu.stream(s):
        c = b.sum()
    torch.testing.assert_close(c.cpu(), (a.cpu() @ a.cpu()).sum(), rtol=1e-4, atol=1e-2)


def test_pin_memory_non_blocking_and_dataloader():
    x = torch.randn(1000)
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned()
    assert torch.equal(p, x)
    t = p.to("tpu", non_blocking=True)
    back = torch.empty(1000).pin_memory()
    back.copy_(t, non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(back, x)
    data = torch.utils.data.TensorDataset(torch.arange(20.0).reshape(10, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)
    seen = []
    for (batch,) in loader:
        assert batch.is_pinned()
        seen.append(batch.to("tpu", non_blocking=True).sum().item())
    assert seen == [28.0, 92.0, 70.0]


def _sync_flushes():
    return torchtpu.metrics.metrics().get("defer_flush::sync", 0)


def test_every_synchronize_flushes_the_deferred_run():
    """torch.accelerator, streams and events synchronize as torch.tpu.synchronize
    does: a defer_and_fuse run pending on the device is run first."""
    x = torch.arange(6.0).to("tpu")
    start = torch.tpu.Event(enable_timing=True)
    start.record()

    def elapsed_time():
        end = torch.tpu.Event(enable_timing=True)
        end.record()
        start.elapsed_time(end)

    entry_points = [
        ("torch.tpu.synchronize", torch.tpu.synchronize),
        ("torch.accelerator.synchronize", torch.accelerator.synchronize),
        ("Stream.synchronize", lambda: torch.tpu.Stream().synchronize()),
        ("Stream.query", lambda: torch.tpu.current_stream().query()),
        ("Event.synchronize", lambda: torch.tpu.current_stream().record_event().synchronize()),
        ("Event.query", lambda: torch.tpu.current_stream().record_event().query()),
        ("Event.elapsed_time", elapsed_time),
    ]
    with torchtpu.modes.eager_mode("defer_and_fuse"):
        for name, synchronize in entry_points:
            torch.tpu.synchronize()
            y = x * 2 + 1
            assert torchtpu.modes.pending_ops() == 2, name
            before = _sync_flushes()
            synchronize()
            assert torchtpu.modes.pending_ops() == 0, name
            assert _sync_flushes() == before + 1, name
            assert y.cpu().tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0], name


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
@pytest.mark.parametrize("entry", ["accelerator", "stream", "event"])
def test_every_synchronize_raises_a_pending_index_error(entry, mode):
    """As torch.tpu.synchronize does (test_ops_index.py): an op's
    out-of-range index raises at the next synchronize of any kind."""
    synchronize = {
        "accelerator": torch.accelerator.synchronize,
        "stream": lambda: torch.tpu.current_stream().synchronize(),
        "event": lambda: torch.tpu.current_stream().record_event().synchronize(),
    }[entry]
    with torchtpu.modes.eager_mode(mode):
        x = torch.zeros(3, device="tpu").index_select(0, torch.tensor([7], device="tpu"))
        with pytest.raises(IndexError):
            synchronize()
        del x
        synchronize()
        assert torch.equal(torch.arange(3, device="tpu").cpu(), torch.arange(3))
