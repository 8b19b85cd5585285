"""conv family vs CPU: convolution (1-3 D, strided, padded, dilated, grouped,
transposed) and pooling (max with indices, avg, adaptive), with gradients,
and no CPU fallback."""
import pytest
import torch
import torch.nn.functional as F
import torchtpu

from op_testing import check, make

FLOATS = [torch.float32, torch.bfloat16, torch.float16]


CONV2D_CASES = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
    dict(padding=2, dilation=2, groups=2),
    dict(stride=3, padding=1, groups=4),  # depthwise
    dict(padding="same", dilation=2),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(CONV2D_CASES)))
def test_conv2d(dtype, case):
    kw = CONV2D_CASES[case]
    x = make((2, 4, 9, 8), dtype, seed=1)
    w = make((8, 4 // kw.get("groups", 1), 3, 3), dtype, seed=2)
    b = make((8,), dtype, seed=3)
    check(lambda x, w, b: F.conv2d(x, w, b, **kw), x, w, b, grad=True, dtype=dtype,
          ref_dtype=torch.float32 if dtype == torch.float16 else None)


def test_conv2d_noncontiguous_input():
    x = make((2, 3, 7, 7), noncontiguous=True)
    w = make((4, 3, 3, 3), seed=2, noncontiguous=True)
    b = make((4,), seed=3)
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1), x, w, b, grad=True)


def test_conv2d_channels_last_input():
    x = make((2, 3, 7, 7)).to(memory_format=torch.channels_last)
    w = make((4, 3, 3, 3), seed=2)
    b = make((4,), seed=3)
    check(lambda x, w, b: F.conv2d(x, w, b, stride=2), x, w, b, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_conv2d_without_bias(dtype):
    x = make((2, 4, 9, 8), dtype, seed=1)
    w = make((6, 2, 3, 3), dtype, seed=2)
    check(lambda x, w: F.conv2d(x, w, stride=2, padding=1, groups=2), x, w, grad=True, dtype=dtype,
          ref_dtype=torch.float32 if dtype == torch.float16 else None)


def test_conv2d_input_without_grad():
    # The first layer of a network: only the weight and bias need gradients.
    x = make((2, 3, 6, 6))
    w = make((4, 3, 3, 3), seed=2).requires_grad_()
    b = make((4,), seed=3).requires_grad_()
    wt, bt = (t.detach().to("tpu").requires_grad_() for t in (w, b))
    g = make((2, 4, 4, 4), seed=4)
    F.conv2d(x, w, b).backward(g)
    before = dict(torchtpu.metrics.fallback_counts())
    F.conv2d(x.to("tpu"), wt, bt).backward(g.to("tpu"))
    assert torchtpu.metrics.fallback_counts() == before
    torch.testing.assert_close(wt.grad.cpu(), w.grad, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(bt.grad.cpu(), b.grad, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=2, dilation=3, groups=2)])
def test_conv1d(dtype, kw):
    x = make((3, 4, 20), dtype, seed=4)
    w = make((6, 4 // kw.get("groups", 1), 4), dtype, seed=5)
    b = make((6,), dtype, seed=6)
    check(lambda x, w, b: F.conv1d(x, w, b, **kw), x, w, b, grad=True, dtype=dtype,
          ref_dtype=torch.float32 if dtype == torch.float16 else None)


def test_conv3d():
    x = make((2, 2, 5, 6, 5), seed=7)
    w = make((4, 1, 2, 3, 2), seed=8)
    b = make((4,), seed=9)
    check(lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=1, groups=2), x, w, b,
          grad=True)


def test_conv2d_float64():
    x = make((2, 3, 6, 6), torch.float64)
    w = make((4, 3, 3, 3), torch.float64, seed=2)
    b = make((4,), torch.float64, seed=3)
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1), x, w, b, grad=True)


