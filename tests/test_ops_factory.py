"""factory family vs CPU: arange, linspace, logspace, eye, tril/triu_indices
(exact or within tolerance), and the random ops on tpu tensors (uniform_,
normal_/normal, bernoulli, random_, exponential_, randperm, rand/randn/
randint): reproducible for a seed, distinct across draws, right range and
moments; no CPU fallback."""
import math

import pytest
import torch

from op_testing import assert_close, no_fallback

FLOATS = [torch.float32, torch.bfloat16]


def same_on_tpu(fn, dtype=None, exact=False):
    """fn(device) on CPU and on tpu, compared; no fallback on tpu."""
    want = fn("cpu")
    with no_fallback():
        got = fn("tpu")
    assert_close(got, want, dtype, exact)
    return got


# ---- ranges ----------------------------------------------------------------

@pytest.mark.parametrize("args,dtype", [
    ((10,), None), ((2, 11, 3), None), ((0, 1, 0.1), None), ((-3.5, 2.5, 0.75), torch.float32),
    ((5, -5, -2), torch.int64), ((0, 10, 1), torch.bfloat16), ((0, 1, 0.1), torch.float64),
    ((0, 17), torch.int32),
])
def test_arange(args, dtype):
    kw = {} if dtype is None else {"dtype": dtype}
    same_on_tpu(lambda d: torch.arange(*args, device=d, **kw), exact=dtype != torch.bfloat16)


def test_arange_after_an_empty_range():
    """start / end / step are run-time program arguments, so one cached call
    serves every range of one out= size: arange(1, 1) (nothing to resize)
    cached an empty result that arange(1, 4) then reused (det of an empty
    batch hit it through lu_det_P). The out= is sized before the lookup."""
    def fn(d):
        return [torch.arange(s, e, device=d, dtype=dt).tolist()
                for dt in (torch.int32, torch.float32) for s, e in ((1, 1), (1, 4), (2, 2), (0, 7))]
    same_on_tpu(fn, exact=True)


def test_arange_out_resizes():
    def fn(d):
        out = torch.empty(0, device=d)
        torch.arange(1, 4, 0.5, out=out)
        return out
    same_on_tpu(fn, exact=True)


@pytest.mark.parametrize("dtype", FLOATS + [torch.float64, torch.int64])
@pytest.mark.parametrize("start,end,steps", [(0, 1, 5), (-1, 2.5, 7), (3, -3, 100), (2, 2, 1),
                                             (0, 1, 0)])
def test_linspace(dtype, start, end, steps):
    same_on_tpu(lambda d: torch.linspace(start, end, steps, dtype=dtype, device=d), dtype)


@pytest.mark.parametrize("dtype", FLOATS + [torch.float64])
@pytest.mark.parametrize("base", [10.0, 2.0])
def test_logspace(dtype, base):
    same_on_tpu(lambda d: torch.logspace(-2, 1.5, 9, base=base, dtype=dtype, device=d), dtype)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.int16, torch.bfloat16,
                                   torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("start,end,steps,base", [(0, 4, 4, 10.0), (4.3, 1.2, 4, 10.0), (1.7, 3.9, 9, 3.0),
                                                  (3.96, 1.56, 4, 1.7), (4.3, 0, 1, 10.0), (0, 2, 0, 2.0),
                                                  (0.5, 6.5, 13, 2.0)])
def test_logspace_as_cpu_exactly(dtype, start, end, steps, base):
    """logspace for every real dtype: integers ran on the CPU fallback, and
    bfloat16 rounded its exponents to bfloat16 (21.625 for CPU's 21.5)."""
    run = lambda d: torch.logspace(start, end, steps, base=base, dtype=dtype, device=d)  # noqa: E731
    if steps == 1 and not dtype.is_floating_point:
        # base ** start, which CPU refuses when it overflows the dtype: on
        # the fallback (its value is only known when the program runs).
        from op_testing import same_as_cpu
        same_as_cpu(run)
        return
    same_on_tpu(run, exact=True)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64, torch.float32])
def test_linspace_step_is_the_correctly_rounded_quotient(dtype):
    """XLA turned range / (steps - 1) into range * (1 / (steps - 1)):
    linspace(50, 1, 50, dtype=int64) gave 24 for 25."""
    same_on_tpu(lambda d: torch.linspace(50, 1, 50, dtype=dtype, device=d), exact=True)
    same_on_tpu(lambda d: torch.logspace(50, 1, 50, base=1.01, dtype=dtype, device=d), exact=True)


