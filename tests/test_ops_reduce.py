"""Reduce family on tpu vs CPU: values, dtypes, keepdim, negative and empty
dims, NaN handling, gradients, and no CPU fallback."""
import math

import pytest
import torch

from op_testing import assert_close, check, make, same_as_cpu

FLOATS = [torch.float32, torch.bfloat16]
LAYOUTS = [False, True]  # noncontiguous


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("nc", LAYOUTS)
@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), (-1, True), ((0, 2), False),
                                         ((), False)])
def test_sum_mean(dtype, nc, dim, keepdim):
    x = make((3, 4, 5), dtype, noncontiguous=nc)
    if dim is None:
        check(torch.sum, x, grad=True)
        check(torch.mean, x, grad=True)
    else:
        check(lambda t: t.sum(dim=dim, keepdim=keepdim), x, grad=True)
        check(lambda t: t.mean(dim=dim, keepdim=keepdim), x, grad=True)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.uint8])
def test_sum_promotes_to_int64(dtype):
    x = make((4, 6), dtype)
    check(torch.sum, x)
    check(lambda t: t.sum(1, keepdim=True), x)
    check(lambda t: t.prod(0), make((4, 6), dtype, low=-3, high=3) if dtype != torch.bool else x)


def test_sum_prod_mean_dtype_arg():
    x = make((5, 7), torch.float32)
    check(lambda t: t.sum(dtype=torch.float64), x)
    check(lambda t: t.sum(1, dtype=torch.bfloat16), x, dtype=torch.bfloat16)
    check(lambda t: t.mean(0, dtype=torch.float64), x)
    check(lambda t: t.prod(dtype=torch.float64), make((6,), torch.float32, low=0.5, high=1.5))
    check(lambda t: t.sum(dtype=torch.float32), make((3, 4), torch.int32))
    check(lambda t: t.mean(dtype=torch.float32), make((3, 4), torch.int64))


@pytest.mark.parametrize("dtype", FLOATS)
def test_prod_nansum(dtype):
    x = make((4, 5), dtype, low=0.5, high=1.5)
    check(torch.prod, x)
    check(lambda t: t.prod(1, keepdim=True), x)
    # prod's backward looks for zeros with nonzero() (one host sync)
    check(torch.prod, x, grad=True)
    check(lambda t: t.prod(1, keepdim=True), x, grad=True)
    z = x.clone()
    z[1, 2] = 0
    check(torch.prod, z, grad=True, dtype=dtype)
    check(lambda t: t.prod(1, keepdim=True), z, grad=True, dtype=dtype)
    y = make((4, 5), dtype)
    y[1, 2] = float("nan")
    check(torch.nansum, y)
    check(lambda t: torch.nansum(t, dim=0), y)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
@pytest.mark.parametrize("nc", LAYOUTS)
def test_amax_amin_max_min(dtype, nc):
    x = make((4, 6), dtype, noncontiguous=nc)
    grad = dtype.is_floating_point
    check(lambda t: t.amax(1), x, grad=grad)
    check(lambda t: t.amin((0, 1), keepdim=True), x, grad=grad)
    check(lambda t: t.amax(()), x)
    check(torch.max, x)
    check(torch.min, x)
    check(lambda t: t.max(-1), x, grad=grad)
    check(lambda t: t.min(0, keepdim=True), x, grad=grad)


def test_max_min_nan_and_ties():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0], [float("nan"), 5.0, float("nan"), 1.0],
                      [-math.inf, -math.inf, -math.inf, -math.inf]])
    check(lambda t: t.max(1), x)
    check(lambda t: t.min(1), x)
    check(lambda t: t.amax(1), x)
    check(lambda t: t.amin(1), x)
    check(torch.max, x)
    check(torch.argmax, x)
    check(lambda t: t.argmin(1), x)
    check(lambda t: t.argmax(0, keepdim=True), torch.tensor([[1, 5, 5], [5, 2, 5]]))


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.uint8])
def test_argmax_argmin(dtype):
    x = make((5, 7), dtype, noncontiguous=True)
    check(torch.argmax, x)
    check(torch.argmin, x)
    check(lambda t: t.argmax(1), x)
    check(lambda t: t.argmin(-2, keepdim=True), x)


