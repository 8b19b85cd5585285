"""index family vs CPU: gather / scatter (all reductions), advanced indexing
and index_put, index_select / add / copy / fill / reduce, take, embedding,
masked_scatter; the data-dependent shapes (nonzero, masked_select, unique*,
boolean-mask indexing) with one host sync each; with gradients and no CPU
fallback."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu
from op_testing import check, make, no_fallback, same_as_cpu, to_tpu

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


# ---- data-dependent shapes: one host sync each ------------------------------
# A padded program computes the result and its size; reading the size is the
# op's one host sync (torchtpu.metrics "host_syncs").

DYN_DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.bool]
DYN_SHAPES = [(), (7,), (2, 3, 4), (0, 3)]


def host_syncs():
    return torchtpu.metrics.metrics().get("host_syncs", 0)


def check_synced(fn, *inputs, syncs=1, **kwargs):
    """check() against CPU (no fallback), then one more tpu run that must
    read the device exactly `syncs` times."""
    got = check(fn, *inputs, **kwargs)
    tpu_inputs = to_tpu(list(inputs))
    before = host_syncs()
    fn(*tpu_inputs)
    assert host_syncs() - before == syncs
    return got


def noncontig(x):
    return x.transpose(-1, -2).contiguous().transpose(-1, -2) if x.dim() >= 2 else x


def sparse(shape, dtype, seed=0, fill=None, nc=False):
    """Values with about half zeros (fill=0 / 1: none / all nonzero)."""
    keep = make(shape, torch.bool, seed=seed + 100)
    if fill is not None:
        keep = torch.full(shape, bool(fill))
    x = make(shape, dtype, seed=seed) if dtype != torch.bool else torch.ones(shape, dtype=dtype)
    if dtype != torch.bool:
        x = torch.where(x == 0, torch.ones_like(x), x)
    x = torch.where(keep, x, torch.zeros_like(x))
    return noncontig(x) if nc else x


def dupes(shape, dtype, seed=0, nc=False):
    """Few distinct values, so unique has repeats to find."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        x = torch.randint(0, 2, shape, generator=g).bool()
    else:
        x = torch.randint(-3, 4, shape, generator=g).to(dtype)
    return noncontig(x) if nc else x


@pytest.mark.parametrize("dtype", DYN_DTYPES)
@pytest.mark.parametrize("shape", DYN_SHAPES)
@pytest.mark.parametrize("fill", [None, 0, 1])
def test_nonzero(dtype, shape, fill):
    x = sparse(shape, dtype, fill=fill)
    check_synced(torch.nonzero, x)
    check_synced(torch.argwhere, x)
    check_synced(lambda x: torch.nonzero(x, as_tuple=True), x)


@pytest.mark.parametrize("dtype", DYN_DTYPES)
def test_nonzero_noncontiguous_and_out(dtype):
    x = sparse((5, 6), dtype, nc=True)
    assert not x.is_contiguous()
    check_synced(torch.nonzero, x)
    check_synced(lambda x: torch.nonzero(x[:, 1::2]), x)

    def out(x):
        o = torch.empty(0, dtype=torch.int64, device=x.device)
        torch.nonzero(x, out=o)
        return o
    check_synced(out, x)


def layout(r):
    """(shape, strides, offset) of a tensor or of each of a tuple's."""
    return [(tuple(t.shape), t.stride(), t.storage_offset())
            for t in (r if isinstance(r, (tuple, list)) else (r,))]


@pytest.mark.parametrize("shape", DYN_SHAPES + [(1, 1), (3, 1, 2), (1, 5)])
@pytest.mark.parametrize("fill", [None, 0, 1])
def test_nonzero_is_column_major_like_cpu(shape, fill):
    # CPU's nonzero is (n, ndim) with strides (1, n); where()'s tensors are
    # its columns (stride 1 at offsets 0, n, ...).
    x = sparse(shape, torch.float32, fill=fill)
    fns = [torch.nonzero, torch.argwhere, lambda x: torch.nonzero(x, as_tuple=True)]
    if x.dim():
        fns.append(torch.where)
    for fn in fns:
        want = fn(x)
        got = fn(x.to("tpu"))
        assert layout(got) == layout(want)
        assert all(torch.equal(g.cpu(), w) for g, w in zip(
            got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)))


def test_nonzero_column_major_example():
    a = torch.tensor([[1, 0, 2], [0, 3, 0]])
    assert torch.nonzero(a.to("tpu")).stride() == torch.nonzero(a).stride() == (1, 3)
    assert [(t.stride(), t.storage_offset()) for t in torch.where(a.to("tpu"))] == [((1,), 0), ((1,), 3)]