@pytest.mark.parametrize("make", [
    lambda d: torch.linspace(0, 1, 5, out=torch.empty(3, device=d)),
    lambda d: torch.logspace(0, 1, 5, out=torch.empty(3, device=d)),
    lambda d: torch.randperm(5, out=torch.empty(2, dtype=torch.long, device=d)).sort().values,
    lambda d: torch.eye(2, 3, out=torch.empty(7, device=d)),
    lambda d: torch.arange(5.0, out=torch.empty(3, device=d)),
])
def test_factory_out_resize_warns_as_cpu(make):
    """linspace, logspace, randperm and eye resize a wrong-sized out=
    silently on the CPU; PyTorch's meta kernels warned. arange warns on
    both."""
    from op_testing import same_as_cpu

    same_as_cpu(make, warns=True)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.bool])
@pytest.mark.parametrize("shape", [(4,), (3, 5), (5, 2)])
def test_eye(dtype, shape):
    same_on_tpu(lambda d: torch.eye(*shape, dtype=dtype, device=d), exact=True)


# The engine takes the device from tensor arguments only (dispatch.cpp,
# try_run_on_device: builder.device < 0 -> CPU fallback), and these take
# nothing but ints and device=.
@pytest.mark.parametrize("name", ["tril_indices", "triu_indices"])
@pytest.mark.parametrize("row,col,offset", [(3, 3, 0), (4, 6, 1), (5, 3, -2), (3, 4, 9)])
def test_tri_indices(name, row, col, offset):
    f = getattr(torch, name)
    same_on_tpu(lambda d: f(row, col, offset, device=d), exact=True)


@pytest.fixture
def deterministic():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("mode", ["strict", "debug", "defer_and_fuse"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.complex64,
                                   torch.int64, torch.int32, torch.uint8, torch.bool])
def test_uninitialized_memory_is_filled_under_deterministic_algorithms(mode, dtype, deterministic):
    """torch.use_deterministic_algorithms(True) makes CPU and CUDA fill what
    empty / empty_like / empty_strided / new_empty and a growing resize_
    hand out (NaN, or the dtype's largest value); the device gave zeros."""
    import torchtpu

    def made(d):
        base = torch.zeros(2, 2, dtype=dtype, device=d)
        grown = torch.zeros(4, dtype=dtype, device=d).resize_(3, 3)
        out = torch.zeros(0, dtype=dtype, device=d)
        return [torch.empty(3, 2, dtype=dtype, device=d), torch.empty_like(base),
                torch.empty_strided((2, 3), (1, 2), dtype=dtype, device=d), base.new_empty(5),
                grown, torch.empty(2, 3, dtype=dtype, device=d).t(), out.resize_(4)]

    with torchtpu.eager_mode(mode):
        for got, want in zip(made("tpu"), made("cpu")):
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)
        torch.utils.deterministic.fill_uninitialized_memory = False
        try:
            # no fill asked for: no program runs for an empty tensor
            before = torchtpu.metrics.metrics().get("device_ops", 0)
            torch.empty(3, dtype=dtype, device="tpu")
            assert torchtpu.metrics.metrics().get("device_ops", 0) == before
        finally:
            torch.utils.deterministic.fill_uninitialized_memory = True


def test_zeros_ones_full_like_use_no_fallback():
    x = torch.ones(3, 4, device="tpu")
    with no_fallback():
        r = [torch.zeros(2, 3, device="tpu"), torch.ones_like(x), torch.full((2,), 1.5, device="tpu"),
             torch.full_like(x, 7), x.new_zeros(2), torch.zeros_like(x, dtype=torch.int64)]
    assert_close([t.cpu() for t in r],
                 [torch.zeros(2, 3), torch.ones(3, 4), torch.full((2,), 1.5),
                  torch.full((3, 4), 7.0), torch.zeros(2), torch.zeros(3, 4, dtype=torch.int64)])


# ---- random ----------------------------------------------------------------

N = 20000


def draw(fn):
    with no_fallback():
        return fn().cpu()


def test_seed_reproduces_and_draws_differ():
    torch.manual_seed(123)
    a = draw(lambda: torch.rand(N, device="tpu"))
    b = draw(lambda: torch.rand(N, device="tpu"))
    torch.manual_seed(123)
    c = draw(lambda: torch.rand(N, device="tpu"))
    torch.manual_seed(124)
    d = draw(lambda: torch.rand(N, device="tpu"))
    assert torch.equal(a, c)
    assert (a == b).float().mean() < 0.01
    assert (a == d).float().mean() < 0.01


@pytest.mark.parametrize("dtype", FLOATS + [torch.float64])
def test_uniform(dtype):
    x = draw(lambda: torch.empty(N, dtype=dtype, device="tpu").uniform_(-2, 3)).double()
    assert x.dtype == torch.float64 and x.min() >= -2 and x.max() <= 3
    assert abs(x.mean() - 0.5) < 0.05 and abs(x.var() - 25 / 12) < 0.1
    r = draw(lambda: torch.rand(4, 5, device="tpu", dtype=dtype))
    assert r.shape == (4, 5) and r.dtype == dtype and r.min() >= 0 and r.max() < 1