def test_bool_max_and_binary_max_out():
    x = make((3, 4), torch.bool)
    check(lambda t: t.max(1), x)
    check(torch.max, x)
    a, b = make((3, 4)), make((4,), seed=1)
    a[0, 0] = float("nan")
    check(lambda p, q: torch.max(p, q, out=torch.empty(3, 4, device=p.device)), a, b)
    check(lambda p, q: torch.min(p, q, out=torch.empty(3, 4, device=p.device)), a, b)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("nc", LAYOUTS)
def test_var_std(dtype, nc):
    x = make((4, 6), dtype, noncontiguous=nc)
    check(torch.var, x, grad=True)
    check(torch.std, x, grad=True)
    check(lambda t: t.var(1, correction=0), x, grad=True)
    check(lambda t: t.std(0, keepdim=True, correction=2.5), x, grad=True)
    check(lambda t: torch.var_mean(t, 1), x)
    check(lambda t: torch.std_mean(t, (0, 1), keepdim=True, unbiased=False), x)
    # Both outputs share one graph: backward through a combination of them.
    check(lambda t: sum(torch.var_mean(t, 1)), x, grad=True)
    check(lambda t: sum(torch.std_mean(t, 0, correction=0)), x, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("p", [2, 1, math.inf, -math.inf, 0, 3, 0.5])
def test_vector_norm(dtype, p):
    x = make((4, 5), dtype, noncontiguous=True)
    grad = p not in (0,)
    check(lambda t: torch.linalg.vector_norm(t, p), x, grad=grad)
    check(lambda t: torch.linalg.vector_norm(t, p, dim=1, keepdim=True), x, grad=grad)
    check(lambda t: torch.norm(t, p, dim=0), x, grad=grad)


def test_norm_dtype_and_default():
    x = make((3, 4))
    check(torch.norm, x, grad=True)
    check(lambda t: torch.linalg.vector_norm(t, dtype=torch.float64), x)
    check(lambda t: torch.linalg.vector_norm(t, 2, dim=(-2, -1)), x, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_logsumexp(dtype):
    x = make((4, 6), dtype, noncontiguous=True)
    check(lambda t: torch.logsumexp(t, 1), x, grad=True)
    check(lambda t: torch.logsumexp(t, (0, 1), keepdim=True), x, grad=True)
    y = torch.full((2, 3), -math.inf)
    y[0, 1] = 5.0
    check(lambda t: torch.logsumexp(t, 1), y)
    check(lambda t: torch.logsumexp(t, 1), make((3, 4), torch.int64))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_cumprod(dtype, dim):
    x = make((5, 33), dtype, noncontiguous=True)
    check(lambda t: torch.cumsum(t, dim), x, grad=True)
    check(lambda t: torch.cumprod(t, dim), make((5, 33), dtype, low=0.8, high=1.2), grad=True)
    check(lambda t: torch.logcumsumexp(t, dim), x, grad=True)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_cummax_cummin(dtype):
    x = make((4, 9), dtype, noncontiguous=True)
    grad = dtype.is_floating_point
    check(lambda t: torch.cummax(t, 1), x, grad=grad)
    check(lambda t: torch.cummin(t, 0), x, grad=grad)
    y = torch.tensor([1.0, 3.0, 3.0, 2.0, float("nan"), 5.0, float("nan"), 1.0])
    check(lambda t: torch.cummax(t, 0), y)
    check(lambda t: torch.cummin(t, 0), y)


def test_cumsum_ints_and_dtype():
    check(lambda t: torch.cumsum(t, 1), make((3, 17), torch.int32))
    check(lambda t: torch.cumsum(t, 0), make((9,), torch.bool))
    check(lambda t: torch.cumprod(t, 0), make((9,), torch.int64, low=-2, high=3))
    check(lambda t: torch.cumsum(t, 1, dtype=torch.float64), make((3, 17)))
    check(lambda t: t.cumsum_(0), make((4, 4)))


@pytest.mark.parametrize("dtype", FLOATS + [torch.bool, torch.int64, torch.uint8])
def test_all_any(dtype):
    x = make((4, 5), dtype)
    if dtype != torch.bool:
        x[1] = 0
    check(torch.all, x)
    check(torch.any, x)
    check(lambda t: t.all(1), x)
    check(lambda t: t.any(0, keepdim=True), x)
    check(lambda t: torch.any(t, dim=(0, 1)), x)
    check(lambda t: torch.all(t, dim=()), x)


def test_count_nonzero_aminmax():
    x = make((4, 5))
    x[0, :3] = 0
    check(torch.count_nonzero, x)
    check(lambda t: torch.count_nonzero(t, dim=1), x)
    check(lambda t: torch.aminmax(t), x)
    check(lambda t: torch.aminmax(t, dim=0, keepdim=True), x)


def test_scalar_input():
    x = torch.tensor(2.5)
    check(torch.sum, x, grad=True)
    check(lambda t: t.sum(0), x)
    check(lambda t: t.max(0), x)
    check(lambda t: torch.cumsum(t, 0), x)
    check(torch.argmax, x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_reductions_accumulate_in_float32(dtype):
    # A half-precision accumulator would drift far past the tolerance here.
    x = make((20000,), dtype, low=0, high=2)
    check(torch.sum, x)
    check(torch.mean, x)
    check(lambda t: t.var(0), x)
    check(lambda t: torch.linalg.vector_norm(t), x)
    check(lambda t: torch.logsumexp(t, 0), x)
    check(lambda t: torch.cumsum(t, 0)[-5:], make((3000,), dtype, low=0, high=2))


def test_empty_and_zero_size():
    x = torch.empty(0, 3)
    check(lambda t: t.sum(0), x)
    check(lambda t: t.mean(0), x)
    check(lambda t: t.prod(0), x)
    check(lambda t: t.amax(1), x)
    check(lambda t: t.all(0), x)
    check(lambda t: t.any(0), x)
    check(lambda t: torch.cumsum(t, 0), x)
    check(lambda t: torch.linalg.vector_norm(t, dim=0), x)


def test_out_and_inplace_variants():
    x = make((4, 5))

    def sum_out(t):
        o = torch.empty(4, device=t.device)
        torch.sum(t, 1, out=o)
        return o

    def max_out(t):
        v = torch.empty(5, device=t.device)
        i = torch.empty(5, dtype=torch.long, device=t.device)
        torch.max(t, 0, out=(v, i))
        return v, i

    def cumsum_inplace(t):
        return t.clone().cumsum_(1)

    check(sum_out, x)
    check(max_out, x)
    check(cumsum_inplace, x)
    check(lambda t: torch.mean(t, (0, 1), out=torch.empty((), device=t.device)), x)


@pytest.mark.parametrize("dtype", FLOATS)
def test_dist_trace(dtype):
    a, b = make((3, 4), dtype, noncontiguous=True), make((4,), dtype, seed=1)
    for p in (2, 1, 0, 3.5, float("inf")):
        check(lambda x, y: torch.dist(x, y, p), a, b, grad=p != 0)
    check(torch.trace, a, grad=True)
    check(torch.trace, make((4, 3), torch.int32))


@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, 0.5, 3.0, float("inf")])
def test_cdist(p):
    a, b = make((2, 5, 3)), make((4, 3), seed=1)
    b[0] = a[0, 1]  # a zero distance
    check(lambda x, y: torch.cdist(x, y, p), a, b, grad=True)
    # Over 25 rows p=2 takes PyTorch's matmul path (_euclidean_dist).
    check(lambda x, y: torch.cdist(x, y, p), make((30, 3)), make((27, 3), seed=2), grad=True)


def test_histc_matches_cpu_including_integer_input():
    import torchtpu
    before = torchtpu.metrics.fallback_counts().get("aten::histc", 0)
    cases = [torch.randn(200), torch.tensor([2.0, 2.0, 2.0]), torch.randn(3, 7) * 4]
    for x in cases:
        for bins, lo, hi in ((4, 0, 3), (5, 0, 0), (3, -1, 1), (10, -5, 5)):
            torch.testing.assert_close(torch.histc(x.to("tpu"), bins, lo, hi).cpu(),
                                       torch.histc(x, bins, lo, hi))
    # integer input (MoE routers count tokens per expert): CPU has no int
    # kernel, so compare with the float count cast back
    experts = torch.tensor([[0, 3], [1, 3], [1, 2], [3, 0]], dtype=torch.int32)
    got = torch.histc(experts.to("tpu"), bins=4, min=0, max=3).cpu()
    assert got.dtype == torch.int32
    assert got.tolist() == torch.histc(experts.float(), 4, 0, 3).int().tolist() == [2, 2, 1, 3]
    assert torchtpu.metrics.fallback_counts().get("aten::histc", 0) == before


# --- Found by the random-program fuzzer (tests/fuzz_programs.py); xfail
# until fixed, then the tag leaves KNOWN_MISMATCH_TAGS there.

def test_fuzz_topk_of_zero_elements_of_a_scalar():
    # the fuzzer's program: topk(k=0) of a 0-d int64 matmul result; CPU's
    # result of a 0-d input keeps its element (shape ()) for k = 0 as for 1
    same_as_cpu(lambda d: tuple(t.cpu() for t in torch.topk(
        -(torch.tensor([2], device=d) @ torch.tensor([2], device=d)), 0, dim=0, largest=False)))
    x = torch.tensor(1.5)
    got = torch.topk(x.to("tpu"), 0, dim=0).values.cpu()
    assert got.shape == torch.topk(x, 0, dim=0).values.shape


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (3, 0), (3,), (2, 2)])
def test_sorting_ops_of_scalars_and_empty_tensors_match_cpu(shape):
    x = make(shape, seed=3)
    fns = [lambda t: torch.topk(t, 0, dim=0, largest=False),
           lambda t: torch.topk(t, 0),
           lambda t: torch.topk(t, 1, dim=0),
           lambda t: torch.sort(t),
           lambda t: torch.sort(t, dim=0, descending=True),
           lambda t: torch.sort(t, stable=True, dim=0),
           lambda t: torch.argsort(t),
           lambda t: torch.argsort(t, dim=0),
           lambda t: torch.msort(t),
           lambda t: torch.kthvalue(t, 1, dim=0),
           lambda t: torch.kthvalue(t, 1, dim=0, keepdim=True),
           lambda t: torch.kthvalue(t, 0)]
    for fn in fns:
        def run(d, fn=fn):
            r = fn(x.to(d))
            return tuple(t.cpu() for t in r) if isinstance(r, tuple) else r.cpu()
        same_as_cpu(run)
    # compiled graphs lower the same ops (those CPU computes for this shape)
    ok = []
    for fn in fns:
        try:
            fn(x)
            ok.append(fn)
        except (RuntimeError, IndexError):
            pass

    def flat(t):
        out = []
        for fn in ok:
            r = fn(t)
            out += list(r) if isinstance(r, tuple) else [r]
        return out
    assert_close([g.cpu() for g in torch.compile(flat, backend="tpu")(x.to("tpu"))], flat(x), exact=True)


