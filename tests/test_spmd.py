"""One process, every local device: torch.tpu.comm's collectives run as one
XLA program over tpu:0..N-1 (TORCHTPU_NUM_DEVICES=4 on the CPU plugin),
checked against exact references computed on the CPU, with no bytes
crossing to or from the host while they run."""
import json

import pytest
import torch

from conftest import run_python

FOUR = {"TORCHTPU_NUM_DEVICES": "4"}

# err(f): None, or "ExceptionType: message" of what f() raised (prepended
# to the scripts that check error cases).
ERR = '''
def err(f):
    try:
        f()
    except Exception as e:
        return type(e).__name__ + ": " + str(e)
    return None
'''

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
    r = run_python(ERR + SEMANTICS, FOUR, timeout=600)
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


# TinyGPT trained 20 steps in one process: on tpu:0 alone, data parallel
# over 4 devices, and 2-way data x 2-way tensor parallel; XLA dumps the
# partitioned programs it compiled.
TRAIN = r'''
import glob, json, os, re, sys, torch, torchtpu
sys.path.insert(0, "examples")
from spmd_tiny_gpt import train
dump = os.environ["DUMP"]
def partitioned():
    """{file: text} of the partitioned programs XLA compiled so far."""
    out = {}
    for f in glob.glob(os.path.join(dump, "*after_optimizations.txt")):
        text = open(f).read()
        if "num_partitions=4" in text.splitlines()[0]:
            out[f] = text
    return out
out = {"ref": train(20)[0]}
seen = {}
for name, shape in (("dp", (4,)), ("dp_tp", (2, 2))):
    losses, _, moved = train(20, shape)
    now = partitioned()
    programs = [t for f, t in now.items() if f not in seen]
    seen = now
    ops = ("all-reduce(", "all-gather(", "reduce-scatter(", "all-to-all(", "collective-permute(")
    out[name] = dict(losses=losses, moved=moved, programs=len(programs),
                     collectives={op: sum(t.count(op) for t in programs) for op in ops},
                     sharded_params=sum(t.count("sharding={devices=") for t in programs),
                     float_gathers=sum(len(re.findall(r"= f32\[[^=\n]*? all-gather\(", t))
                                       for t in programs))
out["single_moved"] = train(6)[2]
print(json.dumps(out))
'''


