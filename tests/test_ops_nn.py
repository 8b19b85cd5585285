"""nn family on the tpu device vs CPU: softmax, normalizations, losses,
embedding backward, dropout, attention (fused, and the math path where the
fused op does not serve), RNN cells and modules."""
import contextlib
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu  # noqa: F401
from op_testing import (assert_close, check, check_host_kernel_switch, make, no_fallback,
                        to_tpu)

FLOATS = [torch.float32, torch.bfloat16]

# Engine limitations some tests run into (the lowerings handle the calls),
# probed at import so the marks follow the engine as it improves:
# - a backward whose output_mask leaves an output undefined (no weight)
#   is refused as "unsupported output" and runs on the CPU
#   (csrc/torch/dispatch.cpp plan_outputs);
# - native_batch_norm mutates running_mean / running_var without a (a!)
#   annotation, so neither the engine nor the CPU fallback writes them back;
# - rng_bit_generator THREE_FRY on the XLA CPU plugin needs a
#   tensor<2xui64> state; a tensor<2xi64> one fails to compile.


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("noncontiguous", [False, True])
def test_softmax_log_softmax(dtype, dim, noncontiguous):
    x = make((5, 7), dtype, noncontiguous=noncontiguous)
    check(lambda t: F.softmax(t, dim), x, grad=True, dtype=dtype)
    check(lambda t: F.log_softmax(t, dim), x, grad=True, dtype=dtype)


def test_softmax_large_values_and_3d():
    x = make((2, 3, 4)) * 50  # max subtraction keeps exp finite
    check(lambda t: F.softmax(t, 1), x, grad=True)
    check(lambda t: F.log_softmax(t, 2), x, grad=True)


def test_softmax_bf16_to_float():
    x = make((4, 9), torch.bfloat16)
    check(lambda t: F.softmax(t, -1, dtype=torch.float32), x, grad=True)


def _host_row_programs():
    return torchtpu.metrics.metrics().get("host_row_programs", 0)


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
@pytest.mark.parametrize("shape", [(16, 4, 64, 64), (128, 512), (9, 1000), (64, 67)])
def test_softmaxes_big_enough_for_the_host_kernel_as_cpu(shape, mode):
    """On the CPU plugin, float32 softmax, log_softmax and _safe_softmax
    over the last dim of 4096+ elements run as the host kernel (core/
    hostrow.h): values and gradients as on CPU, with masked entries, a row
    of -inf (NaN, or zeros for _safe_softmax), a NaN and an +inf row; rows
    of every length around the kernel's vector width; and the same in
    defer_and_fuse (the kernel inside a fused run) and in a compiled graph."""
    x = make(shape) * 4
    rows = x.view(-1, shape[-1])
    rows[0, ::3] = float("-inf")
    rows[1] = float("-inf")
    rows[2, 5] = float("nan")
    rows[3, 7] = float("inf")
    safe = torch.ops.aten._safe_softmax
    before = _host_row_programs()
    with torchtpu.eager_mode(mode):
        # (the scaling: a fused run not compiled by an earlier case)
        check(lambda t: F.softmax(t * 1.5, -1), x, grad=True)
        check(lambda t: F.log_softmax(t * 1.5, -1), x, grad=True)
        check(lambda t: safe(t * 1.5, -1), x, grad=True)
        # half precision computes in float32: the kernel's input too
        check(lambda t: F.softmax(t, -1), x.to(torch.bfloat16), dtype=torch.bfloat16)
    assert _host_row_programs() > before
    # (static: each shape its own graph)
    cf = torch.compile(lambda t: F.log_softmax(t * 2, -1), backend="tpu", dynamic=False)
    assert_close(cf(x.to("tpu")).cpu(), F.log_softmax(x * 2, -1))


def test_softmaxes_the_host_kernel_leaves_to_xla():
    """Not the last dim, float64, and small tensors stay XLA's: still as on
    CPU, and no host-kernel program compiled for them."""
    x = make((64, 128)) * 4
    before = _host_row_programs()
    check(lambda t: F.softmax(t, 0), x, grad=True)
    check(lambda t: F.log_softmax(t, -1), x.double(), grad=True)
    check(lambda t: F.softmax(t, -1), make((8, 64)), grad=True)
    assert _host_row_programs() == before


def test_host_row_off_computes_the_same():
    """TORCHTPU_HOST_ROW=0 leaves softmaxes and layer_norm to XLA: no custom
    call, and the same values (to rounding) as with it."""
    check_host_kernel_switch(
        "import torch, torchtpu\n"
        "import torch.nn.functional as F\n"
        "x = torch.randn(64, 4, 64, generator=torch.Generator().manual_seed(0)) * 5\n"
        "x[0, 0] = float('-inf')\n"
        "for f in (torch.softmax, torch.log_softmax):\n"
        "    torch.testing.assert_close(f(x.to('tpu'), -1).cpu(), f(x, -1), equal_nan=True)\n"
        "y = x.clone(); y[0, 0] = 1\n"
        "torch.testing.assert_close(F.layer_norm(y.to('tpu'), (64,)).cpu(),\n"
        "                           F.layer_norm(y, (64,)), rtol=1e-5, atol=1e-5)\n",
        "TORCHTPU_HOST_ROW", "host_row_programs")


