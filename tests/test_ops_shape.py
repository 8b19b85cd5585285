"""shape family vs CPU: cat / stack, flip, roll, repeat, padding (constant,
reflect, replicate), tril / triu, sort / argsort / topk / kthvalue / median,
clone, the select / slice backwards, and views that must not fall back;
with gradients and no CPU fallback."""
import pytest
import torch
import torch.nn.functional as F

from op_testing import check, make

FLOATS = [torch.float32, torch.bfloat16]
DTYPES = FLOATS + [torch.int64]


def distinct(shape, dtype, seed=0):
    """Values without ties (so sort indices are unambiguous)."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=g) - n // 2).reshape(shape).to(dtype)


# ---- cat / stack -----------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dtype, dim):
    a = make((2, 3, 4), dtype, seed=1)
    b = make((2, 3, 4), dtype, seed=2, noncontiguous=True)
    check(lambda a, b: torch.cat([a, b, a], dim), a, b, grad=dtype.is_floating_point,
          dtype=dtype)


def test_cat_mixed_dtypes_and_legacy_empty():
    a = make((2, 3), torch.float32, seed=1)
    b = make((2, 2), torch.int64, seed=2)
    e = torch.empty(0)
    check(lambda a, b, e: torch.cat([a, e, b], 1), a, b, e)
    check(lambda a, e: torch.cat([e, a]), a, e, grad=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_stack(dtype, dim):
    a, b = make((3, 4), dtype, seed=1), make((3, 4), dtype, seed=2)
    check(lambda a, b: torch.stack([a, b], dim), a, b, grad=dtype.is_floating_point,
          dtype=dtype)


# ---- flip / roll / repeat --------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_flip_roll(dtype):
    x = make((3, 4, 5), dtype, seed=1, noncontiguous=True)
    g = dtype.is_floating_point
    check(lambda x: torch.flip(x, [0, -1]), x, grad=g, dtype=dtype)
    check(lambda x: torch.roll(x, 2, 1), x, grad=g, dtype=dtype)
    check(lambda x: torch.roll(x, (-1, 7), (0, 2)), x, grad=g, dtype=dtype)
    check(lambda x: torch.roll(x, 5), x, grad=g, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeat_and_tile(dtype):
    x = make((2, 3), dtype, seed=1)
    g = dtype.is_floating_point
    check(lambda x: x.repeat(2, 3), x, grad=g, dtype=dtype)
    check(lambda x: x.repeat(3, 1, 2), x, grad=g, dtype=dtype)
    check(lambda x: x.tile((2,)), x, dtype=dtype)


# ---- padding ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_pad_2d(dtype, mode):
    x = make((2, 3, 5, 6), dtype, seed=1, noncontiguous=True)
    check(lambda x: F.pad(x, (2, 1, 1, 3), mode=mode), x, grad=True, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_pad_1d(dtype, mode):
    x = make((2, 3, 6), dtype, seed=1)
    check(lambda x: F.pad(x, (3, 2), mode=mode), x, grad=True, dtype=dtype)


def test_constant_pad_value_and_crop():
    x = make((3, 4), torch.int64, seed=1)
    check(lambda x: F.pad(x, (1, -1, 2, 0), value=7), x)
    y = make((3, 4), seed=2)
    check(lambda y: F.pad(y, (0, 2, -1, 1), value=-0.5), y, grad=True)


# ---- tril / triu -----------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
@pytest.mark.parametrize("diagonal", [0, 1, -2])
def test_tril_triu(dtype, diagonal):
    x = make((2, 4, 5), dtype, seed=1, noncontiguous=True)
    g = dtype.is_floating_point
    check(lambda x: torch.tril(x, diagonal), x, grad=g, dtype=dtype)
    check(lambda x: torch.triu(x, diagonal), x, grad=g, dtype=dtype)
    check(lambda x: x.clone().tril_(diagonal), x, dtype=dtype)


# ---- sorting ---------------------------------------------------------------

_SEARCH_CASES = {
    "left": lambda s, v: torch.searchsorted(s, v),
    "right": lambda s, v: torch.searchsorted(s, v, right=True),
    "side_right": lambda s, v: torch.searchsorted(s, v, side="right"),
    "out_int32": lambda s, v: torch.searchsorted(s, v, out_int32=True),
    "scalar": lambda s, v: torch.searchsorted(s, 3.0),
    "int_seq_float_scalar": lambda s, v: torch.searchsorted(s.long(), 2.5),
    "batched": lambda s, v: torch.searchsorted(torch.sort(v, dim=1).values, v.flip(1)),
    "mixed_dtypes": lambda s, v: torch.searchsorted(s.bfloat16(), v.double()),
    "sorter": lambda s, v: torch.searchsorted(s.flip(0), v, sorter=torch.arange(s.numel() - 1, -1, -1).to(s.device)),
    "nan_values": lambda s, v: torch.searchsorted(s, v.log()),
    "unsorted_as_cpu": lambda s, v: torch.searchsorted(s.flip(0), v),
    "strided": lambda s, v: torch.searchsorted(s[::2], v.t()[1:]),
    "empty_seq": lambda s, v: torch.searchsorted(s[:0], v),
    "empty_values": lambda s, v: torch.searchsorted(s, v[:, :0]),
    "out": lambda s, v: torch.searchsorted(s, v, out=torch.empty(2, 4, dtype=torch.long, device=s.device)),
    "bucketize": lambda s, v: torch.bucketize(v, s),
    "bucketize_right_int32": lambda s, v: torch.bucketize(v, s, right=True, out_int32=True),
    "bucketize_scalar": lambda s, v: torch.bucketize(4, s),
    "refused_sorter_out_of_range": lambda s, v: torch.searchsorted(s, v, sorter=torch.full_like(s, 9).long()),
    "refused_sorter_dtype": lambda s, v: torch.searchsorted(s, v, sorter=torch.zeros_like(s).int()),
    "refused_side": lambda s, v: torch.searchsorted(s, v, side="middle"),
    "refused_side_and_right": lambda s, v: torch.searchsorted(s, v, side="left", right=True),
    "refused_out_dtype": lambda s, v: torch.searchsorted(s, v, out=torch.empty(2, 4, device=s.device)),
    "refused_bool": lambda s, v: torch.searchsorted(s > 2, v > 2),
    "refused_2d_boundaries": lambda s, v: torch.bucketize(v, s.expand(2, -1)),
    "refused_batch_mismatch": lambda s, v: torch.searchsorted(s.expand(3, -1), v),
}


@pytest.mark.parametrize("case", sorted(_SEARCH_CASES))
def test_searchsorted_and_bucketize_on_the_device(case):
    """searchsorted / bucketize ran on the CPU fallback; on the device they
    follow CPU's binary search step for step (so unsorted rows and NaN give
    CPU's answers), and what CPU refuses raises the same error."""
    from op_testing import no_fallback, same_as_cpu

    def run(d):
        s = torch.tensor([1.0, 3.0, 3.0, 5.0, 7.0, 8.0]).to(d)
        v = torch.tensor([[0.0, 3.0, 4.0, 9.0], [7.0, -1.0, 3.5, 8.0]]).to(d)
        return _SEARCH_CASES[case](s, v)

    if case.startswith("refused"):
        err = same_as_cpu(run)
        assert isinstance(err, RuntimeError), err
        return
    with no_fallback():
        same_as_cpu(run)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, -1])
