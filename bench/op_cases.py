"""The per-op cases shared by bench/runtime_overhead.py (tpu, CPU) and
bench/xla_peer.py (PyTorch/XLA, in its own venv): imports torch only.

Each case times a chain of `ops` cache-hit ops, x = op(x, y), then one sync,
divided by the count. A chain, not independent ops on one input: a deferred
or lazy backend fusing a run of identical independent ops could compute the
run once (common subexpressions), while in a chain every op's result is
needed. Matmuls multiply by an orthogonal matrix so values stay bounded."""
import time

import torch
import torch.nn.functional as F


def _layer_norm(x, wb):
    return F.layer_norm(x, (x.shape[-1],), wb[0], wb[1])


def _softmax(x, y):
    return torch.softmax(x, -1)


def _causal_sdpa(x, kv):
    return F.scaled_dot_product_attention(x, kv[0], kv[1], is_causal=True)


# name, shape, op(x, y), ops per round, rounds
CASES = (("tiny add [1]", (1,), torch.add, 200, 40),
         ("matmul 64x64", (64, 64), torch.mm, 100, 30),
         ("matmul 512x512", (512, 512), torch.mm, 5, 15),
         ("softmax 128x512", (128, 512), _softmax, 50, 30),
         ("layer_norm 128x512", (128, 512), _layer_norm, 50, 30),
         # the demo's causal attention: batch 16, 4 heads, 64 tokens, head dim 16
         ("sdpa 16x4x64x16", (16, 4, 64, 16), _causal_sdpa, 20, 20))


def inputs(name, shape, seed=0):
    """CPU (x0, y) for a case."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    if name.startswith("matmul"):
        y = torch.linalg.qr(torch.randn(*shape, generator=g)).Q.contiguous()
    elif name.startswith("layer_norm"):
        y = (torch.randn(shape[-1], generator=g), torch.randn(shape[-1], generator=g))
    elif "sdpa" in name:
        y = (torch.randn(*shape, generator=g), torch.randn(*shape, generator=g))
    else:
        y = torch.randn(*shape, generator=g)
    return x, y


def to(v, device):
    return tuple(t.to(device) for t in v) if isinstance(v, tuple) else v.to(device)


def chain_us(op, x, y, sync, ops, sync_each=False):
    """µs per op of a chain of `ops` ops then sync (or a sync after each)."""
    t0 = time.perf_counter()
    for _ in range(ops):
        x = op(x, y)
        if sync_each:
            sync()
    sync()
    return (time.perf_counter() - t0) / ops * 1e6


def alternate(contenders, rounds, base="cpu_eager"):
    """Runs each contender once to warm up (compiles, fused programs), then
    `rounds` rounds of all of them in turn, so machine noise hits them alike.
    Returns (median time per contender, median per-round ratio to `base`)."""
    import statistics
    for run in contenders.values():
        run()
    times = {k: [] for k in contenders}
    for _ in range(rounds):
        for k, run in contenders.items():
            times[k].append(run())
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = {k: statistics.median(x / c for x, c in zip(times[k], times[base]))
             for k in contenders if k != base}
    return med, ratio