@pytest.mark.parametrize("dtype", FLOATS)
def test_safe_softmax_masked_rows_as_cpu(dtype):
    """_safe_softmax (SDPA's softmax): rows of -inf only give zeros, a
    partly masked row softmax over the rest, a NaN row NaN; gradients and
    dtype= as on CPU; one device op (PyTorch's composite is softmax, eq, all
    and where), and whole in a compiled graph."""
    x = make((3, 4, 6), dtype)
    x[0, 1] = float("-inf")
    x[1, 2, :4] = float("-inf")
    x[2, 3, 1] = float("nan")
    safe = torch.ops.aten._safe_softmax
    check(lambda t: safe(t, -1), x, grad=True, dtype=dtype)
    check(lambda t: safe(t, 1), x, grad=True, dtype=dtype)
    check(lambda t: safe(t, -1, torch.float64), x, dtype=torch.float64)
    xt = x.to("tpu")
    before = torchtpu.metrics.metrics().get("device_ops", 0)
    y = safe(xt, -1)
    assert torchtpu.metrics.metrics().get("device_ops", 0) - before == 1
    cf = torch.compile(lambda t: safe(t * 2, -1), backend="tpu")
    assert_close(cf(xt).cpu(), safe(x.to(y.dtype) * 2, -1), dtype=dtype)
    # attention with a boolean mask that masks a whole query row
    q = make((2, 2, 8, 4), dtype, seed=3)
    m = torch.ones(8, 8, dtype=torch.bool).tril()
    m[3] = False
    check(lambda a: F.scaled_dot_product_attention(a, a, a, attn_mask=m.to(a.device)), q,
          grad=True, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(dtype, affine):
    x = make((3, 4, 6), dtype)
    w = make((4, 6), dtype, seed=1) if affine else None
    b = make((4, 6), dtype, seed=2) if affine else None
    if affine:
        check(lambda t, w, b: F.layer_norm(t, (4, 6), w, b), x, w, b, grad=True, dtype=dtype)
    else:
        check(lambda t: F.layer_norm(t, (6,)), x, grad=True, dtype=dtype)


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
@pytest.mark.parametrize("shape,k", [((128, 512), 1), ((16, 64, 64), 1), ((16, 64, 64), 2),
                                     ((700, 13), 1)])
def test_layer_norm_big_enough_for_the_host_kernel_as_cpu(shape, k, mode):
    """On the CPU plugin, a float32 layer_norm of 4096+ elements computes
    its output with the host kernel (core/hostrow.h; mean and rstd stay
    XLA's): values and gradients as on CPU with weight and bias, weight
    only, neither; rows far from zero; a bfloat16 input (computed in
    float32); inside a fused run; in a compiled graph."""
    ns = shape[-k:]
    x = make(shape) + 1
    w, b = make(ns, seed=1), make(ns, seed=2)
    # weight and bias gradients sum over the rows: XLA's and CPU's float32
    # sums of 700+ rows differ by more than the tolerance
    grad = x.numel() // w.numel() <= 256
    before = _host_row_programs()
    with torchtpu.eager_mode(mode):
        # (the scaling: a fused run not compiled by an earlier case)
        check(lambda t, w, b: F.layer_norm(t * 1.5, ns, w, b), x, w, b, grad=grad)
        # rows far from zero: float32 moments round (CPU's too) to ~1e-5
        far = F.layer_norm(*to_tpu([x + 50, ns, w, b])).cpu()
        torch.testing.assert_close(far, F.layer_norm(x + 50, ns, w, b), atol=5e-5, rtol=1e-5)
        check(lambda t, w: F.layer_norm(t * 1.5, ns, w, None, 1e-3), x, w, grad=grad)
        check(lambda t: F.layer_norm(t * 1.5, ns), x, grad=True)
        check(lambda t: F.layer_norm(t, ns), x.to(torch.bfloat16), dtype=torch.bfloat16)
    assert _host_row_programs() > before
    cf = torch.compile(lambda t, w, b: F.layer_norm(t * 2, ns, w, b), backend="tpu",
                       dynamic=False)
    assert_close(cf(*to_tpu([x, w, b])).cpu(), F.layer_norm(x * 2, ns, w, b))


def _layer_norm_grads(x, ns, w, b, g):
    """(dx, dweight, dbias) of layer_norm(x, ns, w, b) for output gradient
    g, on x's device; the parameters' gradients left out when absent."""
    leaves = [t.detach().requires_grad_() for t in (x, w, b) if t is not None]
    it = iter(leaves)
    xx, ww, bb = next(it), next(it) if w is not None else None, next(it) if b is not None else None
    return torch.autograd.grad(F.layer_norm(xx, ns, ww, bb), leaves, g)


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
@pytest.mark.parametrize("shape,k", [((16, 64, 64), 1), ((128, 512), 1), ((4, 32, 8, 16), 2),
                                     ((300, 17), 1)])
def test_layer_norm_backward_host_kernel_as_float64(shape, k, mode):
    """On the CPU plugin, a float32 layer_norm backward of 4096+ elements
    runs as the host kernel (core/hostnorm.h): dx, dweight and dbias
    against a float64 CPU reference (the weight's and bias's gradients sum
    over up to 1024 rows: CPU's own float32 sums are no closer), with
    weight and bias, weight only, neither; a bfloat16 input (computed in
    float32) against float32 CPU; inside a fused run (the mode set for the
    process: the backward runs on autograd's thread)."""
    ns = shape[-k:]
    x, g = make(shape) + 1, make(shape, seed=3)
    w, b = make(ns, seed=1), make(ns, seed=2)
    before = torchtpu.metrics.metrics().get("host_norm_programs", 0)
    previous = torchtpu.get_eager_mode()
    torchtpu.set_eager_mode(mode)
    try:
        for ww, bb in ((w, b), (w, None), (None, None)):
            got = _layer_norm_grads(*to_tpu([x * 1.5, ns, ww, bb, g]))
            want = _layer_norm_grads(*[t.double() if isinstance(t, torch.Tensor) else t
                                       for t in (x * 1.5, ns, ww, bb, g)])
            assert len(got) == len(want)
            for a, e in zip(got, want):
                torch.testing.assert_close(a.cpu().double(), e, atol=2e-5, rtol=2e-5)
        half = _layer_norm_grads(*to_tpu([x.bfloat16(), ns, w.bfloat16(), b.bfloat16(),
                                          g.bfloat16()]))
        ref = _layer_norm_grads(*[t.bfloat16().float() if isinstance(t, torch.Tensor) else t
                                  for t in (x, ns, w, b, g)])
        for a, e in zip(half, ref):
            assert a.dtype == torch.bfloat16
            # bfloat16 results of sums over up to 1024 rows: a few ulps of
            # the largest terms
            torch.testing.assert_close(a.cpu().float(), e, atol=0.25, rtol=2e-2)
    finally:
        torchtpu.set_eager_mode(previous)
    assert torchtpu.metrics.metrics().get("host_norm_programs", 0) > before


def test_layer_norm_backward_host_kernel_off_computes_the_same():
    """TORCHTPU_HOST_ROW=0 leaves layer_norm's backward to XLA: no custom
    call, and the same gradients (to rounding) as with it."""
    check_host_kernel_switch(
        "import torch, torchtpu\n"
        "import torch.nn.functional as F\n"
        "gen = torch.Generator().manual_seed(0)\n"
        "x, g = torch.randn(64, 4, 64, generator=gen), torch.randn(64, 4, 64, generator=gen)\n"
        "w, b = torch.randn(64, generator=gen), torch.randn(64, generator=gen)\n"
        "def grads(x, w, b, g):\n"
        "    t = [v.detach().requires_grad_() for v in (x, w, b)]\n"
        "    return torch.autograd.grad(F.layer_norm(t[0], (64,), t[1], t[2]), t, g)\n"
        "got = grads(*[v.to('tpu') for v in (x, w, b)], g.to('tpu'))\n"
        "want = grads(x.double(), w.double(), b.double(), g.double())\n"
        "for a, e in zip(got, want):\n"
        "    torch.testing.assert_close(a.cpu().double(), e, rtol=2e-5, atol=2e-5)\n",
        "TORCHTPU_HOST_ROW", "host_norm_programs")


def test_layer_norm_noncontiguous():
    x = make((5, 8), noncontiguous=True)
    w, b = make((5,), seed=1), make((5,), seed=2)
    check(lambda t, w, b: F.layer_norm(t.t(), (5,), w, b), x, w, b, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_group_norm(dtype):
    x = make((2, 6, 3, 2), dtype)
    w, b = make((6,), dtype, seed=1), make((6,), dtype, seed=2)
    check(lambda t, w, b: F.group_norm(t, 3, w, b), x, w, b, grad=True, dtype=dtype)


def test_group_norm_without_affine():
    check(lambda t: F.group_norm(t, 2), make((2, 6, 3, 2)), grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm(dtype, training):
    x = make((4, 3, 5, 2), dtype)
    w, b = make((3,), dtype, seed=1), make((3,), dtype, seed=2)
    rm_c, rv_c = make((3,), dtype, seed=3), make((3,), dtype, seed=4).abs() + 0.5
    rm_t, rv_t = to_tpu(rm_c), to_tpu(rv_c)
    xc, wc, bc = (v.detach().requires_grad_() for v in (x, w, b))
    xt, wt, bt = (to_tpu(v).requires_grad_() for v in (x, w, b))
    want = F.batch_norm(xc, rm_c, rv_c, wc, bc, training=training, momentum=0.2)
    with no_fallback():
        got = F.batch_norm(xt, rm_t, rv_t, wt, bt, training=training, momentum=0.2)
        g = make(want.shape, dtype, seed=5)
        want.backward(g)
        got.backward(g.to("tpu"))
    assert_close(got, want.detach(), dtype)
    assert_close(rm_t, rm_c, dtype)  # the running stats were updated in place
    assert_close(rv_t, rv_c, dtype)
    for t, c in ((xt, xc), (wt, wc), (bt, bc)):
        assert_close(t.grad, c.grad, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 5), (2, 3, 4, 2)])
def test_batch_norm_training_without_running_stats(dtype, shape):
    x = make(shape, dtype, noncontiguous=True)
    w, b = make((shape[1],), dtype, seed=1), make((shape[1],), dtype, seed=2)
    check(lambda t, w, b: F.batch_norm(t, None, None, w, b, training=True), x, w, b, grad=True,
          dtype=dtype)


def test_batch_norm_without_affine():
    check(lambda t: F.batch_norm(t, None, None, training=True), make((6, 4)), grad=True)


def test_batch_norm_module_train_eval():
    torch.manual_seed(0)
    cpu = torch.nn.BatchNorm1d(5)
    dev = torch.nn.BatchNorm1d(5).to("tpu")
    dev.load_state_dict(cpu.state_dict())
    x = make((8, 5, 3))
    with no_fallback():
        for _ in range(2):
                    assert_close(dev(x.to("tpu")), cpu(x).detach())
        cpu.eval()
        dev.eval()
        assert_close(dev(x.to("tpu")), cpu(x).detach())
    assert_close(dev.running_mean, cpu.running_mean)
    assert_close(dev.running_var, cpu.running_var)


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("scale", [False, True])
def test_embedding_backward(padding_idx, scale):
    w = make((6, 4))
    idx = torch.tensor([[1, 2, 1], [5, 2, 0]])
    check(lambda w: F.embedding(idx.to(w.device), w, padding_idx=padding_idx,
                                scale_grad_by_freq=scale), w, grad=True)


def test_embedding_backward_bf16():
    w = make((10, 3), torch.bfloat16)
    idx = torch.tensor([3, 3, 9, 0])
    check(lambda w: F.embedding(idx.to(w.device), w), w, grad=True, dtype=torch.bfloat16)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_and_nll(dtype, reduction):
    x = make((5, 4), dtype)
    t = torch.tensor([0, 3, -100, 1, 3])
    w = make((4,), dtype, seed=1).abs() + 0.5
    check(lambda x: F.cross_entropy(x, t.to(x.device), reduction=reduction), x, grad=True,
          dtype=dtype)
    # weight takes no gradient: it travels in the closure
    check(lambda x: F.nll_loss(x, t.to(x.device), w.to(x.device), reduction=reduction), x,
          grad=True, dtype=dtype)


def test_nll_loss_unbatched_and_ignore_in_range():
    x = make((4,))
    t = torch.tensor(2)
    check(lambda x: F.nll_loss(x, t.to(x.device)), x, grad=True)
    x2 = make((6, 3))
    t2 = torch.tensor([0, 1, 2, 1, 1, 0])
    check(lambda x: F.nll_loss(x, t2.to(x.device), ignore_index=1), x2, grad=True)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_2d(reduction):
    x = make((2, 3, 4, 5))
    t = torch.randint(0, 3, (2, 4, 5), generator=torch.Generator().manual_seed(0))
    t[0, 0, 0] = -100
    check(lambda x: F.cross_entropy(x, t.to(x.device), reduction=reduction), x, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_regression_losses(dtype, reduction):
    x = make((4, 5), dtype, noncontiguous=True)
    y = make((4, 5), dtype, seed=1)
    check(lambda a, b: F.mse_loss(a, b, reduction=reduction), x, y, grad=True, dtype=dtype)
    check(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.7), x, y, grad=True,
          dtype=dtype)
    check(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=0.6), x, y, grad=True,
          dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy(dtype, reduction):
    p = make((3, 5), dtype, low=0.05, high=0.95)
    y = make((3, 5), dtype, seed=1, low=0, high=1)
    w = make((5,), dtype, seed=2, low=0.5, high=2)
    check(lambda p, y: F.binary_cross_entropy(p, y, reduction=reduction), p, y, grad=True,
          dtype=dtype)
    check(lambda p, y: F.binary_cross_entropy(p, y, w.to(p.device).expand(3, 5),
                                              reduction=reduction),
          p, y, grad=True, dtype=dtype)


def test_binary_cross_entropy_clamps_logs():
    p = torch.tensor([0.0, 1.0, 0.5])
    y = torch.tensor([1.0, 0.0, 1.0])
    check(lambda p, y: F.binary_cross_entropy(p, y, reduction="none"), p, y)


@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout(dtype):
    x = (make((64, 64), torch.float32).abs() + 1).to(dtype).to("tpu").requires_grad_()
    with no_fallback():
        y = F.dropout(x, 0.3, training=True)
        y.backward(torch.ones_like(y))
    y, x_c, grad = y.detach().cpu(), x.detach().cpu(), x.grad.cpu()
    kept = y != 0
    frac = kept.float().mean().item()
    assert 0.65 < frac < 0.75, frac
    scaled = (x_c.float() * (1 / 0.7)).to(dtype)
    assert torch.equal(y[kept], scaled[kept])
    assert torch.equal(grad != 0, kept)
    assert torch.allclose(grad[kept].float(), torch.full_like(grad[kept].float(), 1 / 0.7),
                          rtol=1e-2)
    # a second call draws new bits
    with no_fallback():
        y2 = F.dropout(x.detach(), 0.3, training=True)
    assert not torch.equal(y2.cpu() != 0, kept)


def test_dropout_eval_and_p_zero():
    check(lambda t: F.dropout(t, 0.5, training=False), make((8, 8)))
    check(lambda t: F.dropout(t, 0.0, training=True), make((8, 8)), grad=True)


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(causal):
    q, k, v = make((2, 2, 4, 8)), make((2, 2, 4, 8), seed=1), make((2, 2, 4, 8), seed=2)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v,
          grad=True)


