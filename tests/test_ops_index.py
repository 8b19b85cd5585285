"""index family vs CPU: gather / scatter (all reductions), advanced indexing
and index_put, index_select / add / copy / fill / reduce, take, embedding,
masked_scatter; with gradients and no CPU fallback."""
import pytest
import torch
import torch.nn.functional as F

from op_testing import check, make

FLOATS = [torch.float32, torch.bfloat16]
DTYPES = FLOATS + [torch.int64]


def idx(shape, high, seed=5, negative=False):
    """int64 indices in [0, high), or [-high, high) for the ops that wrap
    negative indices (indexing, take, index_put, index_fill)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-high if negative else 0, high, shape, generator=g)


def perm_idx(n, k, seed=5):
    """k distinct indices in [0, n): for ops whose duplicates race."""
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=g)[:k]


# ---- gather / scatter ------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dtype, dim):
    x = make((4, 5), dtype, seed=1)
    i = idx((3, 4), x.shape[dim])
    check(lambda x, i: torch.gather(x, dim, i), x, i, grad=dtype.is_floating_point, dtype=dtype)


def test_gather_noncontiguous_3d():
    x = make((3, 4, 5), noncontiguous=True)
    i = idx((2, 4, 3), 4, negative=False).transpose(0, 2).contiguous().transpose(0, 2)
    check(lambda x, i: torch.gather(x, 1, i), x, i, grad=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_src_and_value(dtype):
    x = make((4, 5), dtype, seed=1)
    src = make((3, 6), dtype, seed=2)
    # distinct targets per column so the replacement order does not matter
    i = torch.stack([perm_idx(4, 3, seed=s) for s in range(5)], 1)
    # src larger than index: only its leading corner is read
    check(lambda x, i, s: torch.scatter(x, 0, i, s), x, i, src, dtype=dtype)
    check(lambda x, i, s: torch.scatter(x, 0, i, s), x, i, src[:, :5],
          grad=dtype.is_floating_point, dtype=dtype)
    check(lambda x, i: torch.scatter(x, 0, i, 2), x, i, dtype=dtype)
    check(lambda x, i: x.clone().scatter_(0, i, -1.5 if dtype.is_floating_point else -3), x, i,
          dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_reduce_legacy(dtype, reduce):
    x = make((4, 5), dtype, seed=1, low=-2, high=2)
    src = make((6, 5), dtype, seed=2, low=-2, high=2)
    i = idx((6, 5), 4)
    check(lambda x, i, s: torch.scatter(x, 0, i, s, reduce=reduce), x, i, src, dtype=dtype)
    check(lambda x, i: torch.scatter(x, 1, i, 3, reduce=reduce), x, i[:4, :4], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_add(dtype):
    x = make((4, 5), dtype, seed=1)
    src = make((6, 5), dtype, seed=2)
    i = idx((6, 5), 4)
    check(lambda x, i, s: torch.scatter_add(x, 0, i, s), x, i, src,
          grad=dtype.is_floating_point, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(dtype, reduce, include_self):
    x = make((5, 3), dtype, seed=1, low=-3, high=3)
    src = make((7, 3), dtype, seed=2, low=-3, high=3)
    i = idx((7, 3), 5)
    check(lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self),
          x, i, src, dtype=dtype)


def test_scatter_reduce_sum_grad():
    x, src = make((5, 3), seed=1), make((7, 3), seed=2)
    i = idx((7, 3), 5)
    check(lambda x, i, s: x.scatter_reduce(0, i, s, "sum"), x, i, src, grad=True)


def test_scatter_reduce_amax_nan():
    x = make((4,), seed=1)
    src = torch.tensor([1.0, float("nan"), 3.0])
    i = torch.tensor([0, 0, 2])
    check(lambda x, i, s: x.scatter_reduce(0, i, s, "amax"), x, i, src)


# ---- advanced indexing -----------------------------------------------------

INDEX_CASES = {
    "first": lambda x, a, b: x[a],
    "second": lambda x, a, b: x[:, a],
    "last": lambda x, a, b: x[..., b],
    "adjacent": lambda x, a, b: x[a, b],
    "split": lambda x, a, b: x[a, :, b],
    "broadcast": lambda x, a, b: x[a.view(-1, 1), :, b.view(1, -1)],
    "2d_index": lambda x, a, b: x[:, a.view(2, 2)],
}


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
@pytest.mark.parametrize("case", list(INDEX_CASES))
def test_index_tensor(dtype, case):
    x = make((4, 5, 6), dtype, seed=1)
    a = idx((4,), 4, negative=True)
    b = idx((4,), 6, seed=6, negative=True)
    fn = INDEX_CASES[case]
    check(lambda x, a, b: fn(x, a, b), x, a, b, grad=dtype.is_floating_point, dtype=dtype)


def test_index_noncontiguous_and_int32_index():
    x = make((5, 6), noncontiguous=True)
    a = idx((3,), 5, negative=True).to(torch.int32)
    check(lambda x, a: x[a], x, a, grad=True)


def test_index_bool_mask_falls_back_but_matches():
    x = make((4, 5), seed=1)
    m = make((4, 5), torch.bool, seed=2)
    check(lambda x, m: x[m], x, m, allow_fallback=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(dtype, accumulate):
    x = make((4, 5), dtype, seed=1)
    v = make((3, 5), dtype, seed=2)
    a = perm_idx(4, 3) if not accumulate else torch.tensor([0, -1, 0])
    check(lambda x, a, v: x.index_put((a,), v, accumulate=accumulate), x, a, v,
          grad=dtype.is_floating_point and not accumulate, dtype=dtype)
    # in place, broadcast values, two index tensors
    b = torch.tensor([1, 4, -2])
    w = make((3,), dtype, seed=3)

    def put_(x, a, b, w):
        y = x.clone()
        y.index_put_((a, b), w, accumulate=accumulate)
        return y
    check(put_, x, a, b, w, dtype=dtype)
    check(lambda x, a, v: x.clone().index_put_((a,), v[0], accumulate=accumulate), x, a, v,
          dtype=dtype)


def test_setitem_with_tensor_index():
    x = make((4, 5), seed=1)
    v = make((2, 5), seed=2)

    def setitem(x, v):
        y = x.clone()
        y[torch.tensor([3, 1], device=x.device)] = v
        return y
    check(setitem, x, v, grad=True)


# ---- index_* along a dim ---------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(dtype, dim):
    x = make((4, 5, 3), dtype, seed=1, noncontiguous=True)
    i = idx((6,), x.shape[dim])
    check(lambda x, i: torch.index_select(x, dim, i), x, i, grad=dtype.is_floating_point,
          dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_add(dtype):
    x = make((4, 5), dtype, seed=1)
    s = make((4, 3), dtype, seed=2)
    i = torch.tensor([4, 0, 2])
    check(lambda x, i, s: x.index_add(1, i, s), x, i, s, grad=dtype.is_floating_point,
          dtype=dtype)
    check(lambda x, i, s: x.index_add(1, i, s, alpha=2), x, i, s, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_copy_and_fill(dtype):
    x = make((4, 5), dtype, seed=1)
    s = make((2, 5), dtype, seed=2)
    i = torch.tensor([3, 0])
    j = torch.tensor([-1, 0])
    check(lambda x, i, s: x.index_copy(0, i, s), x, i, s, grad=dtype.is_floating_point,
          dtype=dtype)
    check(lambda x, i: x.index_fill(1, i, 7), x, j, grad=dtype.is_floating_point, dtype=dtype)
    check(lambda x, i: x.clone().index_fill_(0, i, -2), x, i, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(dtype, reduce, include_self):
    x = make((5, 3), dtype, seed=1, low=-3, high=3)
    s = make((4, 3), dtype, seed=2, low=-3, high=3)
    i = torch.tensor([0, 4, 0, 2])
    check(lambda x, i, s: x.index_reduce(0, i, s, reduce, include_self=include_self),
          x, i, s, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_take(dtype):
    x = make((3, 4), dtype, seed=1, noncontiguous=True)
    i = idx((2, 3), 12, negative=True)
    check(lambda x, i: torch.take(x, i), x, i, grad=dtype.is_floating_point, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding(dtype, padding_idx):
    w = make((10, 4), dtype, seed=1)
    i = idx((3, 5), 10, negative=False)
    check(lambda w, i: F.embedding(i, w, padding_idx=padding_idx), w, i, grad=True,
          dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_scatter(dtype):
    x = make((3, 4), dtype, seed=1)
    m = make((4,), torch.bool, seed=2)
    src = make((13,), dtype, seed=3)
    check(lambda x, m, s: x.masked_scatter(m, s), x, m, src, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_put(dtype, accumulate):
    x = make((3, 4), dtype, seed=1)
    s = make((5,), dtype, seed=2)
    i = perm_idx(12, 5) - 6 if not accumulate else torch.tensor([0, -1, 0, 5, 5])
    check(lambda x, i, s: x.put(i, s, accumulate=accumulate), x, i, s,
          grad=dtype.is_floating_point, dtype=dtype)


def test_take_along_dim_and_one_hot():
    x = make((3, 4, 5), seed=1)
    i = idx((3, 2, 5), 4)
    check(lambda x, i: torch.take_along_dim(x, i, dim=1), x, i, grad=True)
    check(lambda i: F.one_hot(i, 6), idx((2, 3), 6))


def test_setitem_scalar_and_broadcast():
    # a shape no other test here indexes: the engine's cache-key bug (see
    # POSITIONS_KEYED) would otherwise pair x[:, i] with an earlier x[i]
    x = make((5, 7), seed=1)

    def set_(x):
        y = x.clone()
        i = torch.tensor([2, -1], device=x.device)
        y[i] = 0.5
        y[:, i] = y[:, i] * 2
        return y
    check(set_, x, grad=True)