@pytest.mark.parametrize("dtype", FLOATS + [torch.float64])
def test_normal(dtype):
    x = draw(lambda: torch.empty(N, dtype=dtype, device="tpu").normal_(1.5, 2)).double()
    assert abs(x.mean() - 1.5) < 0.06 and abs(x.std() - 2) < 0.06
    z = draw(lambda: torch.randn(N, device="tpu", dtype=dtype)).double()
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    assert abs((z.abs() < 1).double().mean() - 0.6827) < 0.015


def test_normal_tensor_overloads():
    mean = torch.tensor([-100.0, 0.0, 100.0]).repeat(N // 3)
    std = torch.tensor([0.5, 1.0, 2.0]).repeat(N // 3)
    tm, ts = mean.to("tpu"), std.to("tpu")
    cases = [(lambda: torch.normal(tm, 0.5), mean, torch.full_like(std, 0.5)),
             (lambda: torch.normal(2.0, ts), torch.full_like(mean, 2.0), std),
             (lambda: torch.normal(tm, ts), mean, std)]
    for fn, m, s in cases:
        zs = (draw(fn) - m) / s
        assert abs(zs.mean()) < 0.05 and abs(zs.std() - 1) < 0.05


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.bool])
def test_bernoulli(dtype):
    x = draw(lambda: torch.empty(N, dtype=dtype, device="tpu").bernoulli_(0.3))
    assert x.dtype == dtype and set(x.double().unique().tolist()) <= {0.0, 1.0}
    assert abs(x.double().mean() - 0.3) < 0.015
    p = torch.tensor([0.0, 1.0, 0.5]).repeat(N // 3)
    y = draw(lambda: torch.bernoulli(p.to("tpu"))).view(-1, 3)
    assert (y[:, 0] == 0).all() and (y[:, 1] == 1).all()
    assert abs(y[:, 2].mean() - 0.5) < 0.03
    z = draw(lambda: torch.bernoulli(torch.empty(N, device="tpu"), 0.8))
    assert abs(z.mean() - 0.8) < 0.015


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32,
                                   torch.bfloat16])
def test_random_ranges(dtype):
    x = draw(lambda: torch.empty(N, dtype=dtype, device="tpu").random_(3, 11)).double()
    assert x.min() == 3 and x.max() == 10 and (x == x.floor()).all()
    counts = torch.bincount(x.long() - 3)
    assert (counts.double() / N - 1 / 8).abs().max() < 0.015
    y = draw(lambda: torch.empty(N, dtype=dtype, device="tpu").random_(5)).double()
    assert y.min() == 0 and y.max() == 4
    z = draw(lambda: torch.empty(N, dtype=dtype, device="tpu").random_()).double()
    assert z.min() >= 0
    i = draw(lambda: torch.randint(-4, 4, (N,), device="tpu"))
    assert i.dtype == torch.int64 and i.min() == -4 and i.max() == 3


def test_random_bool_and_full_range():
    b = draw(lambda: torch.empty(N, dtype=torch.bool, device="tpu").random_())
    assert abs(b.double().mean() - 0.5) < 0.02
    f = draw(lambda: torch.empty(N, device="tpu").random_()).double()
    assert f.min() >= 0 and f.max() <= 2 ** 24 and f.max() > 2 ** 23


@pytest.mark.parametrize("dtype", FLOATS + [torch.float64])
def test_exponential(dtype):
    x = draw(lambda: torch.empty(N, dtype=dtype, device="tpu").exponential_(4)).double()
    assert x.min() >= 0 and math.isfinite(x.max())
    assert abs(x.mean() - 0.25) < 0.01 and abs(x.std() - 0.25) < 0.015


@pytest.mark.parametrize("n", [1, 10, 1000])
def test_randperm(n):
    p = draw(lambda: torch.randperm(n, device="tpu"))
    assert p.dtype == torch.int64 and torch.equal(p.sort().values, torch.arange(n))
    if n == 1000:
        assert (p == torch.arange(n)).sum() < 10