@pytest.mark.parametrize("variant", ["legit", "legit_eval", "no_stats", "no_training",
                                     "functional", "functional_eval"])
def test_batch_norm_aten_variants(variant):
    """The _native_batch_norm_legit family as torch.compile emits it:
    running stats are (a!) arguments or extra returns, so they reach us."""
    A = torch.ops.aten
    calls = {
        "legit": lambda x, w, b, rm, rv: A._native_batch_norm_legit(x, w, b, rm, rv, True,
                                                                    0.2, 1e-5),
        "legit_eval": lambda x, w, b, rm, rv: A._native_batch_norm_legit(x, w, b, rm, rv,
                                                                         False, 0.2, 1e-5),
        "no_stats": lambda x, w, b, rm, rv: A._native_batch_norm_legit(x, w, b, True, 0.2,
                                                                       1e-5),
        "no_training": lambda x, w, b, rm, rv: A._native_batch_norm_legit_no_training(
            x, w, b, rm, rv, 0.2, 1e-5),
        "functional": lambda x, w, b, rm, rv: A._native_batch_norm_legit_functional(
            x, w, b, rm, rv, True, 0.2, 1e-5),
        "functional_eval": lambda x, w, b, rm, rv: A._native_batch_norm_legit_functional(
            x, w, b, rm, rv, False, 0.2, 1e-5),
    }
    f = calls[variant]
    x, w, b = make((4, 3, 5)), make((3,), seed=1), make((3,), seed=2)
    rm, rv = make((3,), seed=3), make((3,), seed=4).abs() + 0.5
    rm_t, rv_t = to_tpu(rm), to_tpu(rv)
    want = f(x, w, b, rm, rv)
    with no_fallback():
        got = f(*to_tpu([x, w, b]), rm_t, rv_t)
    for g, c in zip(got, want):
        if c.numel():  # CPU leaves eval-mode saved stats empty; meta does not
            assert_close(g, c)
    assert_close(rm_t, rm)
    assert_close(rv_t, rv)


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_scaled_dot_product_attention_masks(mask_kind):
    q, k, v = make((1, 2, 5, 4)), make((1, 2, 6, 4), seed=1), make((1, 2, 6, 4), seed=2)
    if mask_kind == "bool":
        mask = torch.rand(5, 6, generator=torch.Generator().manual_seed(3)) > 0.3
        mask[:, 0] = True  # no fully masked row
    else:
        mask = make((5, 6), seed=3)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.device)),
          q, k, v, grad=True)