CONVT_CASES = [
    dict(),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=3, padding=2, output_padding=2, dilation=2, groups=2),
    dict(stride=2, padding=3),  # padding past the kernel's reach
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(CONVT_CASES)))
def test_conv_transpose2d(dtype, case):
    kw = CONVT_CASES[case]
    g = kw.get("groups", 1)
    x = make((2, 4, 5, 6), dtype, seed=10)
    w = make((4, 6 // g, 3, 2), dtype, seed=11)
    b = make((6,), dtype, seed=12)
    check(lambda x, w, b: F.conv_transpose2d(x, w, b, **kw), x, w, b, grad=True, dtype=dtype,
          ref_dtype=torch.float32 if dtype == torch.float16 else None)


def test_conv_transpose1d():
    x = make((2, 4, 7), seed=13)
    w = make((4, 3, 3), seed=14)
    b = make((6,), seed=15)
    check(lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1,
                                             groups=2), x, w, b, grad=True)


def test_conv_module_training_step():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 4, 3, groups=4),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    x = make((2, 3, 12, 12))
    check(lambda x, *params: torch.func.functional_call(
        net, dict(zip([n for n, _ in net.named_parameters()], params)), (x,)),
        x, *[p.detach() for p in net.parameters()], grad=True)


# ---- max pooling -----------------------------------------------------------

MAXPOOL_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=2, padding=1, dilation=(1, 2), ceil_mode=True),
    dict(kernel_size=3, stride=2, ceil_mode=True),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(MAXPOOL_CASES)))
def test_max_pool2d_with_indices(dtype, case):
    kw = MAXPOOL_CASES[case]
    # Small integers: many ties, so the first-maximum rule is exercised.
    x = make((2, 3, 9, 8), torch.int64, low=-3, high=4).to(dtype)
    check(lambda x: F.max_pool2d(x, return_indices=True, **kw), x, grad=True, dtype=dtype)


def test_max_pool2d_noncontiguous_and_3d_input():
    x = make((3, 8, 8), noncontiguous=True)
    check(lambda x: F.max_pool2d(x, 3, 2, 1), x, grad=True)


def test_max_pool2d_nan():
    x = make((1, 1, 4, 4))
    x[0, 0, 0, 1] = float("nan")
    x[0, 0, 1, 0] = float("nan")
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), x)


def test_max_pool2d_int64():
    x = make((2, 2, 6, 6), torch.int64)
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), x)


def test_max_pool1d():
    x = make((2, 3, 11))
    check(lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True), x, grad=True)


def test_max_pool3d():
    x = make((2, 2, 5, 6, 7))
    check(lambda x: F.max_pool3d(x, 2, (1, 2, 2), 1, return_indices=True), x, grad=True)


# ---- average pooling ------------------------------------------------------

AVGPOOL_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, divisor_override=5),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(AVGPOOL_CASES)))
def test_avg_pool2d(dtype, case):
    x = make((2, 3, 9, 8), dtype)
    check(lambda x: F.avg_pool2d(x, **AVGPOOL_CASES[case]), x, grad=True, dtype=dtype)


def test_avg_pool2d_noncontiguous():
    x = make((2, 3, 8, 8), noncontiguous=True)
    check(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), x, grad=True)


def test_avg_pool2d_int64():
    x = make((2, 2, 7, 7), torch.int64)
    check(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), x)


def test_avg_pool1d():
    x = make((2, 3, 10))
    check(lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), x,
          grad=True)


def test_avg_pool3d():
    x = make((2, 2, 5, 6, 7))
    check(lambda x: F.avg_pool3d(x, 3, 2, 1, count_include_pad=False), x, grad=True)


# ---- adaptive pooling -----------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("size", [(3, 4), (2, 2), (5, 7), (9, 8), (12, 10)])
def test_adaptive_avg_pool2d(dtype, size):
    x = make((2, 3, 9, 8), dtype)
    check(lambda x: F.adaptive_avg_pool2d(x, size), x, grad=True, dtype=dtype)


def test_adaptive_avg_pool1d_and_3d():
    check(lambda x: F.adaptive_avg_pool1d(x, 4), make((2, 3, 10)), grad=True)
    check(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), make((1, 2, 5, 7, 4)), grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("size", [(3, 4), (2, 2), (5, 7), 1, (12, 10)])
def test_adaptive_max_pool2d(dtype, size):
    x = make((2, 3, 9, 8), torch.int64, low=-3, high=4).to(dtype)
    check(lambda x: F.adaptive_max_pool2d(x, size, return_indices=True), x, grad=True,
          dtype=dtype)


def test_adaptive_max_pool1d():
    check(lambda x: F.adaptive_max_pool1d(x, 4, return_indices=True), make((2, 3, 10)), grad=True)