def test_fuzz_topk_of_bool_raises_like_cpu():
    x = torch.tensor([True, False, True])
    with pytest.raises(RuntimeError, match="bool"):
        torch.topk(x, 2)
    with pytest.raises(RuntimeError, match="bool"):
        torch.topk(x.to("tpu"), 2).values.cpu()


# ---- edge cases that must behave as on the CPU (issue 21, item 4) --------

from op_testing import same_as_cpu  # noqa: E402


@pytest.mark.parametrize("case", ["max", "min", "max_dim", "min_dim", "max_dim_ok", "argmax",
                                  "argmin", "amax", "aminmax", "max_2d"])
def test_reductions_without_identity_of_empty_raise(case):
    fns = {
        "max": lambda d: torch.zeros(0, device=d).max(),
        "min": lambda d: torch.zeros(0, 2, device=d).min(),
        "max_dim": lambda d: torch.zeros(0, 3, device=d).max(0),
        "min_dim": lambda d: torch.zeros(3, 0, device=d).min(-1),
        "max_dim_ok": lambda d: torch.zeros(0, 3, device=d).max(1),  # empty result, no error
        "argmax": lambda d: torch.zeros(0, device=d).argmax(),
        "argmin": lambda d: torch.zeros(0, device=d).argmin(),
        "amax": lambda d: torch.zeros(0, device=d).amax(),
        "aminmax": lambda d: torch.aminmax(torch.zeros(0, device=d)),
        "max_2d": lambda d: torch.zeros(2, 0, device=d).max(),
    }
    same_as_cpu(fns[case])