FUSED = "ScaledDotProductFusedAttentionOverrideableBackward0"


def _sdpa_backend(out):
    """Which op computed an SDPA result: its autograd node's name."""
    return type(out.grad_fn).__name__


@pytest.mark.parametrize("case", ["plain", "causal_more_keys", "causal_more_queries", "scale",
                                  "scale_one", "three_d", "bool_mask_masked_row", "float_mask_broadcast",
                                  "mask_grad", "bf16_causal", "f64", "strided_views"])
@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_sdpa_runs_as_one_fused_op_as_cpu(case, mode):
    """F.scaled_dot_product_attention picks the fused op on tpu (csrc/torch/
    attention.cpp, core/lower/attention.c): values and the gradients of q, k,
    v (and of a float mask that requires grad) as on CPU, with causal top-
    left alignment for L != S, an explicit scale (1.0 too), 3-D inputs, a fully masked
    row (zeros, zero gradients), masks broadcast over batch and heads, bf16
    and float64, and q/k/v as strided views of one projection."""
    dtype = {"bf16_causal": torch.bfloat16, "f64": torch.float64}.get(case, torch.float32)
    L, S = {"causal_more_keys": (5, 7), "causal_more_queries": (7, 5)}.get(case, (6, 6))
    shape = (3, L, 8) if case == "three_d" else (2, 3, L, 8)
    kshape = shape[:-2] + (S, 8)
    q, k, v = make(shape, dtype), make(kshape, dtype, seed=1), make(kshape, dtype, seed=2)
    kwargs, mask = {}, None
    if case.startswith("causal") or case == "bf16_causal":
        kwargs["is_causal"] = True
    if case == "scale":
        kwargs["scale"] = 0.3
    if case == "scale_one":  # T5's: a whole number the host kernel's call must read as a float
        kwargs["scale"] = 1.0
    if case == "bool_mask_masked_row":
        mask = torch.rand(L, S, generator=torch.Generator().manual_seed(3)) > 0.3
        mask[:, 0] = True
        mask[2] = False  # every key of query 2 masked out
    if case == "float_mask_broadcast":
        mask = make((3, 1, S), seed=3)
    inputs = [q, k, v]
    if case == "mask_grad":
        inputs.append(make((L, S), seed=4))
    if case == "strided_views":
        qkv = make((2, L, 3 * 24), seed=5)

        def fn(x):
            a, b, c = x.split(24, dim=2)
            a, b, c = (z.view(2, L, 3, 8).transpose(1, 2) for z in (a, b, c))
            return F.scaled_dot_product_attention(a, b, c, is_causal=True)
        inputs = [qkv]
    else:
        def fn(q, k, v, m=None):
            m = m if m is not None else (mask.to(q.device) if mask is not None else None)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kwargs)
    with torchtpu.eager_mode(mode):
        got = check(fn, *inputs, grad=True, dtype=dtype)
    assert _sdpa_backend(got) == FUSED
    if case == "bool_mask_masked_row":
        assert got[:, :, 2].abs().sum().item() == 0


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
@pytest.mark.parametrize("out", ["heads_last", "as_is", "mixed"])
def test_sdpa_host_kernel_reads_views_in_place(mode, out):
    """The host attention reads q, k, v where a view read's chain (split,
    view, transpose of one projection) says they are, in the projection's
    buffer, and writes a result the program transposes to [B, L, H, D] next
    straight in that layout (core/hostview.h): values and the projection's
    gradient as on CPU, causal and not, with odd sizes; the output used as
    [B, L, H*D] or as it is; one of q, k, v an ordinary tensor. The mode is
    the process's, so the backward runs in it too."""
    B, T, H, D = 3, 33, 3, 8
    qkv = make((B, T, 3 * H * D), seed=5)
    other = make((B, H, T, D), seed=6)

    def fn(x, o=None):
        q, k, v = (z.view(B, T, H, D).transpose(1, 2) for z in x.split(H * D, dim=2))
        if o is not None:
            q = o * 1.5
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        b = F.scaled_dot_product_attention(k, q, v) * 0.5
        if out == "as_is":
            return a + b
        return (a + b).transpose(1, 2).reshape(B, T, H * D)
    before = torchtpu.metrics.metrics().get("host_attn_strided", 0)
    previous = torchtpu.get_eager_mode()
    torchtpu.set_eager_mode(mode)
    try:
        check(fn, *([qkv, other] if out == "mixed" else [qkv]), grad=True)
    finally:
        torchtpu.set_eager_mode(previous)
    assert torchtpu.metrics.metrics().get("host_attn_strided", 0) > before