@pytest.mark.parametrize("dtype", FLOATS + [torch.float64])
def test_log_normal_cauchy(dtype):
    x = draw(lambda: torch.empty(N, dtype=dtype, device="tpu").log_normal_(0.5, 0.25)).double()
    assert x.min() > 0
    assert abs(x.log().mean() - 0.5) < 0.02 and abs(x.log().std() - 0.25) < 0.02
    c = draw(lambda: torch.empty(N, dtype=dtype, device="tpu").cauchy_(1, 2)).double()
    assert abs((c < 1).double().mean() - 0.5) < 0.02
    assert abs(((c > -1) & (c < 3)).double().mean() - 0.5) < 0.02


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_geometric(dtype):
    g = draw(lambda: torch.empty(N, dtype=dtype, device="tpu").geometric_(0.25)).double()
    assert g.min() >= 1 and (g == g.floor()).all()
    assert abs(g.mean() - 4) < 0.1 and abs((g == 1).double().mean() - 0.25) < 0.015


def test_inplace_random_on_views_writes_only_the_view():
    base = torch.full((6, 8), -5.0, device="tpu")
    view = base.t()[2:6, 1:5]  # base[1:5, 2:6], non-contiguous
    with no_fallback():
        view.uniform_(0, 1)
        base[0].normal_()
        base[5, ::2].bernoulli_(0.5)
    b = base.cpu()
    assert (b[1:5, 2:6] >= 0).all() and (b[1:5, 2:6] < 1).all()
    assert (b[0] != -5).all()
    assert set(b[5, ::2].tolist()) <= {0.0, 1.0}
    assert (b[1:5, :2] == -5).all() and (b[1:5, 6:] == -5).all()
    assert (b[5, 1::2] == -5).all()


@pytest.mark.parametrize("call", [
    "torch.linspace(0, 300, 3, dtype=torch.uint8, device=d)",
    "torch.linspace(-300, 3, 3, dtype=torch.uint8, device=d)",
    "torch.linspace(0, 2.5, 3, dtype=torch.uint8, device=d)",
    "torch.linspace(0, 300, 0, dtype=torch.uint8, device=d)",
    "torch.linspace(0, 1e40, 3, device=d)",
    "torch.linspace(0, 1e40, 3, dtype=torch.float64, device=d)",
    "torch.linspace(0, 300, 3, out=torch.empty(3, dtype=torch.uint8, device=d))",
    "torch.logspace(0, 300, 3, dtype=torch.uint8, device=d)",
    "torch.logspace(0, 2, 3, dtype=torch.uint8, device=d)",
])
def test_range_ends_the_dtype_cannot_hold_raise_as_cpu(call):
    # CPU converts start and end to the dtype with its overflow check when
    # it makes an element (linspace(0, 300, dtype=uint8) raised nothing and
    # wrapped: [0, 22, 44])
    def run(d):
        try:
            return eval(call).cpu().tolist()
        except RuntimeError as e:
            return ("raises", str(e))
    want = run("cpu")
    assert run("tpu") == want


_EMPTY_FORMS = {
    "empty_permuted_021": lambda d: torch.empty_permuted((2, 3, 4), (0, 2, 1), device=d),
    "empty_permuted_201": lambda d: torch.empty_permuted((2, 3, 4), (2, 0, 1), device=d),
    "empty_permuted_nhwc_bf16": lambda d: torch.empty_permuted((2, 3, 4, 5), (0, 2, 3, 1),
                                                                dtype=torch.bfloat16, device=d),
    "empty_permuted_zero_size": lambda d: torch.empty_permuted((2, 0, 4), (1, 2, 0), device=d),
    "empty_channels_last": lambda d: torch.empty((2, 3, 4, 5), memory_format=torch.channels_last,
                                                 device=d),
    "empty_channels_last_3d": lambda d: torch.empty((2, 3, 4, 5, 6), device=d,
                                                    memory_format=torch.channels_last_3d),
    "empty_like_preserves_permuted": lambda d: torch.empty_like(
        torch.empty(4, 3, 2, device=d).permute(2, 0, 1)),
    "empty_like_of_sliced_is_contiguous": lambda d: torch.empty_like(
        torch.empty(4, 6, device=d)[:, ::2]),
    "empty_strided": lambda d: torch.empty_strided((2, 3), (1, 2), device=d),
    "new_empty_int": lambda d: torch.empty(1, device=d).new_empty((3, 2), dtype=torch.int64),
}


@pytest.mark.parametrize("form", sorted(_EMPTY_FORMS))
def test_empty_results_keep_pytorchs_layout_contract(form):
    """torch.empty and friends: sizes, strides, storage offset and dtype as
    on CPU (the values are unspecified), on the device, with no fallback."""
    want = _EMPTY_FORMS[form]("cpu")
    with no_fallback():
        got = _EMPTY_FORMS[form]("tpu")
    assert got.device.type == "tpu"
    assert (got.shape, got.stride(), got.storage_offset(), got.dtype) == \
        (want.shape, want.stride(), want.storage_offset(), want.dtype)
