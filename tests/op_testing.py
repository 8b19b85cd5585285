"""Shared helpers for the op-family tests: run a function on tpu and on CPU
with the same inputs, compare outputs (and gradients), and check the CPU
fallback was not used."""
import contextlib

import torch

import torchtpu


def tolerances(dtype):
    if dtype in (torch.bfloat16,):
        return {"atol": 2e-2, "rtol": 2e-2}
    if dtype == torch.float16:
        return {"atol": 2e-3, "rtol": 2e-3}
    if dtype == torch.float32:
        return {"atol": 1e-5, "rtol": 1.3e-6 * 10}
    return {"atol": 1e-7, "rtol": 1e-7}


def make(shape, dtype=torch.float32, seed=0, low=None, high=None, noncontiguous=False):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        x = torch.randint(0, 2, shape, generator=g).bool()
    elif dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        if low is not None or high is not None:
            lo = -3 if low is None else low
            hi = 3 if high is None else high
            x = torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo
        x = x.to(dtype)
    else:
        x = torch.randint(-50 if low is None else low, 50 if high is None else high,
                          shape, generator=g).to(dtype)
    if noncontiguous and x.dim() >= 2:
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
        assert not x.is_contiguous()
    return x


def to_tpu(obj):
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("tpu")
        return t.requires_grad_(obj.requires_grad)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_tpu(o) for o in obj)
    if isinstance(obj, dict):
        return {k: to_tpu(v) for k, v in obj.items()}
    return obj


def to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(o) for o in obj)
    return obj


@contextlib.contextmanager
def no_fallback():
    """Fails if any op ran on the CPU fallback inside the block."""
    before = dict(torchtpu.metrics.fallback_counts())
    yield
    after = torchtpu.metrics.fallback_counts()
    used = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert not used, f"ops ran on the CPU fallback: {used}"


def assert_close(got, want, dtype=None, exact=False):
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w, dtype, exact)
        return
    if not isinstance(want, torch.Tensor):
        assert got == want
        return
    got = to_cpu(got)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if exact or not (want.dtype.is_floating_point or want.dtype.is_complex):
        assert torch.equal(got, want) or (
            want.dtype.is_floating_point and torch.equal(got.isnan(), want.isnan())
            and torch.equal(got[~got.isnan()], want[~want.isnan()])), (got, want)
    else:
        torch.testing.assert_close(got, want, equal_nan=True, **tolerances(dtype or want.dtype))


def check(fn, *inputs, grad=False, dtype=None, exact=False, allow_fallback=False,
          ref_dtype=None, **kwargs):
    """Runs fn on CPU inputs and on their tpu copies; compares the outputs and
    (grad=True) the gradients of every floating input that requires grad.
    Fails if the tpu run used the CPU fallback (unless allow_fallback).
    ref_dtype: the CPU reference computes in this dtype (its results cast
    back), for ops whose CPU half-precision kernels round differently by
    host CPU (oneDNN float16 convolution)."""
    cpu_inputs = [i.detach().requires_grad_(grad and i.dtype.is_floating_point)
                  if isinstance(i, torch.Tensor) else i for i in inputs]
    tpu_inputs = to_tpu(cpu_inputs)
    if ref_dtype is not None:
        low = [i.dtype if isinstance(i, torch.Tensor) else None for i in cpu_inputs]
        cpu_inputs = [i.detach().to(ref_dtype).requires_grad_(i.requires_grad)
                      if isinstance(i, torch.Tensor) and i.dtype.is_floating_point else i
                      for i in cpu_inputs]
    want = fn(*cpu_inputs, **kwargs)
    if ref_dtype is not None:
        want = want.to(low[0]) if isinstance(want, torch.Tensor) else want
    ctx = contextlib.nullcontext() if allow_fallback else no_fallback()
    with ctx:
        got = fn(*tpu_inputs, **kwargs)
        assert_close(got, to_cpu(want) if not isinstance(want, torch.Tensor) else want.detach(),
                     dtype, exact)
        if grad:
            outs = want if isinstance(want, (list, tuple)) else [want]
            touts = got if isinstance(got, (list, tuple)) else [got]
            gen = torch.Generator().manual_seed(1)
            for w, t in zip(outs, touts):
                if isinstance(w, torch.Tensor) and w.requires_grad:
                    g = torch.randn(w.shape, generator=gen, dtype=torch.float64).to(w.dtype)
                    w.backward(g)
                    t.backward(g.to("tpu"))
            for ci, ti in zip(cpu_inputs, tpu_inputs):
                if isinstance(ci, torch.Tensor) and ci.requires_grad:
                    assert ti.grad is not None, "no gradient reached a tpu input"
                    assert_close(ti.grad, ci.grad.to(ti.dtype), dtype)
    return got


def same_as_cpu(fn, exact=True, dtype=None, warns=False):
    """Runs fn(device) for "cpu" and "tpu": where the CPU raises, the tpu run
    must raise the same exception type; otherwise the results (a tensor or a
    tuple of them) must match (exactly by default). warns=True also compares
    the warning messages' first sentences. Returns the tpu result."""
    import warnings

    def run(device):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = fn(device)
                err = None
            except Exception as e:  # noqa: BLE001 (the type is what is compared)
                out, err = None, e
        return out, err, [str(w.message).split(" (Triggered")[0] for w in caught]

    want, want_err, want_warn = run("cpu")
    got, got_err, got_warn = run("tpu")
    if want_err is not None:
        assert got_err is not None, f"CPU raised {type(want_err).__name__}: {want_err}; tpu did not"
        assert type(got_err) is type(want_err), (type(got_err), got_err, type(want_err), want_err)
        return got_err
    assert got_err is None, f"tpu raised {type(got_err).__name__}: {got_err}"
    if warns:
        assert got_warn == want_warn, (got_warn, want_warn)
    assert_close(to_cpu(got), want, dtype, exact)
    return got


def check_host_kernel_switch(code, flag, metric):
    """Runs `code` (which checks its results against CPU and prints
    torchtpu's metric `metric` last) in fresh strict processes with env
    `flag` = 0 and = 1: it must pass in both, and the metric (programs
    compiled with the host kernels) be 0 exactly when the flag is 0."""
    import os
    import subprocess
    import sys
    code += f"print(torchtpu.metrics.metrics().get({metric!r}, 0))\n"
    for value, used in (("0", False), ("1", True)):
        env = dict(os.environ, TORCHTPU_EAGER_MODE="strict", **{flag: value})
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        assert (int(r.stdout.split()[-1]) > 0) == used, (flag, value, r.stdout)