DTYPES = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32,
          torch.float64]


@pytest.mark.parametrize("op", ["all", "any", "all_dim", "any_dim", "amax", "amin"])
@pytest.mark.parametrize("out_dtype", DTYPES)
@pytest.mark.parametrize("in_dtype", [torch.bool, torch.uint8, torch.int64, torch.float32])
def test_reduction_out_dtype_checks(op, out_dtype, in_dtype):
    # all/any write only bool or uint8; amax/amin only the input's dtype.
    def fn(d):
        x = torch.tensor([[1, 0, 2], [3, 4, 5]], device=d).to(in_dtype)
        o = torch.zeros(0, dtype=out_dtype, device=d)
        name = op.split("_")[0]
        if op.endswith("_dim") or name in ("amax", "amin"):
            getattr(torch, name)(x, 1, out=o)
        else:
            getattr(torch, name)(x, out=o)
        return o
    same_as_cpu(fn)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_logsumexp_half_rounds_each_step_as_cpu(dtype):
    # fuzz seed 101559: CPU's composite rounds x - max, exp, the sum and the
    # log to the half dtype; rounding once at the end was an ulp off, which
    # frac() made large. Bit-exact against CPU.
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(-6, 7, (3, 5, 4), generator=g).to(dtype)
        for dim in (0, 1, (1, 2)):
            want = torch.logsumexp(x, dim=dim)
            got = torch.logsumexp(x.to("tpu"), dim=dim).cpu()
            assert torch.equal(got, want), (seed, dim)
            assert torch.equal(torch.frac(torch.logsumexp(x.to("tpu"), dim=dim)).cpu(),
                               torch.frac(want))