def test_host_attention_off_computes_the_same():
    """On the CPU plugin SDPA's fused forward and backward run as the host
    kernel (core/hostattn.h); TORCHTPU_HOST_ATTN=0 leaves them to XLA. Both
    give CPU's values and gradients: causal with more queries than keys, a
    bias masking a whole row, and the demo's strided q/k/v views."""
    check_host_kernel_switch(
        "import torch, torchtpu\n"
        "import torch.nn.functional as F\n"
        "g = torch.Generator().manual_seed(0)\n"
        "def run(dev, q, k, v, **kw):\n"
        "    q, k, v = (t.detach().to(dev).requires_grad_() for t in (q, k, v))\n"
        "    o = F.scaled_dot_product_attention(q, k, v, **kw)\n"
        "    o.backward(torch.ones_like(o))\n"
        "    return [t.cpu() for t in (o, q.grad, k.grad, v.grad)]\n"
        "mask = torch.randn(2, 1, 19, 13, generator=g)\n"
        "mask[0, 0, 3] = float('-inf')\n"
        "qkv = torch.randn(4, 64, 3 * 64, generator=g)\n"
        "views = [z.view(4, 64, 4, 16).transpose(1, 2) for z in qkv.split(64, dim=2)]\n"
        "for args, kw in (([torch.randn(2, 3, 19, 8, generator=g), torch.randn(2, 3, 13, 8, generator=g),\n"
        "                   torch.randn(2, 3, 13, 5, generator=g)], dict(is_causal=True)),\n"
        "                 ([torch.randn(2, 3, 19, 8, generator=g), torch.randn(2, 3, 13, 8, generator=g),\n"
        "                   torch.randn(2, 3, 13, 5, generator=g)], dict(attn_mask=mask)),\n"
        "                 (views, dict(is_causal=True))):\n"
        "    if 'attn_mask' in kw: kw_t = dict(attn_mask=kw['attn_mask'].to('tpu'))\n"
        "    else: kw_t = kw\n"
        "    for got, want in zip(run('tpu', *args, **kw_t), run('cpu', *args, **kw)):\n"
        "        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)\n",
        "TORCHTPU_HOST_ATTN", "host_attn_programs")


def test_sdpa_keeps_the_math_path_where_the_fused_op_does_not_serve():
    """Grouped-query attention, dropout, broadcast batch dims and an
    sdpa_kernel(MATH) context take PyTorch's math path, as CPU does for what
    its flash kernel refuses; with neither backend enabled the call raises
    CPU's RuntimeError."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, kv = make((1, 4, 5, 8)), make((1, 2, 5, 8), seed=1)
    got = check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                q, kv, kv, grad=True)
    assert _sdpa_backend(got) != FUSED
    x = make((2, 2, 5, 8))
    got = check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                x, make((1, 2, 5, 8), seed=1), make((1, 2, 5, 8), seed=2), grad=True)
    assert _sdpa_backend(got) != FUSED
    with sdpa_kernel([SDPBackend.MATH]):
        got = check(lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True), x,
                    grad=True)
    assert _sdpa_backend(got) != FUSED
    t = to_tpu(x).requires_grad_()
    out = F.scaled_dot_product_attention(t, t, t, dropout_p=0.5)
    assert _sdpa_backend(out) != FUSED and out.shape == x.shape
    for where in (x, to_tpu(x)):
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]), pytest.raises(
                RuntimeError, match="No viable backend"):
            F.scaled_dot_product_attention(where, where, where)


def test_sdpa_fused_op_under_the_debug_shadow_check():
    """Debug mode's shadow check runs the fused forward and backward again
    on the CPU (the reference kernels attention.cpp registers there) and
    finds them equal; the results match CPU's SDPA."""
    before = torchtpu.metrics.metrics().get("shadow_checked_ops", 0)
    q, k, v = make((2, 2, 6, 8)), make((2, 2, 6, 8), seed=1), make((2, 2, 6, 8), seed=2)
    previous = torchtpu.get_eager_mode()
    torchtpu.set_eager_mode("debug")  # process-wide: the backward runs on autograd's thread
    try:
        with torchtpu.debug.shadow():
            got = check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                        q, k, v, grad=True)
    finally:
        torchtpu.set_eager_mode(previous)
    assert _sdpa_backend(got) == FUSED
    assert torchtpu.metrics.metrics()["shadow_checked_ops"] >= before + 2


def test_transformer_encoder_layer_forward_backward():
    torch.manual_seed(0)
    cpu = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                           batch_first=True)
    dev = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                           batch_first=True).to("tpu")
    dev.load_state_dict(cpu.state_dict())
    x = make((2, 5, 8))
    check(lambda t: (cpu if t.device.type == "cpu" else dev)(t), x, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_logsigmoid(dtype):
    x = make((4, 6), dtype, noncontiguous=True) * 10
    check(F.logsigmoid, x, grad=True, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy_with_logits(dtype, reduction):
    x = make((3, 5), dtype) * 4
    y = make((3, 5), dtype, seed=1, low=0, high=1)
    pw = make((5,), dtype, seed=2, low=0.5, high=2)
    check(lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction=reduction), x, y,
          grad=True, dtype=dtype)
    check(lambda x: F.binary_cross_entropy_with_logits(x, y.to(x.device),
                                                       pos_weight=pw.to(x.device),
                                                       reduction=reduction), x, grad=True,
          dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, -1])
def test_glu(dtype, dim):
    check(lambda t: F.glu(t, dim), make((4, 6), dtype, noncontiguous=True), grad=True,
          dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("shape,kw", [
    ((2, 3, 5), {"scale_factor": 2}),
    ((2, 3, 5), {"size": 7}),
    ((1, 2, 4, 5), {"scale_factor": 2}),
    ((1, 2, 4, 5), {"size": (3, 9)}),
    ((1, 2, 4, 5), {"scale_factor": 1.7}),
    ((1, 1, 2, 3, 4), {"scale_factor": (2, 1, 3)}),
])
def test_upsample_nearest(dtype, mode, shape, kw):
    x = make(shape, dtype)
    check(lambda t: F.interpolate(t, mode=mode, **kw), x, grad=True, dtype=dtype)


def test_upsample_nearest_int():
    x = make((1, 1, 3, 4), torch.int64)
    check(lambda t: F.interpolate(t.float(), scale_factor=2).long(), x)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shape,mode,kw", [
    ((2, 3, 5), "linear", {"scale_factor": 2}),
    ((2, 3, 5), "linear", {"size": 3}),
    ((1, 2, 4, 5), "bilinear", {"scale_factor": 2}),
    ((1, 2, 4, 5), "bilinear", {"size": (7, 3)}),
    ((1, 2, 4, 5), "bilinear", {"scale_factor": 1.5}),
    ((1, 1, 2, 3, 4), "trilinear", {"scale_factor": (2, 1, 3)}),
])
def test_upsample_linear(dtype, align_corners, shape, mode, kw):
    x = make(shape, dtype, noncontiguous=True)
    check(lambda t: F.interpolate(t, mode=mode, align_corners=align_corners, **kw), x,
          grad=True, dtype=dtype)


