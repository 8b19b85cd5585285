"""One process, every local device: torch.tpu.comm's collectives run as one
XLA program over tpu:0..N-1 (TORCHTPU_NUM_DEVICES=4 on the CPU plugin),
checked against exact references computed on the CPU, with no bytes
crossing to or from the host while they run."""
import json

import pytest
import torch

from conftest import run_python

FOUR = {"TORCHTPU_NUM_DEVICES": "4"}

# Runs in a fresh 4-device process; prints one JSON line of failures.
VALUES = r'''
import json, torch, torchtpu
from torch.distributed import ReduceOp
comm = torch.tpu.comm
dtype = getattr(torch, DTYPE)
N = 4
g = torch.Generator().manual_seed(7)
def make(shape):
    # Small integers: every reduction is exact in every dtype tested.
    return [torch.randint(-4, 5, shape, generator=g).to(dtype) for _ in range(N)]
def ops():
    yield ReduceOp.SUM, lambda xs: torch.stack(xs).sum(0).to(dtype)
    yield ReduceOp.MAX, lambda xs: torch.stack(xs).amax(0)
    yield ReduceOp.MIN, lambda xs: torch.stack(xs).amin(0)
    yield ReduceOp.PRODUCT, lambda xs: torch.stack(xs).prod(0).to(dtype)
    if dtype.is_floating_point:
        yield ReduceOp.AVG, lambda xs: (torch.stack(xs).to(torch.float64).sum(0) / N).to(dtype)
fails = []
def check(name, got, want):
    for i, (a, b) in enumerate(zip(got, want)):
        if a.device != torch.device("tpu", i):
            fails.append(f"{name}: result {i} on {a.device}")
        elif a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a.cpu(), b):
            fails.append(f"{name}: result {i} {a.cpu().tolist()} != {b.tolist()}")
def on_devices(xs):
    return [x.to(f"tpu:{i}") for i, x in enumerate(xs)]
def host_bytes():
    m = torchtpu.metrics.metrics()
    return m.get("bytes_to_host", 0) + m.get("bytes_to_device", 0)
for shape in [(6,), (4, 3), ()]:
    for op, ref in ops():
        xs = make(shape)
        ts = on_devices(xs)
        torch.tpu.synchronize()
        before = host_bytes()
        out = comm.all_reduce(ts, op=op)          # in place
        torch.tpu.synchronize()
        if host_bytes() != before:
            fails.append(f"all_reduce {op} {shape}: {host_bytes() - before} bytes via the host")
        if out is not ts and any(o is not t for o, t in zip(out, ts)):
            fails.append("all_reduce: in place returns the inputs")
        check(f"all_reduce {op} {shape}", ts, [ref(xs)] * N)
    xs = make(shape)
    ts = on_devices(xs)
    torch.tpu.synchronize()
    before = host_bytes()
    got = comm.all_gather(ts)
    torch.tpu.synchronize()
    if host_bytes() != before:
        fails.append(f"all_gather {shape}: bytes via the host")
    want = torch.cat(xs) if shape else torch.stack(xs)
    check(f"all_gather {shape}", got, [want] * N)
    if shape and shape[0] % N == 0 or shape == (4, 3):
        for op, ref in ops():
            xs = make((8,) + tuple(shape[1:]))
            before = host_bytes()
            got = comm.reduce_scatter(on_devices(xs), op=op)
            torch.tpu.synchronize()
            r = ref(xs)
            check(f"reduce_scatter {op}", got, list(r.chunk(N)))
print(json.dumps(fails))
'''


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "bool"])
def test_local_collectives_equal_exact_references(dtype):
    r = run_python(VALUES.replace("DTYPE", repr(dtype)), FOUR, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []


SEMANTICS = r'''
import json, torch, torchtpu
from torch.distributed import ReduceOp
comm = torch.tpu.comm
out = {}
# Views: a column of a matrix is all-reduced in place; the matrix sees it.
bases = [torch.arange(12.).reshape(3, 4).to(f"tpu:{i}") * (i + 1) for i in range(4)]
cols = [b[:, 1] for b in bases]
comm.all_reduce(cols)
out["view"] = [b.cpu().tolist() for b in bases]
# Explicit outputs: flat ones of the gathered size; a strided one.
xs = [torch.full((2, 3), float(i), device=f"tpu:{i}") for i in range(4)]
flat = [torch.empty(24, device=f"tpu:{i}") for i in range(4)]
comm.all_gather(xs, flat)
out["flat"] = flat[3].cpu().tolist()
strided = [torch.zeros(3, 4, device=f"tpu:{i}").t() for i in range(4)]
comm.all_reduce(xs, [s[:3, :2].t() for s in strided])  # outputs: (2, 3) views
out["strided"] = strided[1].cpu().tolist()
out["inputs_kept"] = xs[2].cpu().tolist()
# Inputs still being computed (queued, or deferred under defer_and_fuse),
# and results used by later ops.
ys = [(torch.ones(4, device=f"tpu:{i}") * (i + 1)).exp() for i in range(4)]
comm.all_reduce(ys)
out["pending"] = (ys[3] * 2).cpu().tolist()
# Autograd: an in-place all_reduce bumps the version counter.
w = torch.ones(3, device="tpu:0")
v0 = w._version
comm.all_reduce([w, torch.ones(3, device="tpu:1")])
out["version"] = w._version > v0
# Errors, with the exception types torch.cuda.nccl's checks use.
def err(f):
    try:
        f()
    except Exception as e:
        return type(e).__name__ + ": " + str(e)
    return None
t0, t1 = torch.ones(4, device="tpu:0"), torch.ones(4, device="tpu:1")
out["same_device"] = err(lambda: comm.all_reduce([t0, torch.ones(4, device="tpu:0")]))
out["cpu"] = err(lambda: comm.all_reduce([t0, torch.ones(4)]))
out["shape"] = err(lambda: comm.all_reduce([t0, torch.ones(5, device="tpu:1")]))
out["dtype"] = err(lambda: comm.all_reduce([t0, torch.ones(4, device="tpu:1", dtype=torch.int64)]))
out["avg_int"] = err(lambda: comm.all_reduce([t0.long(), t1.long()], op=ReduceOp.AVG))
out["band"] = err(lambda: comm.all_reduce([t0, t1], op=ReduceOp.BAND))
out["indivisible"] = err(lambda: comm.reduce_scatter([torch.ones(3, device=f"tpu:{i}") for i in range(2)]))
out["not_list"] = err(lambda: comm.all_reduce(t0))
out["after_errors"] = comm.all_reduce([t0.clone(), t1.clone()])[1].cpu().tolist()
print(json.dumps(out))
'''


def test_local_collectives_keep_view_semantics_and_raise_clearly():
    r = run_python(SEMANTICS, FOUR, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    want = [[float(4 * row + c) * (10 if c == 1 else 1) for c in range(4)] for row in range(3)]
    assert out["view"][0] == want
    assert out["view"][3] == [[v * 4 if c != 1 else v for c, v in enumerate(r)] for r in want]
    assert out["flat"] == [float(i) for i in range(4) for _ in range(6)]
    assert out["strided"] == [[6.0, 6.0, 0.0]] * 3 + [[0.0] * 3]
    assert out["inputs_kept"] == [[2.0] * 3] * 2
    want_exp = 2 * sum(torch.exp(torch.tensor(float(i + 1))) for i in range(4))
    assert torch.allclose(torch.tensor(out["pending"]), want_exp.expand(4))
    assert out["version"] is True
    assert out["same_device"].startswith("RuntimeError") and "device 0" in out["same_device"]
    assert out["cpu"].startswith("ValueError") and "not a tpu tensor" in out["cpu"]
    assert out["shape"].startswith("RuntimeError") and "same dtype and shape" in out["shape"]
    assert out["dtype"].startswith("RuntimeError") and "same dtype and shape" in out["dtype"]
    assert out["avg_int"].startswith("RuntimeError") and "avg" in out["avg_int"]
    assert out["band"].startswith("ValueError") and "reduce op" in out["band"]
    assert out["indivisible"].startswith("ValueError") and "equal" in out["indivisible"]
    assert out["not_list"].startswith("TypeError")
    assert out["after_errors"] == [2.0] * 4
