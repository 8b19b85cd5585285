"""torch.profiler shows the device's work: ATen ops, PJRT executions (on the
launcher's thread when queued, with their queue wait), compiles, transfers
and defer_and_fuse flushes appear in key_averages() and in the exported
Chrome trace, inside the user's record_function ranges; nothing is traced
while no profiler runs (torchtpu/profiler.py, csrc/torch/profiler.cpp,
csrc/core/trace.c)."""
import json
import os
import tempfile

import pytest
import torch
from torch.profiler import profile, record_function

import torchtpu
from torchtpu import _C


@pytest.fixture(autouse=True)
def strict_mode():
    before = torchtpu.get_eager_mode()
    torchtpu.set_eager_mode("strict")
    yield
    torchtpu.set_eager_mode(before)


def chrome_events(prof):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X"]


def keys(prof):
    return {e.key: e.count for e in prof.key_averages()}


def named(events, prefix):
    return [e for e in events if e["name"].startswith(prefix)]


def the_range(events, name="my_range"):
    found = [e for e in events if e["name"] == name]
    assert len(found) == 1, [e["name"] for e in events][:50]
    return found[0]


def inside(e, outer):
    return outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + 1e-3


@pytest.fixture
def always_queue():
    """Executions go through the launcher's queue even when ops do not
    arrive back to back (a profiled op is slower than the queue's 20 us
    window), so the launcher's thread shows up in the trace."""
    _C._launcher_set_always_queue(True)
    yield _C._launcher_enabled()
    _C._launcher_set_always_queue(False)


def test_strict_profile_shows_ops_executions_transfers_compiles(always_queue):
    torch.manual_seed(0)
    a_cpu, w_cpu = torch.randn(23, 29), torch.randn(29, 29) * 0.1
    a, w = a_cpu.to("tpu"), w_cpu.to("tpu")
    for _ in range(40):  # the mm's program is trusted to run inline: queueable
        a @ w
    torch.tpu.synchronize()
    steps = 12
    with profile(record_shapes=True) as prof:
        with record_function("my_range"):
            a, w = a_cpu.to("tpu"), w_cpu.to("tpu")
            y = a
            for _ in range(steps):
                y = torch.mm(y, w)
            # A shape no other test uses: compiled inside the profile.
            out = torch.tanh(y).cpu()
            torch.tpu.synchronize()
    expect = a_cpu
    for _ in range(steps):
        expect = expect @ w_cpu
    torch.testing.assert_close(out, torch.tanh(expect), rtol=1e-4, atol=1e-5)

    k = keys(prof)
    assert k.get("my_range") == 1  # the user's range, in key_averages too
    assert k.get("aten::mm") == steps
    assert k.get("tpu::execute aten::mm") == steps  # one execution per op, no more
    assert k.get("tpu::execute aten::tanh") == 1
    assert k.get("tpu::to_device", 0) >= 2
    assert k.get("tpu::to_host", 0) >= 1
    assert k.get("tpu::compile aten::tanh", 0) == 1

    events = chrome_events(prof)
    rng = the_range(events)
    execs = named(events, "tpu::execute aten::mm")
    assert len(execs) == steps
    for e in named(events, "tpu::"):
        assert inside(e, rng), (e, rng)
    # Compiling is part of aten::tanh, on the same thread.
    comp = named(events, "tpu::compile aten::tanh")[0]
    assert any(m["tid"] == comp["tid"] and inside(comp, m) for m in named(events, "aten::tanh"))
    # With shapes recorded, executions say how long they were queued and
    # transfers how many bytes they moved.
    assert all("queue_wait_ns" in e["args"] for e in execs)
    assert all(e["args"]["bytes"] > 0 for e in named(events, "tpu::to_"))

    # The core's own spans agree; queued executions ran on the launcher's
    # thread, which has its own lane in the trace.
    spans = [s for s in torchtpu.profiler.device_spans() if s["name"] == "aten::mm"]
    assert len(spans) == steps
    if always_queue:
        queued = [s for s in spans if s["wait_ns"] > 0]
        assert queued
        worker = {e["tid"] for e in execs} - {rng["tid"]}
        assert worker == {s["thread_id"] for s in queued}
        waits = sorted(e["args"]["queue_wait_ns"] for e in execs if e["tid"] in worker)
        assert waits and waits[-1] > 0