def test_sort(dtype, descending, dim):
    x = distinct((4, 6), dtype, seed=1)
    check(lambda x: torch.sort(x, dim=dim, descending=descending), x, dtype=dtype)
    check(lambda x: torch.argsort(x, dim=dim, descending=descending), x, dtype=dtype)


def test_sort_stable_ties_nan_and_grad():
    x = torch.tensor([[2.0, float("nan"), 1.0, 2.0, -0.5, float("nan"), 1.0]])
    for desc in (False, True):
        check(lambda x: torch.sort(x, stable=True, descending=desc), x)
    b = make((10,), torch.bool, seed=3)
    check(lambda b: torch.sort(b, stable=True), b)
    y = distinct((3, 5), torch.float32, seed=2)
    check(lambda y: torch.sort(y, 1)[0] * 2, y, grad=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("largest", [True, False])
def test_topk(dtype, largest):
    x = distinct((4, 7), dtype, seed=1)
    check(lambda x: torch.topk(x, 3, dim=1, largest=largest), x, dtype=dtype)
    check(lambda x: torch.topk(x, 2, dim=0, largest=largest), x, dtype=dtype)
    if dtype.is_floating_point:
        check(lambda x: torch.topk(x, 3, largest=largest)[0], x.float(), grad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_kthvalue_median(dtype):
    x = distinct((5, 6), dtype, seed=1)
    check(lambda x: torch.kthvalue(x, 2, dim=1), x)
    check(lambda x: torch.kthvalue(x, 5, dim=0, keepdim=True), x)
    check(lambda x: torch.median(x, dim=1), x)
    check(lambda x: torch.median(x, dim=0, keepdim=True), x)
    check(lambda x: torch.median(x), x)


def test_median_nan():
    x = torch.tensor([[3.0, float("nan"), 1.0, float("nan")], [4.0, 2.0, 1.0, 3.0]])
    check(lambda x: torch.median(x, dim=1), x)
    check(lambda x: torch.median(x), x)


# ---- clone, views and their backwards -------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_clone_and_contiguous(dtype):
    x = make((3, 4), dtype, seed=1, noncontiguous=True)
    check(lambda x: x.clone(), x, grad=dtype.is_floating_point, dtype=dtype)
    check(lambda x: x.contiguous(), x, dtype=dtype)


def test_views_run_without_fallback():
    x = make((4, 6, 2), seed=1)
    check(lambda x: x.split(2, 1), x)
    check(lambda x: x.chunk(3, 0), x)
    check(lambda x: x.narrow(1, 1, 3), x)
    check(lambda x: x[:, None].expand(4, 3, 6, 2), x)
    check(lambda x: x.permute(2, 0, 1), x)
    check(lambda x: x.transpose(0, 1), x)
    check(lambda x: x.unbind(2), x)


def test_select_and_slice_backward():
    x = make((4, 6), seed=1)
    check(lambda x: x[1] * 3, x, grad=True)
    check(lambda x: x[:, -2], x, grad=True)
    check(lambda x: x[1:4, ::2], x, grad=True)
    check(lambda x: x.narrow(1, 2, 3), x, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_nanmedian(dtype):
    x = distinct((4, 5), dtype, seed=3)
    x[0, 1] = float("nan")
    x[2, 1:] = float("nan")
    check(lambda x: torch.nanmedian(x, dim=1), x, dtype=dtype)
    # an all-NaN slice gives NaN; its index is an artifact of CPU's
    # nth_element, so only the value is compared
    y = x.clone()
    y[3] = float("nan")
    check(lambda y: torch.nanmedian(y, dim=1)[0], y, dtype=dtype)
    check(lambda x: torch.nanmedian(x, dim=0, keepdim=True), x, dtype=dtype)
    check(lambda x: torch.nanmedian(x), x, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_views_functional(dtype):
    x = make((3, 4, 5), dtype, seed=1)
    s1 = make((3, 5), dtype, seed=2)
    s2 = make((3, 2, 5), dtype, seed=3)
    check(lambda x, s: torch.select_scatter(x, s, 1, -1), x, s1, dtype=dtype)
    check(lambda x, s: torch.slice_scatter(x, s, 1, 1, None, 2), x, s2, dtype=dtype)
    d = make((4, 3), dtype, seed=4)
    check(lambda x, d: torch.diagonal_scatter(x, d, 1, 0, 2), x, d, dtype=dtype)
    e = make((4, 3), dtype, seed=5)
    check(lambda x, e: torch.diagonal_scatter(x, e, -1, 2, 0), x, e, dtype=dtype)


@pytest.mark.parametrize("op", ["select", "slice", "diagonal"])
def test_scatter_of_a_view_at_an_offset(op):
    # fuzz seed 20064 (compiled, an in-place fill of an input's slice): the
    # *_scatter ops' result keeps its input's offset in a clone of the
    # whole storage; the result storage must hold the offset too.
    base = torch.arange(40, dtype=torch.float32).reshape(8, 5)
    bt = base.to("tpu")
    fns = {"select": lambda x: torch.select_scatter(x, torch.zeros(3), 1, 3),
           "slice": lambda x: torch.slice_scatter(x, torch.zeros(3, 2), 1, 3, 5),
           "diagonal": lambda x: torch.diagonal_scatter(x, torch.zeros(3), 1)}
    fn = fns[op]
    want = fn(base[2:5])
    tpu_fn = {"select": lambda x: torch.select_scatter(x, torch.zeros(3, device="tpu"), 1, 3),
              "slice": lambda x: torch.slice_scatter(x, torch.zeros(3, 2, device="tpu"), 1, 3, 5),
              "diagonal": lambda x: torch.diagonal_scatter(x, torch.zeros(3, device="tpu"), 1)}
    got = tpu_fn[op](bt[2:5])
    assert got.shape == want.shape and got.stride() == want.stride()
    assert got.storage_offset() == want.storage_offset()
    assert torch.equal(got.cpu(), want)
    assert torch.equal(bt.cpu(), base)  # the input is not written


def test_rot90_msort_diagonal_grad():
    x = make((3, 4, 5), seed=1)
    check(lambda x: torch.rot90(x, 1, (1, 2)), x, grad=True)
    check(lambda x: torch.rot90(x, -1, (0, 2)), x, grad=True)
    check(lambda x: torch.msort(x), distinct((4, 3), torch.float32, seed=2))
    check(lambda x: torch.diagonal(x, 1, 1, 2) * 2, x, grad=True)


@pytest.mark.parametrize("shape,dim,size,step", [((5, 4), 0, 2, 1), ((3, 7, 2), 1, 3, 2),
                                                 ((6,), 0, 2, 2), ((2, 5), -1, 5, 1)])
def test_unfold_backward(shape, dim, size, step):
    x = make(shape, seed=1)
    n = (shape[dim] - size) // step + 1
    gshape = list(shape)
    gshape[dim] = n
    g = make(tuple(gshape) + (size,), seed=2)
    check(lambda g: torch.ops.aten.unfold_backward(g, list(shape), dim, size, step), g)