# ---- RNN cells and modules -------------------------------------------------
# On a tpu input PyTorch's RNN code (aten RNN.cpp) runs LSTM / GRU steps as
# _thnn_fused_lstm_cell / _thnn_fused_gru_cell, which have no CPU kernel:
# they must run on the device, cells and whole nn.LSTM / nn.GRU alike.

def _flat_tensors(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, nn.utils.rnn.PackedSequence):
        return [obj.data]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _flat_tensors(o)]
    return []


def check_module(module, fn, *inputs, dtype=torch.float32):
    """Runs fn(module, *inputs) on CPU and on a tpu copy of module and inputs,
    then backward of sum(out * g) over every output; compares the outputs,
    the gradients of the floating inputs and of every parameter, with no CPU
    fallback on the tpu side."""
    tpu_module = copy.deepcopy(module).to("tpu")
    cpu_inputs = [i.detach().requires_grad_(i.dtype.is_floating_point)
                  if isinstance(i, torch.Tensor) else i for i in inputs]
    tpu_inputs = [i.detach().to("tpu").requires_grad_(i.requires_grad)
                  if isinstance(i, torch.Tensor) and i.dtype.is_floating_point else i
                  for i in cpu_inputs]
    want = _flat_tensors(fn(module, *cpu_inputs))
    with no_fallback():
        got = _flat_tensors(fn(tpu_module, *tpu_inputs))
        gen = torch.Generator().manual_seed(1)
        grads = [torch.randn(w.shape, generator=gen, dtype=torch.float64).to(w.dtype) for w in want]
        sum((w * g).sum() for w, g in zip(want, grads)).backward()
        sum((t * g.to("tpu")).sum() for t, g in zip(got, grads)).backward()
    assert len(got) == len(want)
    for t, w in zip(got, want):
        assert_close(t, w.detach(), dtype)
    for ci, ti in zip(cpu_inputs, tpu_inputs):
        if isinstance(ci, torch.Tensor) and ci.requires_grad:
            assert ti.grad is not None, "no gradient reached a tpu input"
            assert_close(ti.grad, ci.grad, dtype)
    for (name, p), q in zip(tpu_module.named_parameters(), module.parameters()):
        assert p.grad is not None, name
        assert_close(p.grad, q.grad, dtype)


CELLS = {
    "rnn_tanh": lambda i, h, bias: nn.RNNCell(i, h, bias=bias, nonlinearity="tanh"),
    "rnn_relu": lambda i, h, bias: nn.RNNCell(i, h, bias=bias, nonlinearity="relu"),
    "lstm": lambda i, h, bias: nn.LSTMCell(i, h, bias=bias),
    "gru": lambda i, h, bias: nn.GRUCell(i, h, bias=bias),
}


@pytest.mark.parametrize("kind", list(CELLS))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
def test_rnn_cells_forward_backward(kind, bias, with_state):
    torch.manual_seed(0)
    cell = CELLS[kind](5, 7, bias)
    x = make((3, 5))
    if not with_state:
        check_module(cell, lambda m, x: m(x), x)
    elif kind == "lstm":
        check_module(cell, lambda m, x, h, c: m(x, (h, c)), x, make((3, 7), seed=1),
                     make((3, 7), seed=2))
    else:
        check_module(cell, lambda m, x, h: m(x, h), x, make((3, 7), seed=1))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_fused_cells_other_dtypes(kind, dtype):
    torch.manual_seed(0)
    cell = CELLS[kind](4, 6, True).to(dtype)
    check_module(cell, lambda m, x: m(x), make((2, 4), dtype), dtype=dtype)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_fused_cells_unbatched_and_steps(kind):
    # An unbatched input (the module adds the batch dim) and a few steps
    # chained through the state, as a hand-written loop would.
    torch.manual_seed(0)
    cell = CELLS[kind](4, 6, True)

    def steps(m, xs, x1):
        state = None
        outs = []
        for x in xs.unbind(0):
            state = m(x, state)
            outs.append(state)
        return outs, m(x1)

    check_module(cell, steps, make((4, 2, 4)), make((4,), seed=3))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_fused_cells_double_backward(kind):
    # create_graph=True takes PyTorch's differentiable cell backward (plain
    # aten ops) instead of the fused one.
    torch.manual_seed(0)
    cell = CELLS[kind](3, 4, True)
    tcell = copy.deepcopy(cell).to("tpu")
    x = make((2, 3))
    results = []
    for m, xx in ((cell, x.clone().requires_grad_()), (tcell, x.to("tpu").requires_grad_())):
        out = m(xx)
        out = out[0] + out[1] if isinstance(out, tuple) else out
        g, = torch.autograd.grad(out.square().sum(), xx, create_graph=True)
        g.square().sum().backward()
        results.append((g.detach(), xx.grad, m.weight_hh.grad))
    for got, want in zip(results[1], results[0]):
        assert_close(got, want)


def test_fused_cells_bad_sizes_raise_like_cpu():
    for kind in ("lstm", "gru"):
        cell = CELLS[kind](3, 4, True)
        tcell = copy.deepcopy(cell).to("tpu")
        with pytest.raises(RuntimeError):
            cell(torch.randn(2, 5))
        with pytest.raises(RuntimeError):
            tcell(torch.randn(2, 5, device="tpu"))


def _rnn_state(kind, layers, dirs, batch, hidden, proj=0):
    h = make((layers * dirs, batch, proj or hidden), seed=5)
    if kind == "LSTM":
        return (h, make((layers * dirs, batch, hidden), seed=6))
    return h


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layers,bidirectional,batch_first,bias", [
    (1, False, False, True),
    (2, True, True, True),
    (2, False, True, False),
    (3, True, False, True),
])
@pytest.mark.parametrize("with_state", [False, True])
def test_rnn_modules_forward_backward(kind, layers, bidirectional, batch_first, bias, with_state):
    torch.manual_seed(0)
    module = getattr(nn, kind)(4, 5, num_layers=layers, bias=bias, batch_first=batch_first,
                               bidirectional=bidirectional)
    x = make((3, 6, 4) if batch_first else (6, 3, 4))
    if not with_state:
        check_module(module, lambda m, x: m(x), x)
    elif kind == "LSTM":
        h, c = _rnn_state(kind, layers, 2 if bidirectional else 1, 3, 5)
        check_module(module, lambda m, x, h, c: m(x, (h, c)), x, h, c)
    else:
        h = _rnn_state(kind, layers, 2 if bidirectional else 1, 3, 5)
        check_module(module, lambda m, x, h: m(x, h), x, h)