def test_nonzero_out_keeps_or_restrides_like_cpu():
    # An out of exactly the result's shape keeps its strides; any other is
    # resized and becomes column-major (with CPU's resize warning when it
    # had elements).
    x = torch.tensor([[1, 0, 2], [0, 3, 0]])
    outs = [lambda d: torch.empty(0, dtype=torch.int64, device=d),
            lambda d: torch.empty(3, 2, dtype=torch.int64, device=d),
            lambda d: torch.empty(2, 3, dtype=torch.int64, device=d).t(),
            lambda d: torch.empty(6, 2, dtype=torch.int64, device=d)[::2],
            lambda d: torch.empty(5, 2, dtype=torch.int64, device=d),
            lambda d: torch.empty(10, dtype=torch.int64, device=d)[::2]]
    cases = [(x, o) for o in outs] + [(torch.tensor(5), lambda d: torch.empty(2, dtype=torch.int64, device=d)),
                                     (torch.tensor(5), lambda d: torch.empty(1, 0, dtype=torch.int64, device=d)),
                                     (torch.tensor(0), lambda d: torch.empty(0, dtype=torch.int64, device=d))]
    for inp, make_out in cases:
        def run(d):
            o = make_out(d)
            r = torch.nonzero(inp.to(d), out=o)
            assert r is o
            return o
        got = same_as_cpu(run, warns=True)
        assert layout(got) == layout(run("cpu")), (inp, layout(got))


def test_nonzero_out_of_another_dtype_raises_like_cpu():
    x = torch.tensor([[1, 0, 2], [0, 3, 0]])
    same_as_cpu(lambda d: torch.nonzero(x.to(d), out=torch.empty(0, device=d)))
    same_as_cpu(lambda d: torch.nonzero(x.to(d), out=torch.empty(3, 2, device=d)))


def test_nonzero_nan_and_static():
    x = torch.tensor([[0.0, float("nan")], [-0.0, 2.0]])
    check_synced(torch.nonzero, x)
    for size in (1, 2, 5):
        check_synced(lambda x: torch.nonzero_static(x, size=size, fill_value=-7), x, syncs=0)


MASKED_SELECT_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (3, 4)), ((), (2, 3)),
                        ((2, 3), ()), ((2, 1, 4), (3, 1)), ((0, 4), (4,))]


@pytest.mark.parametrize("dtype", DYN_DTYPES)
@pytest.mark.parametrize("shapes", MASKED_SELECT_SHAPES)
def test_masked_select(dtype, shapes):
    x = make(shapes[0], dtype, seed=1)
    m = make(shapes[1], torch.bool, seed=2)
    check_synced(torch.masked_select, x, m)


@pytest.mark.parametrize("dtype", DYN_DTYPES)
@pytest.mark.parametrize("fill", [0, 1])
def test_masked_select_all_or_none_noncontiguous(dtype, fill):
    x = make((4, 5), dtype, seed=1, noncontiguous=True)
    m = noncontig(torch.full((4, 5), bool(fill)))
    check_synced(torch.masked_select, x, m)
    check_synced(lambda x, m: torch.masked_select(x.t(), m.t()), x, m)

    def out(x, m):
        o = torch.empty(0, dtype=x.dtype, device=x.device)
        torch.masked_select(x, m, out=o)
        return o
    check_synced(out, x, m)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((4,), (3, 4)), ((3, 4), (4,))])
def test_masked_select_backward(dtype, shapes):
    x = make(shapes[0], dtype, seed=1)
    m = make(shapes[1], torch.bool, seed=2)
    check(torch.masked_select, x, m, grad=True, dtype=dtype)
    # forward reads the count once; backward (masked_scatter) not at all
    xt, mt = to_tpu(x).requires_grad_(), to_tpu(m)
    before = host_syncs()
    torch.masked_select(xt, mt).sum().backward()
    assert host_syncs() - before == 1 and xt.grad is not None


UNIQUE_FLAGS = [(False, False), (True, False), (False, True), (True, True)]


@pytest.mark.parametrize("dtype", DYN_DTYPES)
@pytest.mark.parametrize("shape", DYN_SHAPES)
@pytest.mark.parametrize("flags", UNIQUE_FLAGS)
def test_unique(dtype, shape, flags):
    inverse, counts = flags
    x = dupes(shape, dtype, seed=3)
    for sorted_ in (True, False):
        check_synced(lambda x: torch.unique(x, sorted=sorted_, return_inverse=inverse,
                                            return_counts=counts), x)
    check_synced(lambda x: torch._unique2(x, True, inverse, counts), x)
    check_synced(lambda x: torch.unique_consecutive(x, return_inverse=inverse,
                                                    return_counts=counts), x)
    check_synced(lambda x: torch.ops.aten.unique_consecutive(x, inverse, counts, None), x)