@pytest.mark.parametrize("case", ["std_full", "var_full", "std_dim", "var_mean", "std_mean", "sum_overflows"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_var_std_of_values_near_the_float_max_as_cpu(case, dtype):
    # fuzz seed 971670: std of a tensor holding -3.4e38 (nan_to_num of -inf)
    # is finite on CPU, which sums the squares in double; ours overflowed
    x = {"sum_overflows": torch.tensor([[3e38, 3e38], [1.0, 2.0]])}.get(
        case, torch.tensor([[-3.3e38, 1.0, 0.5], [0.0, 0.0, 1.0]])).to(dtype)  # (bf16 holds it)
    f = {"std_full": lambda t: t.std(correction=0), "var_full": lambda t: t.var(),
         "std_dim": lambda t: t.std(dim=1), "var_mean": lambda t: torch.var_mean(t, dim=1),
         "std_mean": lambda t: torch.std_mean(t),
         "sum_overflows": lambda t: (t.std(dim=1), t.std(), torch.var_mean(t, dim=1))}[case]
    want, got = f(x), f(x.to("tpu"))
    flat = lambda r: [u for v in (r if isinstance(r, tuple) else (r,))
                      for u in (v if isinstance(v, tuple) else (v,))]
    for w, g in zip(flat(want), flat(got)):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True,
                                   rtol=1e-5 if dtype == torch.float32 else 1e-2, atol=0)


_EQUAL_CASES = {
    "same": lambda a, b: torch.equal(a, a.clone()),
    "different": lambda a, b: torch.equal(a, b),
    "nan_is_not_equal": lambda a, b: torch.equal(a.log() * 0 - 1, a.log() * 0 - 1),
    "shapes_differ": lambda a, b: torch.equal(a, a[:1]),
    "broadcastable_is_not_equal": lambda a, b: torch.equal(a[:1], a[:1].expand(2, 3)),
    "empty": lambda a, b: torch.equal(a[:0], b[:0]),
    "strided": lambda a, b: torch.equal(a.t()[::2], a.t().contiguous()[::2]),
    "ints": lambda a, b: torch.equal(a.long(), b.long()),
    "promotes": lambda a, b: torch.equal(a, a.double()) and not torch.equal(a + 0.5, a.long()),
    "bool_and_int": lambda a, b: torch.equal(a > 0, (a > 0).long()),
}


@pytest.mark.parametrize("case", sorted(_EQUAL_CASES))
def test_equal_on_the_device(case):
    """torch.equal ran on the CPU fallback; it is an eq + all read back."""
    from op_testing import no_fallback, same_as_cpu

    def run(d):
        a = torch.tensor([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]]).to(d)
        return torch.tensor(_EQUAL_CASES[case](a, a.flip(0)))
    with no_fallback():
        same_as_cpu(run)