def test_rnn_relu_module_and_lstm_projection():
    torch.manual_seed(0)
    check_module(nn.RNN(4, 5, num_layers=2, nonlinearity="relu"), lambda m, x: m(x),
                 make((6, 3, 4)))
    lstm = nn.LSTM(4, 6, num_layers=2, proj_size=3, bidirectional=True, batch_first=True)
    check_module(lstm, lambda m, x: m(x), make((2, 5, 4)))


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_rnn_modules_packed_sequences(kind, batch_first, enforce_sorted):
    torch.manual_seed(0)
    module = getattr(nn, kind)(4, 5, num_layers=2, bidirectional=True, batch_first=batch_first)
    lengths = torch.tensor([6, 4, 1, 3] if not enforce_sorted else [6, 4, 3, 1])

    def run(m, x):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=batch_first,
                                                   enforce_sorted=enforce_sorted)
        out, state = m(packed)
        padded, out_lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=batch_first)
        assert torch.equal(out_lengths, lengths)
        return padded, state

    check_module(module, run, make((4, 6, 4) if batch_first else (6, 4, 4)))


def _train_lstm(device, steps=5):
    torch.manual_seed(0)
    lstm = nn.LSTM(3, 8, num_layers=2, batch_first=True).to(device)
    head = nn.Linear(8, 1).to(device)
    params = list(lstm.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 7, 3, generator=g).to(device)
    y = x.sum(-1, keepdim=True).cumsum(1)[:, -1].to(device)  # a sequence sum to learn
    losses = []
    for _ in range(steps):
        out, _ = lstm(x)
        loss = F.mse_loss(head(out[:, -1]), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in params]


def test_lstm_training_loop_matches_cpu():
    want, want_params = _train_lstm("cpu")
    with no_fallback():
        got, got_params = _train_lstm("tpu")
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    assert got[-1] < got[0]
    for p, q in zip(got_params, want_params):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


_X2, _X4 = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)), \
    torch.randn(1, 3, 2, 2, generator=torch.Generator().manual_seed(1))
_TARGETS = {
    "too_large": (_X2, [0, 3], {}),
    "negative": (_X2, [-1, 0], {}),
    "ignored_default": (_X2, [-100, 1], {}),
    "ignored_other": (_X2, [5, 1], {"ignore_index": 5}),
    "bad_after_ignored": (_X2, [5, -100], {"ignore_index": 5}),
    "reduction_none": (_X2, [0, 3], {"reduction": "none"}),
    "spatial": (_X4, [[[0, 3], [1, 2]]], {}),
    "unbatched": (_X2[0], 3, {}),
    "valid": (_X2, [2, 1], {}),
}


@pytest.mark.parametrize("mode", ["strict", "debug", "defer_and_fuse"])
@pytest.mark.parametrize("case", sorted(_TARGETS))
def test_nll_loss_target_out_of_bounds_raises_as_cpu(case, mode):
    # CPU: IndexError "Target 3 is out of bounds." for a class index
    # outside [0, C) other than ignore_index; the one-hot lowering had
    # given such a target no class, a wrong loss (issue 23, item 8)
    from op_testing import same_as_cpu
    x, t, kw = _TARGETS[case]
    with torchtpu.eager_mode(mode):
        for f in (F.cross_entropy, lambda a, b, **k: F.nll_loss(a.log_softmax(-1 if a.dim() == 1 else 1), b, **k)):
            run = lambda d: f(x.to(d), torch.tensor(t, device=d), **kw).cpu()  # noqa: E731
            err = same_as_cpu(run, exact=False)
            if isinstance(err, Exception):
                with pytest.raises(IndexError) as want:
                    run("cpu")
                assert str(err).split(" (torchtpu")[0] == str(want.value)


@pytest.mark.parametrize("case", ["nearest", "nearest_exact", "nearest_2d", "reflect", "replicate"])
@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int64, torch.float32])
def test_dtypes_cpu_and_cuda_have_no_kernel_for_raise(case, dtype):
    # upsample_nearest of int64/bool and reflection/replication pads of bool
    # computed on tpu where CPU and CUDA raise NotImplementedError (found by
    # the OpInfo sweep of unsupported dtypes)
    f = {"nearest": lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
         "nearest_exact": lambda x: F.interpolate(x, scale_factor=2, mode="nearest-exact"),
         "nearest_2d": lambda x: F.interpolate(x.reshape(1, 1, 2, 2), scale_factor=2),
         "reflect": lambda x: F.pad(x, (1, 1), mode="reflect"),
         "replicate": lambda x: F.pad(x, (1, 1), mode="replicate")}[case]
    x = torch.tensor([[[1, 0, 1, 1]]]).to(dtype)
    try:
        want = f(x)
    except NotImplementedError:
        with pytest.raises(NotImplementedError):
            f(x.to("tpu")).cpu()
        # (Dynamo's fake run raises some of these itself, as a RuntimeError
        # on any device: NotImplementedError is one)
        with pytest.raises(RuntimeError):
            torch._dynamo.reset()
            torch.compile(f, backend="tpu")(x.to("tpu")).cpu()
        return
    assert torch.equal(f(x.to("tpu")).cpu(), want)


class _OpsCalled:
    """Records the ATen ops a block calls (a dispatch mode: it does not turn
    PyTorch's fast paths off, a torch_function mode would)."""

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        names = self.names = set()

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                names.add(str(func.overloadpacket))
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)


_ENCODER_FAST_PATH = {
    "plain": dict(),
    "gelu": dict(activation="gelu"),
    "norm_first": dict(norm_first=True),
    "key_padding_mask": dict(padding=True),
    "attn_mask": dict(attn_mask=True),
    "both_masks": dict(padding=True, attn_mask=True),
    "fully_masked_row": dict(padding=True, full_row=True),
}


@pytest.mark.parametrize("case", sorted(_ENCODER_FAST_PATH))
def test_transformer_encoder_layer_inference_fast_path_on_the_device(case):
    """nn.TransformerEncoderLayer in eval under no_grad calls
    _transformer_encoder_layer_fwd (and nn.MultiheadAttention calls
    _native_multi_head_attention), which took the CPU fallback; they run on
    the device now, against CPU's fused kernels."""
    opts = dict(_ENCODER_FAST_PATH[case])
    padding, attn_mask, full_row = (opts.pop(k, False) for k in ("padding", "attn_mask", "full_row"))
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0,
                                             batch_first=True, **opts).eval()
    x = make((3, 5, 16))
    kpm = torch.tensor([[False] * 5, [False, False, False, True, True], [False] * 4 + [True]])
    if full_row:
        kpm[1] = True
    am = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    kwargs = {}
    if padding:
        kwargs["src_key_padding_mask"] = kpm
    if attn_mask:
        kwargs["src_mask"] = am
    with torch.no_grad():
        want = layer(x, **kwargs)
        dev = layer.to("tpu")
        with no_fallback(), _OpsCalled() as called:
            got = dev(x.to("tpu"), **{k: v.to("tpu") for k, v in kwargs.items()})
    assert "aten._transformer_encoder_layer_fwd" in called.names, called.names
    assert got.device.type == "tpu"
    assert_close(got, want)