@pytest.mark.parametrize("dtype", DYN_DTYPES)
def test_unique_noncontiguous_and_nan(dtype):
    x = dupes((5, 6), dtype, seed=4, nc=True)
    assert not x.is_contiguous()
    check_synced(lambda x: torch.unique(x, return_inverse=True, return_counts=True), x)
    check_synced(lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True), x)
    check_synced(lambda x: torch.unique(x.t()[1:]), x)
    if dtype.is_floating_point:
        y = torch.tensor([2.0, float("nan"), 1.0, float("nan"), float("nan"), 2.0]).to(dtype)
        check_synced(lambda x: torch.unique(x, return_inverse=True, return_counts=True), y)
        check_synced(lambda x: torch.unique_consecutive(x, return_inverse=True,
                                                        return_counts=True), y)


@pytest.mark.parametrize("dtype", DYN_DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("nc", [False, True])
def test_unique_dim(dtype, dim, nc):
    # rows repeat, so there are duplicates along every dim
    x = dupes((3, 4, 2), dtype, seed=5)
    x = torch.cat([x, x.flip(0)[:2]], 0).repeat(1, 2, 1)
    x = noncontig(x) if nc else x
    check_synced(lambda x: torch.unique(x, dim=dim, return_inverse=True, return_counts=True), x)
    check_synced(lambda x: torch.unique(x, dim=dim), x)
    check_synced(lambda x: torch.unique_consecutive(x, dim=dim, return_inverse=True,
                                                    return_counts=True), x)
    check_synced(lambda x: torch.unique_consecutive(x, dim=dim), x)


def test_unique_1d_dim():
    x = dupes((9,), torch.int64, seed=6)
    check_synced(lambda x: torch.unique(x, dim=0, return_inverse=True, return_counts=True), x)
    check_synced(lambda x: torch.unique_consecutive(x, dim=0, return_counts=True), x)
    check_synced(lambda x: torch.unique_consecutive(x, dim=-1, return_inverse=True), x)


MASK_INDEX_CASES = {
    "full": lambda x, m, i: x[m],
    "leading": lambda x, m, i: x[m[:, :, 0]],
    "first_dim": lambda x, m, i: x[m[:, 0, 0]],
    "inner": lambda x, m, i: x[:, m[0, :, 0]],
    "last": lambda x, m, i: x[..., m[0, 0, :]],
    "with_index": lambda x, m, i: x[m[:, 0, 0], i],
}


@pytest.mark.parametrize("dtype", DYN_DTYPES)
@pytest.mark.parametrize("case", list(MASK_INDEX_CASES))
@pytest.mark.parametrize("fill", [None, 0, 1])
def test_index_bool_mask(dtype, case, fill):
    x = make((3, 4, 5), dtype, seed=1, noncontiguous=case == "full")
    m = make((3, 4, 5), torch.bool, seed=2) if fill is None else torch.full((3, 4, 5), bool(fill))
    i = torch.tensor([2])  # broadcasts against any count (a 0-d one would be .item()'d)
    fn = MASK_INDEX_CASES[case]
    check_synced(lambda x, m: fn(x, m, i.to(x.device)), x, m, grad=dtype.is_floating_point,
                 dtype=dtype)


@pytest.mark.parametrize("dtype", DYN_DTYPES)
def test_index_two_bool_masks(dtype):
    # both masks select two positions, so their index tensors broadcast
    x = make((3, 4, 5), dtype, seed=1)
    a = torch.tensor([True, False, True])
    b = torch.tensor([False, True, False, False, True])
    # one host sync per mask
    check_synced(lambda x, a, b: x[a, :, b], x, a, b, syncs=2, grad=dtype.is_floating_point,
                 dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_index_bool_mask_backward_syncs(dtype):
    x = make((4, 5), dtype, seed=1)
    m = make((4, 5), torch.bool, seed=2)
    xt, mt = to_tpu(x).requires_grad_(), to_tpu(m)
    before = host_syncs()
    (xt[mt] * 2).sum().backward()
    # forward reads its count; backward's index_put reads the mask's again
    assert host_syncs() - before == 2
    assert torch.equal(xt.grad.cpu(), (m * 2).to(dtype))


@pytest.mark.parametrize("dtype", DYN_DTYPES)
@pytest.mark.parametrize("fill", [None, 0, 1])
def test_setitem_bool_mask(dtype, fill):
    x = make((3, 4), dtype, seed=1)
    m = make((3, 4), torch.bool, seed=2) if fill is None else torch.full((3, 4), bool(fill))
    one = True if dtype == torch.bool else 3

    def set_scalar(x, m):
        y = x.clone()
        y[m] = one
        return y
    # one value under a mask is a masked_fill_: no sync at all
    check_synced(set_scalar, x, m, syncs=0, dtype=dtype)
    check_synced(lambda x, m: x.clone().index_put_((m,), torch.tensor(one).to(x.device)), x, m,
                 syncs=0, dtype=dtype)
    check_synced(lambda x, m: x.index_put((m,), torch.tensor(one).to(x.device)), x, m,
                 syncs=0, dtype=dtype)

    def set_rows(x, m):
        y = x.clone()
        y[m[:, 0]] = x[0]  # a row broadcast over the selected rows
        return y
    check_synced(set_rows, x, m, dtype=dtype)

    def set_values(x, m):
        y = x.clone()
        y[m] = x[m].flip(0)
        return y
    check_synced(set_values, x, m, syncs=2, dtype=dtype)

    def set_inner(x, m):
        y = x.clone()
        y[:, m[0]] = one
        return y
    check_synced(set_inner, x, m, syncs=0, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_index_put_bool_mask_accumulate(dtype):
    x = make((3, 4), dtype, seed=1)
    m = make((3, 4), torch.bool, seed=2)
    v = make((int(m.sum()),), dtype, seed=3)
    check_synced(lambda x, m, v: x.index_put((m,), v, accumulate=True), x, m, v, dtype=dtype)
    check_synced(lambda x, m: x.clone().index_put_((m,), torch.tensor(2, dtype=dtype).to(x.device),
                                                   accumulate=True), x, m, dtype=dtype)


def test_index_cpu_mask_on_tpu_tensor():
    x = make((4, 5), seed=1)
    m = make((4, 5), torch.bool, seed=2)
    xt = to_tpu(x)
    before = host_syncs()
    got = xt[m[:, 0]]  # the mask stays on the CPU: expanded there, no device read
    assert host_syncs() == before
    assert torch.equal(got.cpu(), x[m[:, 0]])


# --- Found by the random-program fuzzer (tests/fuzz_programs.py); xfail
# until fixed, then the tag leaves KNOWN_MISMATCH_TAGS there.

def test_fuzz_nonzero_strides_match_cpu():
    a = torch.tensor([[[-5, -6]]])
    assert torch.nonzero(a.to("tpu")).stride() == torch.nonzero(a).stride()
    m = torch.tensor([[False, False, True, True]])
    assert torch.where(m.to("tpu"))[0].stride() == torch.where(m)[0].stride()


def test_fuzz_index_put_of_other_dtype_raises_like_cpu():
    for device in ("cpu", "tpu"):
        a = torch.tensor([[[[-2.0]]]], device=device)
        with torchtpu.eager_mode("strict"), pytest.raises(RuntimeError, match="dtypes match"):
            a.transpose(2, 1).index_put_((torch.tensor([0, 0, -1], device=device),),
                                         torch.as_tensor(1, device=device), accumulate=True)
            a.cpu()


@pytest.mark.parametrize("mode", ["strict", "debug", "defer_and_fuse"])
def test_fuzz_index_select_out_of_range_raises_like_cpu(mode):
    # CPU: a RuntimeError for dim 1 of an n-d self (its dim-1 kernel) and
    # for an empty n-d self, IndexError otherwise; the device raises at the
    # op (debug) or at the next host read
    cases = [
        # fuzz seed 500663: the last dim of a 4-d self is no dim-1 kernel
        lambda d: torch.tensor([[[[-1]]]], device=d).index_select(-1, torch.tensor([0, -2], device=d)),
        lambda d: torch.zeros(2, 3, 4, device=d).index_select(2, torch.tensor([4], device=d)),
        lambda d: torch.zeros(2, 3, 4, device=d).index_select(1, torch.tensor([3], device=d)),
        lambda d: torch.zeros(0, 3, device=d).index_select(1, torch.tensor([5], device=d)),
        lambda d: torch.zeros(0, 3, device=d).index_select(0, torch.tensor([5], device=d)),
        lambda d: torch.zeros(2, 0, device=d).index_select(0, torch.tensor([5], device=d)),
        lambda d: torch.zeros(0, 3, 4, device=d).index_select(2, torch.tensor([7], device=d)),
        lambda d: torch.zeros(0, device=d).index_select(0, torch.tensor([1], device=d)),
        lambda d: torch.tensor([1.0], dtype=torch.bfloat16, device=d).index_select(
            0, torch.tensor([-2, 2, 1, -3], device=d)),
        lambda d: torch.zeros(3, device=d).index_select(0, torch.tensor([-1], device=d)),
        lambda d: torch.zeros(2, 3, device=d).index_select(0, torch.tensor([2], device=d)),
        lambda d: torch.zeros(2, 3, device=d).index_select(1, torch.tensor([0, 3], device=d)),
        lambda d: torch.zeros(2, 3, dtype=torch.int64, device=d).index_select(-1, torch.tensor([-1], device=d)),
        lambda d: torch.tensor(1.5, device=d).index_select(0, torch.tensor([1], device=d)),
        lambda d: torch.zeros(3, device=d).index_select(0, torch.tensor([[1, 2]], device=d)),
        lambda d: torch.zeros(3, device=d).index_select(0, torch.tensor([0, 2], device=d)),
        lambda d: torch.tensor(1.5, device=d).index_select(0, torch.tensor([0], device=d)),
        lambda d: F.embedding(torch.tensor([[5, 0]], device=d), torch.zeros(3, 2, device=d)),
        lambda d: F.embedding(torch.tensor([-1], device=d), torch.zeros(3, 2, device=d)),
        lambda d: F.embedding(torch.tensor([2, 0], device=d), torch.ones(3, 2, device=d)),
    ]
    with torchtpu.eager_mode(mode):
        for fn in cases:
            err = same_as_cpu(lambda d: fn(d).cpu())
            if isinstance(err, Exception):
                # the message too, without debug's note
                assert str(err).split(" (torchtpu")[0] == str(_cpu_error(fn)).split(" (torchtpu")[0]
        # a later valid op is not blamed for an earlier error, once raised
        with pytest.raises(IndexError):
            x = torch.zeros(3, device="tpu").index_select(0, torch.tensor([7], device="tpu"))
            (x + 1).cpu()
        assert torch.equal(torch.arange(3.0, device="tpu").index_select(0, torch.tensor([2], device="tpu")).cpu(),
                           torch.tensor([2.0]))


def _cpu_error(fn):
    try:
        fn("cpu")
    except Exception as e:  # noqa: BLE001
        return e
    return None


def test_fuzz_debug_indexing_an_expanded_tensor():
    a = torch.tensor(0.75, dtype=torch.bfloat16)
    want = a.sum().expand(2)[torch.tensor([-1, -1, 1, 0])]
    with torchtpu.eager_mode("debug"):
        t = a.to("tpu").sum().expand(2)
        got = t[torch.tensor([-1, -1, 1, 0], device="tpu")].cpu()
    assert torch.equal(got, want)


def test_fuzz_debug_scatter_add_of_an_expanded_tensor():
    def f(a, device):
        v = torch.argmin(a, dim=0).unsqueeze(0).expand(3, -1)
        return v.scatter_add(1, torch.tensor([[0], [0], [0]], device=device), v)

    a = torch.tensor([0.75, 1.0])
    want = f(a, "cpu")
    with torchtpu.eager_mode("debug"):
        got = f(a.to("tpu"), "tpu").cpu()
    assert torch.equal(got, want)


# ---- edge cases that must behave as on the CPU (issue 21, item 4) --------


@pytest.mark.parametrize("case", ["gather_zero_dim", "gather_zero_index", "gather_from_empty",
                                  "take_along_dim", "index_zero_dim", "index_select_zero",
                                  "gather_out"])
def test_indexing_over_zero_size_dims(case):
    L = torch.long
    fns = {
        "gather_zero_dim": lambda d: torch.gather(torch.zeros(3, 0, device=d), 1,
                                                  torch.zeros(3, 0, dtype=L, device=d)),
        "gather_zero_index": lambda d: torch.gather(torch.ones(3, 4, device=d), 1,
                                                    torch.zeros(3, 0, dtype=L, device=d)),
        "gather_from_empty": lambda d: torch.gather(torch.zeros(0, 4, device=d), 0,
                                                    torch.zeros(0, 4, dtype=L, device=d)),
        "take_along_dim": lambda d: torch.take_along_dim(torch.zeros(3, 0, device=d),
                                                         torch.zeros(3, 0, dtype=L, device=d), 1),
        "index_zero_dim": lambda d: torch.zeros(3, 0, device=d)[torch.tensor([0, 2], device=d)],
        "index_select_zero": lambda d: torch.zeros(3, 0, device=d).index_select(
            0, torch.tensor([0, 2], device=d)),
        "gather_out": lambda d: torch.gather(torch.zeros(2, 0, device=d), 1,
                                             torch.zeros(2, 0, dtype=L, device=d),
                                             out=torch.ones(5, device=d)),
    }
    same_as_cpu(fns[case])


@pytest.mark.parametrize("case", ["fill_", "zero_", "masked_fill_", "masked_fill_tensor",
                                  "masked_fill_2d_mask", "index_fill_", "index_put_",
                                  "index_put_acc", "index_put_acc_repeated", "index_put_acc_mask",
                                  "index_put_acc_two", "setitem", "fill_tensor", "add_", "copy_",
                                  "index_copy_", "scatter_", "clamp_"])
def test_writes_into_expanded_self(case):
    # The CPU allows fill_/zero_ (and, with a deprecation warning,
    # masked_fill_/index_fill_/index_put_) on an expanded tensor and writes
    # its base; other in-place ops raise.
    I = torch.tensor  # noqa: E741
    fns = {
        "fill_": lambda t, d: t.fill_(2.),
        "zero_": lambda t, d: t.zero_(),
        "masked_fill_": lambda t, d: t.masked_fill_(I([True, False, True], device=d), 5.),
        "masked_fill_tensor": lambda t, d: t.masked_fill_(I([True, False, True], device=d),
                                                          I(5.)),
        # mask true in some rows only: any true element writes its location
        "masked_fill_2d_mask": lambda t, d: t.masked_fill_(
            I([[False, False, True], [False, False, False], [True, False, False],
               [False, False, False]], device=d), 5.),
        "index_fill_": lambda t, d: t.index_fill_(1, I([0], device=d), 5.),
        "index_put_": lambda t, d: t.index_put_((I([0], device=d),), I(5., device=d)),
        "index_put_acc": lambda t, d: t.index_put_((I([0], device=d),), I(5., device=d),
                                                   accumulate=True),
        # CPU adds every update into memory: the rows an expand shares sum
        # all of them (fuzz seed 50086)
        "index_put_acc_repeated": lambda t, d: t.index_put_(
            (I([1, 0, 0, 3], device=d),), I([10., 20., 30.], device=d), accumulate=True),
        "index_put_acc_mask": lambda t, d: t.index_put_(
            (I([[True, False, True], [False, False, True], [False, False, False],
                [True, True, True]], device=d),), I(5., device=d), accumulate=True),
        "index_put_acc_two": lambda t, d: t.index_put_(
            (I([0, 0, 2], device=d), I([1, 2, 1], device=d)), I([5., 6., 7.], device=d),
            accumulate=True),
        "setitem": lambda t, d: t.__setitem__(0, 3.),
        "fill_tensor": lambda t, d: t.fill_(I(2., device=d)),
        "add_": lambda t, d: t.add_(1),
        "copy_": lambda t, d: t.copy_(torch.ones(4, 3, device=d)),
        "index_copy_": lambda t, d: t.index_copy_(0, I([0], device=d),
                                                  torch.ones(1, 3, device=d) * 7),
        "scatter_": lambda t, d: t.scatter_(0, torch.zeros(1, 3, dtype=torch.long, device=d), 7.),
        "clamp_": lambda t, d: t.clamp_(0, .5),
    }

    def run(d):
        base = torch.ones(3, device=d)
        fns[case](base.expand(4, 3), d)
        return base
    same_as_cpu(run, warns=True)


@pytest.mark.parametrize("out_dtype", [torch.int64, torch.float64, torch.float32])
def test_masked_select_out_dtype_as_cpu(out_dtype):
    # CPU refuses an out= of another dtype than self's (RuntimeError)
    def run(d):
        out = torch.empty(0, dtype=out_dtype, device=d)
        torch.masked_select(torch.tensor([1.5, -2.0, 3.0], device=d),
                            torch.tensor([True, False, True], device=d), out=out)
        return out
    same_as_cpu(run)


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_synchronize_raises_a_pending_index_error(mode):
    # an out-of-range index raises at the next host read, or at a
    # synchronize (as CUDA's device-side asserts do); later ops are fine
    with torchtpu.eager_mode(mode):
        x = torch.zeros(3, device="tpu").index_select(0, torch.tensor([7], device="tpu"))
        with pytest.raises(IndexError):
            torch.tpu.synchronize()
        del x
        torch.tpu.synchronize()
        loss = F.cross_entropy(torch.zeros(2, 3, device="tpu"), torch.tensor([0, 3], device="tpu"))
        with pytest.raises(IndexError, match="Target 3 is out of bounds"):
            torch.tpu.synchronize()
        assert torch.equal(torch.arange(3, device="tpu").cpu(), torch.arange(3))
        del loss


def _outcome(fn):
    try:
        r = fn()
        return ("ok", r.cpu().tolist(), r.dtype)
    except RuntimeError as e:
        return ("raises", type(e), str(e).split(",")[0])


@pytest.mark.parametrize("case", ["long_index_cpu_0d", "long_index_cpu_0d_fits", "long_index_tpu_1d",
                                  "mask_tpu_0d_overflows", "mask_tpu_0d_fits", "mask_tpu_0d_float",
                                  "mask_cpu_0d_overflows", "mask_accumulate"])
def test_index_put_values_of_another_dtype_as_cpu(case):
    # CPU refuses values of another dtype ("Index put requires the source and
    # destination dtypes match"), except one value under one mask, which it
    # fills as value.item() with the overflow check. A 0-dim CPU values
    # tensor was read as a number of self's dtype: no error, 300 -> 44.
    def run(d):
        x = torch.zeros(3, dtype=torch.uint8, device=d)
        i = torch.tensor([0], device=d)
        m = torch.tensor([True, False, True], device=d)
        v = {"long_index_cpu_0d": (i, torch.tensor(300)),
             "long_index_cpu_0d_fits": (i, torch.tensor(3)),
             "long_index_tpu_1d": (i, torch.tensor([3], device=d)),
             "mask_tpu_0d_overflows": (m, torch.tensor(300, device=d)),
             "mask_tpu_0d_fits": (m, torch.tensor(3, device=d)),
             "mask_tpu_0d_float": (m, torch.tensor(2.5, device=d)),
             "mask_cpu_0d_overflows": (m, torch.tensor(300)),
             "mask_accumulate": (m, torch.tensor(3, device=d))}[case]
        return _outcome(lambda: x.index_put_((v[0],), v[1], accumulate=case == "mask_accumulate"))

    want = run("cpu")
    assert run("tpu") == want


_INDEX_LAYOUTS = {
    # fuzz seed 1303586: a permuted bool self, one index on a middle dim
    "permuted_bool_middle": lambda x, i: (x > 0).permute(2, 1, 0).transpose(2, 1)[:, i[:3]],
    "transposed_first": lambda x, i: x.transpose(0, 2)[i[:2]],
    "transposed_last": lambda x, i: x.permute(2, 0, 1)[..., i[:4]],
    "two_adjacent": lambda x, i: x.permute(1, 2, 0)[i[:2], i[1:3]],
    "non_adjacent_to_front": lambda x, i: x.permute(0, 2, 1)[i[:2], :, i[1:3]],
    "expanded_self": lambda x, i: x[:1].expand(4, 3, 4)[:, i[:3]],
    "sliced_self": lambda x, i: x[:, ::2].transpose(0, 1)[:, i[:2]],
    "index_2d": lambda x, i: x.transpose(1, 2)[:, i[:4].view(2, 2)],
    "int32_index": lambda x, i: x.permute(2, 1, 0)[:, i[:3].int()],
    "broadcast_indices": lambda x, i: x.permute(1, 0, 2)[i[:2].view(2, 1), i[:3].view(1, 3)],
}


@pytest.mark.parametrize("case", sorted(_INDEX_LAYOUTS))
def test_advanced_index_result_has_cpu_strides(case):
    """x[..., idx] results get CPU's layout: its TensorIterator over self
    with the indexed dims at stride 0, not the meta kernel's order."""
    def run(d):
        x = torch.arange(48.).reshape(4, 3, 4).to(d)
        i = torch.tensor([0, 2, 1, 0]).to(d)
        r = _INDEX_LAYOUTS[case](x, i)
        return r.shape, r.stride(), r.cpu()

    want = run("cpu")
    with no_fallback():
        got = run("tpu")
    assert got[:2] == want[:2]
    assert torch.equal(got[2], want[2])


@pytest.mark.parametrize("shape,dim,dtype", [((6, 100), 0, torch.float32), ((5, 4, 40), 1, torch.int64),
                                             ((70, 8), 1, torch.bool), ((0, 3), 0, torch.float32)])
def test_unique_dim_of_wide_and_empty_slices(shape, dim, dtype):
    """unique(dim=) of slices wider than one sort's 64 keys, and of no
    slices, ran on the CPU fallback (144 sweep samples): wide slices now
    sort one stable pass per element, least significant first."""
    from op_testing import no_fallback, same_as_cpu
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 2, shape, generator=g).to(dtype)
    if x.numel():
        x.select(dim, 1).copy_(x.select(dim, 3))
    with no_fallback():
        same_as_cpu(lambda d: torch.unique(x.to(d), dim=dim, return_inverse=True, return_counts=True))
        same_as_cpu(lambda d: torch.unique_consecutive(x.to(d), dim=dim, return_inverse=True, return_counts=True))


_OOB = {
    "gather": lambda d, T: torch.gather(torch.zeros(3, 2, device=d), 1, T([[0, 23]])),
    "gather_negative": lambda d, T: torch.gather(torch.zeros(3, 2, device=d), 1, T([[0, -1]])),
    "scatter": lambda d, T: torch.zeros(3, 2, device=d).scatter(0, T([[5, 0]]), torch.ones(1, 2, device=d)),
    "scatter_value": lambda d, T: torch.zeros(3, 2, device=d).scatter_(0, T([[-1, 0]]), 1.0),
    "scatter_add": lambda d, T: torch.zeros(3, 2, device=d).scatter_add(0, T([[5, 0]]), torch.ones(1, 2, device=d)),
    "scatter_reduce": lambda d, T: torch.zeros(3, 2, device=d).scatter_reduce(0, T([[5, 0]]), torch.ones(1, 2, device=d), "sum"),
    "take": lambda d, T: torch.take(torch.zeros(3, 2, device=d), T([50])),
    "take_negative": lambda d, T: torch.take(torch.zeros(3, 2, device=d), T([-7])),
    "index": lambda d, T: torch.zeros(3, 2, device=d)[T([7])],
    "index_negative": lambda d, T: torch.zeros(3, 2, device=d)[:, T([-3])],
    "index_put": lambda d, T: torch.zeros(3, 2, device=d).index_put_((T([5]),), torch.tensor(1.0, device=d)),
    "index_add": lambda d, T: torch.zeros(3, 2, device=d).index_add(0, T([-1]), torch.ones(1, 2, device=d)),
    "index_copy": lambda d, T: torch.zeros(3, 2, device=d).index_copy(0, T([5]), torch.ones(1, 2, device=d)),
    "index_fill": lambda d, T: torch.zeros(3, 2, device=d).index_fill(0, T([5]), 1.0),
    "put": lambda d, T: torch.zeros(3, 2, device=d).put_(T([9]), torch.ones(1, device=d)),
}


@pytest.mark.parametrize("case", sorted(_OOB))
def test_out_of_range_indices_raise_like_cpu(case):
    """XLA clamps an out-of-range index where CPU raises: gather, scatter*,
    take, put_, index / index_put_ and index_add / copy / fill returned
    values read at a clamped index with no error. Each now leaves a device
    flag read before the next host read, which raises CPU's error."""
    from op_testing import same_as_cpu
    err = same_as_cpu(lambda d: _OOB[case](d, lambda v: torch.tensor(v, device=d)).cpu())
    assert "out of" in str(err)


def test_in_range_negative_indices_do_not_raise():
    from op_testing import same_as_cpu
    x = torch.arange(6.0).reshape(3, 2)
    same_as_cpu(lambda d: torch.take(x.to(d), torch.tensor([-6, 5], device=d)))
    same_as_cpu(lambda d: x.to(d)[torch.tensor([-3, 2], device=d)])
    same_as_cpu(lambda d: x.to(d).index_fill(0, torch.tensor([-1], device=d), 9.0))


_OVERLAP = {
    "cat": lambda x, d: torch.cat([x[:2], x[2:]], out=x),
    "stack": lambda x, d: torch.stack([x[0], x[1]], out=x[:2]),
    "gather": lambda x, d: torch.gather(x, 1, torch.tensor([[0, 1, 2, 3]] * 4, device=d), out=x),
    "index_select": lambda x, d: torch.index_select(x, 0, torch.tensor([0, 1, 2, 3], device=d), out=x),
    "masked_select": lambda x, d: torch.masked_select(x, torch.ones(4, 4, dtype=torch.bool, device=d),
                                                      out=x.view(-1)),
}


@pytest.mark.parametrize("case", sorted(_OVERLAP))
def test_out_that_is_an_input_raises_like_cpu(case):
    """cat, stack, gather, index_select and masked_select refuse an out= that
    shares memory with an input on the CPU, even a full overlap (they
    wrote into it on tpu)."""
    from op_testing import same_as_cpu
    x = torch.randn(4, 4)
    same_as_cpu(lambda d: _OVERLAP[case](x.clone().to(d), d))


def test_masked_scatter_broadcasts_self_and_refuses_a_short_source():
    """masked_scatter of a self smaller than the mask failed to compile, and
    a source with fewer elements than the mask has ones reused its last
    element with no error (CPU raises)."""
    from op_testing import no_fallback, same_as_cpu
    g = torch.Generator().manual_seed(0)
    m, x, s = torch.rand(5, 5, generator=g) > 0.5, torch.randn(5, generator=g), torch.randn(5, 5, generator=g)
    with no_fallback():
        same_as_cpu(lambda d: x.to(d).masked_scatter(m.to(d), s.to(d)))
    err = same_as_cpu(lambda d: torch.zeros(3, device=d).masked_scatter(
        torch.ones(3, dtype=torch.bool, device=d), torch.ones(2, device=d)).cpu())
    assert "Number of elements of source" in str(err)