def test_tiny_gpt_trains_partitioned_over_local_devices(tmp_path):
    env = dict(FOUR, DUMP=str(tmp_path),
               XLA_FLAGS=f"--xla_dump_to={tmp_path} --xla_dump_hlo_as_text",
               TORCHTPU_CACHE_DIR=str(tmp_path / "cache"),
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    r = run_python(TRAIN, env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    ref = out["ref"]
    for name in ("dp", "dp_tp"):
        run = out[name]
        got = run["losses"]
        # The same global computation: only the order of floating-point
        # sums differs (all-reduces; a partitioned row sums its lanes in
        # pieces), so the first loss is within a few float32 ulps and
        # training amplifies the difference slowly.
        assert abs(got[0] - ref[0]) <= 1e-6 * abs(ref[0]), (name, got[0], ref[0])
        rel = [abs(a - b) / abs(a) for a, b in zip(ref, got)]
        assert max(rel[:10]) < 1e-5 and max(rel) < 1e-3, (name, rel)
        assert got[-1] < got[0] - 0.05, (name, got)  # it learns
        # XLA partitioned the forward and the backward and put the
        # collectives into the programs.
        assert run["programs"] >= 2 and run["sharded_params"] > 0, run
        assert run["collectives"]["all-reduce("] > 0, run
        # Every step ran partitioned (forward and backward), and no bytes
        # went through the host but the embedding's and the loss's
        # index-check flags (one byte each, read per graph as a
        # single-device run reads them): the shards moved device to device.
        moved = run["moved"]
        assert moved["spmd_executions"] == 2 * 18, moved
        assert moved["bytes_to_device"] == 0, moved
        assert 0 < out["single_moved"]["bytes_to_host"] <= 4 * 4, out["single_moved"]
        assert moved["bytes_to_host"] <= 18 * 8, moved
        assert moved["bytes_device_to_device"] > 0, moved
    # tensor parallel splits the weights themselves, data parallel only
    # the batch
    assert out["dp_tp"]["sharded_params"] > out["dp"]["sharded_params"]
    # The spmd partition: the forward saves only its inputs, so the
    # data-parallel programs gather no float activations (the forward's
    # result is the loss, an all-reduce; the backward all-reduces the
    # gradients; only the integer token batches are gathered).
    assert out["dp"]["float_gathers"] == 0, out["dp"]


API = r'''
import json, torch, torchtpu
from torchtpu import spmd
from torchtpu.spmd import Shard, Replicate
from torch.distributed.tensor import Partial
out = {}
m = torchtpu.metrics.metrics
# tpu:i -> tpu:j copies go device to device: whole tensors, views, another
# dtype, into a view; equal to the CPU's copies.
x = torch.arange(24.0).reshape(4, 6)
t = x.to("tpu:0")
before = {k: m().get(k, 0) for k in ("bytes_to_host", "bytes_to_device")}
a = t.to("tpu:2")
b = t.t()[1:4].to("tpu:1")
c = t.to("tpu:3", torch.int64)
d = torch.zeros(6, 4, device="tpu:1")
d[::2].copy_(t.t()[::2])
torch.tpu.synchronize()
out["no_host"] = {k: m().get(k, 0) - v for k, v in before.items()}
want_d = torch.zeros(6, 4); want_d[::2].copy_(x.t()[::2])
out["copies"] = [a.device.index == 2 and torch.equal(a.cpu(), x),
                 b.device.index == 1 and torch.equal(b.cpu(), x.t()[1:4]),
                 c.dtype == torch.int64 and torch.equal(c.cpu(), x.long()),
                 torch.equal(d.cpu(), want_d)]
mesh = spmd.init_device_mesh((2, 2), ("dp", "tp"))
out["gspmd"] = [spmd._gspmd(mesh, (Shard(0), Replicate()), 2),
                spmd._gspmd(mesh, (Replicate(), Shard(1)), 2),
                spmd._gspmd(mesh, (Shard(1), Shard(0)), 2),
                spmd._gspmd(mesh, (Replicate(), Replicate()), 2)]
w = torch.arange(16.0, device="tpu").reshape(4, 4)
spmd.mark_sharding(w, mesh, (Replicate(), Shard(1)))
out["sharding_of"] = repr(spmd.sharding_of(w)[1])
out["pieces"] = [p.cpu().tolist() for p in spmd._pieces(w, mesh, (Replicate(), Shard(1)))]
out["errors"] = dict(
    too_many=err(lambda: spmd.init_device_mesh((8,))),
    uneven=err(lambda: spmd.mark_sharding(torch.ones(3, device="tpu"), mesh, (Shard(0), Replicate()))),
    partial=err(lambda: spmd.mark_sharding(torch.ones(4, device="tpu"), mesh, (Partial(), Replicate()))),
    count=err(lambda: spmd.mark_sharding(torch.ones(4, device="tpu"), mesh, (Shard(0),))),
    cpu=err(lambda: spmd.mark_sharding(torch.ones(4), mesh, (Shard(0), Replicate()))),
)
# A compiled function of an annotated input and a view of an annotated
# tensor: partitioned, equal to the CPU.
f = torch.compile(lambda a, b: (a @ b.t()).relu().sum(0), backend="tpu")
xa = torch.randn(8, 4)
ta = spmd.mark_sharding(xa.to("tpu"), mesh, (Shard(0), Replicate()))
runs = m().get("spmd_executions", 0)
got = f(ta, w)
out["compiled"] = torch.allclose(got.cpu(), (xa @ w.cpu().t()).relu().sum(0), rtol=1e-6, atol=1e-5)
out["ran_partitioned"] = m().get("spmd_executions", 0) - runs
print(json.dumps(out))
'''


def test_spmd_api_copies_and_errors():
    r = run_python(ERR + API, FOUR, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["no_host"] == {"bytes_to_host": 0, "bytes_to_device": 0}
    assert out["copies"] == [True] * 4
    assert out["gspmd"] == ["{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
                            "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}",
                            "{devices=[2,2]0,2,1,3}", None]
    assert out["sharding_of"] == "(Replicate(), Shard(dim=1))"
    cols = [[r * 4 + c for c in cs] for r in range(4) for cs in ([0, 1], [2, 3])]
    left = [[float(v) for v in cols[2 * r]] for r in range(4)]
    right = [[float(v) for v in cols[2 * r + 1]] for r in range(4)]
    assert out["pieces"] == [left, right, left, right]
    e = out["errors"]
    assert e["too_many"].startswith("ValueError") and "distinct tpu device" in e["too_many"]
    assert e["uneven"].startswith("ValueError") and "evenly" in e["uneven"]
    assert e["partial"].startswith("NotImplementedError") and "Partial" in e["partial"]
    assert e["count"].startswith("ValueError") and "placements" in e["count"]
    assert e["cpu"].startswith("ValueError") and "tpu tensor" in e["cpu"]
    assert out["compiled"] is True and out["ran_partitioned"] == 1