# ---- unfold / fold (im2col / col2im) -----------------------------------------

UNFOLD_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=(3, 2), dilation=(1, 2), padding=1, stride=(2, 1)),
    dict(kernel_size=3, padding=2, stride=3),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(UNFOLD_CASES)))
def test_unfold(dtype, case):
    x = make((2, 3, 7, 8), dtype)
    check(lambda x: F.unfold(x, **UNFOLD_CASES[case]), x, grad=True, dtype=dtype, exact=True)


def test_unfold_unbatched_noncontiguous():
    check(lambda x: F.unfold(x, 2, padding=1), make((3, 6, 6), noncontiguous=True), grad=True)


def test_unfold_of_bool():
    """Data movement only: bool ran on the CPU fallback."""
    check(lambda x: F.unfold(x, 2, padding=1), make((2, 3, 5, 5)) > 0, exact=True)


@pytest.mark.parametrize("case", ["unfold_empty_batch", "fold_empty_batch",
                                  "unfold_refused_no_blocks", "fold_refused_empty_channels"])
def test_unfold_fold_of_empty_batches(case):
    """An empty batch (the one empty input CPU accepts) gives the empty
    result on the device; other empty inputs raise CPU's error."""
    from op_testing import no_fallback, same_as_cpu

    runs = {"unfold_empty_batch": lambda d: F.unfold(torch.ones(0, 3, 5, 5, device=d), 2),
            "fold_empty_batch": lambda d: F.fold(torch.ones(0, 12, 16, device=d), (5, 5), 2),
            "unfold_refused_no_blocks": lambda d: F.unfold(torch.ones(1, 3, 1, 1, device=d), 2),
            "fold_refused_empty_channels": lambda d: F.fold(torch.ones(1, 0, 16, device=d), (5, 5), 2)}
    if "refused" in case:
        assert isinstance(same_as_cpu(runs[case]), RuntimeError)
        return
    with no_fallback():
        same_as_cpu(runs[case])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(UNFOLD_CASES)))
def test_fold(dtype, case):
    kw = UNFOLD_CASES[case]
    blocks = F.unfold(torch.zeros(2, 3, 7, 8), **kw).shape
    x = make(tuple(blocks), dtype)
    check(lambda x: F.fold(x, (7, 8), **kw), x, grad=True, dtype=dtype)


# ---- max_unpool ---------------------------------------------------------------

@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("dtype", FLOATS)
def test_max_unpool_on_the_device(nd, dtype):
    """max_unpool1d/2d/3d ran on the CPU fallback (1752 sweep samples): one
    scatter per call, with gradients."""
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
    unpool = {1: F.max_unpool1d, 2: F.max_unpool2d, 3: F.max_unpool3d}[nd]
    x = make((2, 3) + (6,) * nd, dtype)
    _, idx = pool(x, 2, stride=2, return_indices=True)
    y, _ = pool(x, 2, stride=2, return_indices=True)
    check(lambda y, i: unpool(y, i, 2, stride=2), y, idx, grad=True, dtype=dtype, exact=True)
    # overlapping windows: duplicate indices carry equal values
    _, idx = pool(x, 3, stride=1, return_indices=True)
    y, _ = pool(x, 3, stride=1, return_indices=True)
    check(lambda y, i: unpool(y, i, 3, stride=1), y, idx, dtype=dtype, exact=True)


@pytest.mark.parametrize("case", ["index_too_large", "negative_index", "int32_indices", "shape_mismatch"])
def test_max_unpool_refuses_what_cpu_refuses(case):
    from op_testing import same_as_cpu

    def run(d):
        y = torch.ones(1, 1, 2, 2, device=d)
        i = torch.tensor([[[[0, 1], [2, 3]]]], device=d)
        if case == "index_too_large":
            i[0, 0, 1, 1] = 16
        if case == "negative_index":
            i[0, 0, 0, 1] = -1
        if case == "int32_indices":
            i = i.int()
        if case == "shape_mismatch":
            i = i[..., :1]
        return F.max_unpool2d(y, i, 2, output_size=(4, 4))
    err = same_as_cpu(run)
    assert isinstance(err, RuntimeError)
    if case == "index_too_large":
        assert "Found an invalid max index: 16 (output volumes are of size 4x4)" in str(err)