def test_defer_and_fuse_profile_shows_the_flush():
    torch.manual_seed(1)
    x_cpu, w_cpu = torch.randn(17, 19), torch.randn(19, 19)
    x, w = x_cpu.to("tpu"), w_cpu.to("tpu")
    torch.tpu.synchronize()
    with torchtpu.eager_mode("defer_and_fuse"):
        with profile() as prof:
            with record_function("my_range"):
                y = torch.mm(x, w).relu() * 0.5 + 1.0
                out = y.cpu()  # a host read flushes the run ("sync")
    torch.testing.assert_close(out, (x_cpu @ w_cpu).relu() * 0.5 + 1.0, rtol=1e-4, atol=1e-5)

    k = keys(prof)
    assert "aten::mm" in k and "aten::relu" in k
    assert k.get("tpu::flush sync", 0) >= 1
    assert k.get("tpu::execute a defer_and_fuse run", 0) >= 1
    assert "tpu::execute aten::mm" not in k  # deferred: no op ran alone

    events = chrome_events(prof)
    rng = the_range(events)
    flushes = named(events, "tpu::flush sync")
    runs = named(events, "tpu::execute a defer_and_fuse run")
    assert flushes and runs
    for e in flushes + runs:
        assert inside(e, rng)
    # The fused run executes within its flush.
    assert any(inside(r, f) for r in runs for f in flushes)


def test_compiled_call_profile_shows_graph_compile_and_execution():
    torch.manual_seed(2)

    def fn(x, w):
        return torch.tanh(x @ w).sum(dim=1)

    compiled = torch.compile(fn, backend="tpu")
    x_cpu, w_cpu = torch.randn(13, 11), torch.randn(11, 7)
    x, w = x_cpu.to("tpu"), w_cpu.to("tpu")
    with profile() as prof:
        with record_function("my_range"):
            out = compiled(x, w).cpu()
    torch.testing.assert_close(out, fn(x_cpu, w_cpu), rtol=1e-4, atol=1e-5)

    k = keys(prof)
    assert k.get("tpu::compile a compiled graph or kernel", 0) >= 1
    assert k.get("tpu::execute a compiled graph or kernel", 0) >= 1
    events = chrome_events(prof)
    rng = the_range(events)
    for e in named(events, "tpu::execute") + named(events, "tpu::compile"):
        assert inside(e, rng)


def test_nothing_is_traced_without_a_profiler_and_profiles_do_not_stack():
    x = torch.randn(9, 9, device="tpu")
    torch.tpu.synchronize()
    with profile() as prof:
        for _ in range(3):
            x = torch.mm(x, x) * 0.1
        x.cpu()
    assert not _C._trace_enabled()
    spans_after = torchtpu.profiler.device_spans()
    assert len([s for s in spans_after if s["kind"] == "execute"]) == 6
    # Work with no profiler running adds nothing to the last trace.
    for _ in range(5):
        x = torch.mm(x, x) * 0.1
    x.cpu()
    torch.tpu.synchronize()
    assert torchtpu.profiler.device_spans() == spans_after
    assert keys(prof).get("tpu::execute aten::mm") == 3
    # A second profile sees each op once (no callbacks left over from the
    # first one on any thread), and the legacy API works the same way.
    with torch.autograd.profiler.profile() as prof2:
        for _ in range(4):
            x = torch.mm(x, x) * 0.1
        x.cpu()
    k = {e.key: e.count for e in prof2.key_averages()}
    assert k.get("aten::mm") == 4
    assert k.get("tpu::execute aten::mm") == 4
    assert not _C._trace_enabled()


def test_autograd_profiler_use_device_tpu_has_device_time(py):
    """The fallback profiler state (use_device="tpu") needs our
    ProfilerStubs: without them every op logs "PrivateUse1 used in profiler
    but not enabled" and the TPU time columns stay empty."""
    r = py(
        "import torch, torchtpu\n"
        "torchtpu.set_eager_mode('strict')  # (one execution per op, named by it)\n"
        "x = torch.randn(16, 16, device='tpu'); (x @ x).cpu()\n"
        "with torch.autograd.profiler.profile(use_device='tpu') as p:\n"
        "    (x @ x).cpu()\n"
        "k = {e.key: e for e in p.key_averages()}\n"
        "print('KEYS', 'aten::mm' in k, 'tpu::execute aten::mm' in k)\n"
        "print('DEVICE_US', k['aten::mm'].device_time_total)\n")
    assert r.returncode == 0, r.stderr
    assert "KEYS True True" in r.stdout
    assert float(r.stdout.split("DEVICE_US")[1].split()[0]) > 0
    assert "not enabled" not in r.stderr and "INTERNAL ASSERT" not in r.stderr