def test_histogram_and_histogramdd_on_the_device():
    """torch.histogram / histogramdd ran on the CPU fallback (about 290
    sweep samples): now CPU's composition (outer edges from the range or
    the input's min and max, linspace edges, upper_bound bins with the
    rightmost bin closed, index_add of counts or weights, density) from
    lowered ops; CPU's errors for a non-finite range or no bins."""
    from op_testing import no_fallback, same_as_cpu
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, 7, generator=g), torch.rand(5, 7, generator=g)
    edges = torch.tensor([-2.0, -0.5, 0.0, 0.1, 3.0])
    y = torch.randn(20, 3, generator=g)
    with no_fallback():
        same_as_cpu(lambda d: torch.histogram(x.to(d), bins=6), exact=False)
        same_as_cpu(lambda d: torch.histogram(x.to(d), bins=4, range=(-1.0, 1.0), weight=w.to(d),
                                              density=True), exact=False)
        same_as_cpu(lambda d: torch.histogram(x.to(d), bins=edges.to(d), weight=w.to(d)), exact=False)
        same_as_cpu(lambda d: torch.histogram(torch.ones(4, device=d), bins=3), exact=False)
        same_as_cpu(lambda d: torch.histogramdd(y.to(d), bins=[2, 3, 4]).hist, exact=False)
        same_as_cpu(lambda d: torch.histogramdd(y.to(d), bins=[edges.to(d)] * 3, density=True).hist,
                    exact=False)
    same_as_cpu(lambda d: torch.histogram(torch.tensor([1.0, float("nan")], device=d), bins=3))
    same_as_cpu(lambda d: torch.histogram(x.to(d), bins=0))


@pytest.mark.parametrize("reduce", ["max", "min", "sum", "mean", "prod"])
@pytest.mark.parametrize("by", ["lengths", "offsets"])
def test_segment_reduce_on_the_device(reduce, by):
    """segment_reduce and its backward ran on the CPU fallback (720 sweep
    samples): now masked reductions per segment (sum, mean and prod
    accumulated element after element in the data dtype, as CPU rounds
    them), with CPU's empty-segment values and gradients."""
    from op_testing import check
    g = torch.Generator().manual_seed(0)
    data = torch.randn(6, 3, generator=g)
    data[2, 1] = 0.0  # prod's gradient at a zero
    data[4, 0] = data[3, 0]  # a tie for max / min
    lengths = torch.tensor([2, 0, 3, 1])
    seg = {"lengths": lengths} if by == "lengths" else {"offsets": torch.cat([torch.zeros(1, dtype=torch.long),
                                                                               lengths.cumsum(0)])}
    for initial in (None, 1.5):
        check(lambda x, s: torch.segment_reduce(x, reduce, axis=0, initial=initial, **{by: s}),
              data, seg[by], grad=True)
    check(lambda x, s: torch.segment_reduce(x, "sum", axis=0, **{by: s}), data.bfloat16(), seg[by],
          dtype=torch.bfloat16)