@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_multihead_attention_inference_fast_path_on_the_device(need_weights, average):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = make((2, 6, 16))
    kpm = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    with torch.no_grad():
        want = mha(x, x, x, key_padding_mask=kpm, need_weights=need_weights,
                   average_attn_weights=average)
        dev = mha.to("tpu")
        xt = x.to("tpu")
        with no_fallback(), _OpsCalled() as called:
            got = dev(xt, xt, xt, key_padding_mask=kpm.to("tpu"), need_weights=need_weights,
                      average_attn_weights=average)
    assert "aten._native_multi_head_attention" in called.names, called.names
    assert_close(got[0], want[0])
    if need_weights:
        assert_close(got[1], want[1])
    else:
        assert got[1] is None and want[1] is None


@pytest.mark.parametrize("mode,shape", [("linear", (2, 3, 7)), ("bilinear", (2, 3, 5, 6)),
                                        ("trilinear", (1, 2, 3, 4, 5)), ("bicubic", (2, 3, 5, 6))])
@pytest.mark.parametrize("align", [False, True])
def test_interpolation_reads_only_its_taps(mode, shape, align):
    """Linear upsampling was a product with an interpolation matrix, so one
    inf input made whole rows NaN (0 * inf) where CPU gives finite values;
    now each output gathers its own taps (resample.c), and bicubic (on the
    CPU fallback before) does the same with CPU's cubic weights."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    x.view(-1)[3] = float("inf")
    for kw in ({"scale_factor": 2.0}, {"scale_factor": 1.7}, {"size": tuple(max(1, s - 2) for s in shape[2:])}):
        same_on_tpu_close(lambda t: F.interpolate(t, mode=mode, align_corners=align, **kw), x)
        check(lambda t: F.interpolate(t, mode=mode, align_corners=align, **kw), make(shape, seed=1), grad=True)
    check(lambda t: F.interpolate(t, mode=mode, align_corners=align, scale_factor=2.0),
          make(shape, dtype=torch.bfloat16, seed=2), dtype=torch.bfloat16)


def same_on_tpu_close(fn, x):
    from op_testing import no_fallback
    with no_fallback():
        got = fn(x.to("tpu")).cpu()
    torch.testing.assert_close(got, fn(x), equal_nan=True)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 4])
def test_embedding_bag_on_the_device(mode, padding_idx):
    """nn.EmbeddingBag ran on the CPU fallback (130 sweep samples): now
    CPU's composition on the device, with its auxiliary outputs and
    backward; max_norm's embedding_renorm_ too."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(10, 3, generator=g)
    idx, off = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4, 4, 6])
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx), w, idx, off, grad=True)
    for fn in (torch.ops.aten._embedding_bag, torch.ops.aten._embedding_bag_forward_only):
        check(lambda w, i, o: fn(w, i, o, False, ["sum", "mean", "max"].index(mode), False, None, False,
                                 -1 if padding_idx is None else padding_idx), w, idx, off, exact=True)
    if mode == "sum":
        psw = torch.rand(8, generator=g)
        check(lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p), w, idx, off, psw,
              grad=True)
    check(lambda w, i: F.embedding_bag(i, w, mode=mode, max_norm=1.0), w * 3, idx.reshape(2, 4))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_on_the_device(mode, padding_mode, align):
    """grid_sample ran on the CPU fallback (234 sweep samples): now CPU's
    coordinate arithmetic (in the input dtype), padding and corner order,
    with the backward for bilinear / trilinear and nearest."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 6, generator=g)
    grid = torch.rand(2, 4, 3, 2, generator=g) * 2.4 - 1.2
    fn = lambda x, grid: F.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=align)
    check(fn, x, grid, grad=mode != "bicubic")
    check(fn, x.bfloat16(), grid.bfloat16(), dtype=torch.bfloat16)
    if mode != "bicubic":
        x3, grid3 = torch.randn(1, 2, 4, 5, 3, generator=g), torch.rand(1, 3, 2, 4, 3, generator=g) * 2.4 - 1.2
        check(fn, x3, grid3, grad=True)


@pytest.mark.parametrize("variant", ["with_update", "no_update", "functional"])
def test_batch_norm_with_update_on_the_device(variant):
    """_batch_norm_with_update / _no_update / _functional (torch.compile's
    BatchNorm) ran on the CPU fallback: now native_batch_norm as CPU's
    kernels compose them, running stats and gradients included."""
    from op_testing import no_fallback
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(4, 3, 5, generator=g), torch.randn(3, generator=g), torch.randn(3, generator=g)
    results = []
    for d in ("cpu", "tpu"):
        rm, rv = torch.zeros(3, device=d), torch.ones(3, device=d)
        xi, wi, bi = [t.to(d).requires_grad_() for t in (x, w, b)]
        with no_fallback() if d == "tpu" else contextlib.nullcontext():
            fn = getattr(torch.ops.aten, "_batch_norm_" + ("with_update_functional" if variant == "functional"
                                                            else variant))
            r = fn(xi, wi, bi, rm, rv, 0.1, 1e-5)
            grads = torch.autograd.grad(r[0], (xi, wi, bi), torch.ones_like(r[0])) if variant != "functional" else ()
        results.append([t.detach().cpu() for t in list(r) + [rm, rv] + list(grads)])
    for got, want in zip(results[1], results[0]):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("nd", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fractional_max_pool_on_the_device(nd, dtype):
    """fractional_max_pool2d/3d and their backward ran on the CPU fallback
    (340 sweep samples): now CPU's window starts from each plane's sample
    (in the input dtype) and CPU's first-maximum / last-NaN rule."""
    g = torch.Generator().manual_seed(nd)
    shape = (2, 3, 9, 8) if nd == 2 else (2, 2, 7, 6, 8)
    x = torch.randn(shape, generator=g).to(dtype)
    x.view(-1)[5] = float("nan")
    rs = torch.rand(shape[0], shape[1], nd, generator=g).to(dtype)
    f = F.fractional_max_pool2d if nd == 2 else F.fractional_max_pool3d
    for k, o in ((2, 3), (3, 3)):
        check(lambda x, rs: f(x, k, output_size=o, return_indices=True, _random_samples=rs), x, rs, exact=True,
              dtype=dtype)
    if dtype == torch.float32:
        rs_t = rs.to("tpu")
        check(lambda x: f(x, 2, output_size=3, _random_samples=rs if x.device.type == "cpu" else rs_t),
              torch.randn(shape, generator=g), grad=True)