def test_segment_reduce_refuses_bad_lengths_like_cpu():
    from op_testing import same_as_cpu
    x = torch.randn(5)
    same_as_cpu(lambda d: torch.segment_reduce(x.to(d), "sum", lengths=torch.tensor([2, 2], device=d)))
    same_as_cpu(lambda d: torch.segment_reduce(x.to(d), "sum", lengths=torch.tensor([6, -1], device=d)))


def test_max_min_unary_out():
    """max.unary_out(self, out) read its out= as max.other's other: every
    call failed to compile."""
    from op_testing import no_fallback, same_as_cpu
    x = torch.randn(3, 4)
    with no_fallback():
        for f in (torch.max, torch.min):
            same_as_cpu(lambda d: f(x.to(d), out=torch.full((), 7.0, device=d)))
            same_as_cpu(lambda d: f(x.to(d), out=torch.full((2,), 7.0, device=d)[1]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_histc_bins_in_the_input_dtype(dtype):
    """CPU bins x as (x - lo) * bins / (hi - lo) in the input dtype, each
    step rounded: in float64 a bfloat16 value at a bin edge fell in the
    neighbouring bin (18 bfloat16 sweep samples mismatched)."""
    from op_testing import no_fallback
    g = torch.Generator().manual_seed(0)
    with no_fallback():
        for _ in range(10):
            x = (torch.randn(200, generator=g) * 5).to(dtype)
            for lo, hi, bins in ((-10, 10, 100), (0, 0, 7), (-1.5, 2.25, 9)):
                assert torch.equal(torch.histc(x.to("tpu"), bins, lo, hi).cpu(), torch.histc(x, bins, lo, hi))


# On the CPU plugin a reduce over adjacent dims, or over one long column,
# is emitted as one reduce of the merged dims behind an optimization
# barrier (csrc/core/lower/emit.c): the shapes of a training step's bias
# and norm-weight gradients, with NaN and inf, every dtype family, keepdim,
# and the gradient through it.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int32,
                                   torch.bool])
@pytest.mark.parametrize("shape,dim", [((16, 64, 24), (0, 1)), ((8, 128, 40), (0, 1)),
                                       ((4, 40, 36), (1, 2)), ((2, 3, 40, 5), (1, 2)),
                                       ((1024, 24), 0), ((3, 70, 9), 1)])
def test_sum_over_merged_dims(dtype, shape, dim):
    x = make(shape, dtype)
    if dtype.is_floating_point:
        x[0, 1] = float("nan")
        x.view(-1)[-3] = float("inf")
    check(lambda t: t.sum(dim), x, grad=dtype.is_floating_point and dtype != torch.bfloat16)
    check(lambda t: t.sum(dim, keepdim=True), x)
    if dtype.is_floating_point:
        check(lambda t: t.amax(dim), x)


def test_layer_norm_and_linear_gradients_over_merged_dims():
    # The sums a layer_norm's and a linear's weight and bias gradients take
    # over [batch, tokens] (1024 rows): against float64 on the CPU, within
    # a bound for float32 sums of 1024 terms; CPU float32 meets it too.
    x = make((16, 64, 32), torch.float64)
    w, b = make((32,), torch.float64, seed=1), make((32,), torch.float64, seed=2)
    lw, lb = make((48, 32), torch.float64, seed=3), make((48,), torch.float64, seed=4)
    g = make((16, 64, 48), torch.float64, seed=5)

    def grads(device, dtype):
        ts = [t.detach().to(device, dtype).clone().requires_grad_() for t in (x, w, b, lw, lb)]
        y = torch.nn.functional.linear(torch.nn.functional.layer_norm(ts[0], (32,), ts[1], ts[2]),
                                       ts[3], ts[4])
        y.backward(g.to(device, dtype))
        return [t.grad.cpu().double() for t in ts]

    want = grads("cpu", torch.float64)
    for device in ("cpu", "tpu"):
        for got, ref in zip(grads(device, torch.float32), want):
            bound = 1024 * 2 ** -24 * (ref.abs().max().item() + 1) * 8
            assert (got - ref).abs().max().item() <= bound, (device, (got - ref).abs().max())
