"""foreach family vs CPU: the _foreach_* ops (every overload the optimizers
use: Scalar, List, ScalarList, Tensor), in-place and functional, and the
real SGD / Adam / AdamW (foreach=True) steps and clip_grad_norm_; no CPU
fallback."""
import math

import pytest
import torch

import torchtpu
from op_testing import assert_close, check, make, no_fallback, to_tpu

FLOATS = [torch.float32, torch.bfloat16]
SHAPES = [(3, 4), (5,), ()]


def tensors(dtype=torch.float32, seed=0, low=None, high=None, noncontiguous=False):
    return [make(s, dtype, seed=seed + i, low=low, high=high, noncontiguous=noncontiguous)
            for i, s in enumerate(SHAPES)]


def inplace(op):
    """fn(xs, *rest) running op on clones of xs and returning them."""
    def fn(xs, *rest, **kw):
        c = [x.clone() for x in xs]
        op(c, *rest, **kw)
        return c
    return fn


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
@pytest.mark.parametrize("name", ["add", "sub", "mul"])
def test_binary_list_scalar_tensor(dtype, name):
    xs, ys = tensors(dtype, 0), tensors(dtype, 10)
    f, f_ = getattr(torch, f"_foreach_{name}"), getattr(torch, f"_foreach_{name}_")
    alpha = {} if name == "mul" else {"alpha": 2}
    check(lambda xs, ys: f(xs, ys, **alpha), xs, ys, dtype=dtype)
    check(inplace(f_), xs, ys, dtype=dtype, **alpha)
    s = 3 if dtype == torch.int64 else 0.5
    check(lambda xs: f(xs, s), xs, dtype=dtype)
    check(inplace(f_), xs, s, dtype=dtype)
    if name != "sub":
        # Tensor overload: one 0-dim tensor for every element
        t = torch.tensor(s, dtype=dtype)
        check(lambda xs, t: f(xs, t, **alpha), xs, t, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_div(dtype):
    xs, ys = tensors(dtype, 0), tensors(dtype, 10, low=1, high=5)
    check(lambda xs, ys: torch._foreach_div(xs, ys), xs, ys, dtype=dtype)
    check(lambda xs: torch._foreach_div(xs, 3), xs, dtype=dtype)
    if dtype.is_floating_point:
        check(inplace(torch._foreach_div_), xs, ys, dtype=dtype)
        check(lambda xs, t: torch._foreach_div(xs, t), xs, torch.tensor(1.5, dtype=dtype),
              dtype=dtype)


def test_noncontiguous_lists():
    xs, ys = tensors(noncontiguous=True), tensors(seed=10, noncontiguous=True)
    check(lambda xs, ys: torch._foreach_add(xs, ys, alpha=-0.5), xs, ys)
    check(inplace(torch._foreach_mul_), xs, ys)
    check(inplace(torch._foreach_lerp_), xs, ys, 0.3)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addcmul_addcdiv(dtype, name):
    xs, t1, t2 = tensors(dtype, 0), tensors(dtype, 10), tensors(dtype, 20, low=0.5, high=2)
    f, f_ = getattr(torch, f"_foreach_{name}"), getattr(torch, f"_foreach_{name}_")
    check(lambda a, b, c: f(a, b, c), xs, t1, t2, dtype=dtype)
    check(lambda a, b, c: f(a, b, c, value=-0.25), xs, t1, t2, dtype=dtype)
    check(inplace(f_), xs, t1, t2, 0.75, dtype=dtype)


# The Tensor overload takes a 1-D CPU tensor (one scalar per element, PyTorch
# insists on CPU); the engine refuses CPU tensors of rank > 0 ("a non-scalar
# tensor on cpu", dispatch.cpp add_tensor) instead of passing their values.
@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addcmul_addcdiv_tensor_scalars(name):
    xs, t1, t2 = tensors(seed=0), tensors(seed=10), tensors(seed=20, low=0.5, high=2)
    f = getattr(torch, f"_foreach_{name}")
    s = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float32)
    check(lambda a, b, c: f(a, b, c, s), xs, t1, t2)


@pytest.mark.parametrize("dtype", FLOATS)
def test_scalar_lists(dtype):
    xs, t1, t2 = tensors(dtype, 0), tensors(dtype, 10), tensors(dtype, 20, low=0.5, high=2)
    sl = [0.5, -2.0, 3.0]
    check(lambda xs: torch._foreach_add(xs, sl), xs, dtype=dtype)
    check(lambda xs: torch._foreach_sub(xs, sl), xs, dtype=dtype)
    check(lambda xs: torch._foreach_mul(xs, sl), xs, dtype=dtype)
    check(inplace(torch._foreach_div_), xs, sl, dtype=dtype)
    check(lambda a, b, c: torch._foreach_addcdiv(a, b, c, sl), xs, t1, t2, dtype=dtype)
    check(lambda a, b, c: torch._foreach_addcmul(a, b, c, sl), xs, t1, t2, dtype=dtype)
    check(lambda xs: torch._foreach_maximum(xs, sl), xs, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_lerp(dtype):
    xs, ys, ws = tensors(dtype, 0), tensors(dtype, 10), tensors(dtype, 20, low=0, high=1)
    for w in (0.1, 0.5, 0.9):
        check(lambda a, b: torch._foreach_lerp(a, b, w), xs, ys, dtype=dtype)
    check(inplace(torch._foreach_lerp_), xs, ys, 0.3, dtype=dtype)
    check(lambda a, b, w: torch._foreach_lerp(a, b, w), xs, ys, ws, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
@pytest.mark.parametrize("name", ["maximum", "minimum", "clamp_min", "clamp_max"])
def test_maximum_minimum_clamp(dtype, name):
    xs, ys = tensors(dtype, 0), tensors(dtype, 10)
    if dtype.is_floating_point:
        xs[0][0, 0] = float("nan")
        ys[1][2] = float("nan")
    f, f_ = getattr(torch, f"_foreach_{name}"), getattr(torch, f"_foreach_{name}_")
    check(lambda a, b: f(a, b), xs, ys, dtype=dtype)
    check(inplace(f_), xs, ys, dtype=dtype)
    check(lambda a: f(a, 0 if dtype == torch.int64 else 0.25), xs, dtype=dtype)


# sqrt, exp and reciprocal produce floats: int64 inputs only for the others.
UNARY_CASES = [(d, n) for d in FLOATS + [torch.int64]
               for n in ["sqrt", "neg", "exp", "abs", "sign", "reciprocal", "zero"]
               if not (d == torch.int64 and n in ("sqrt", "exp", "reciprocal"))]


@pytest.mark.parametrize("dtype,name", UNARY_CASES)
def test_unary(dtype, name):
    low = 0.1 if name in ("sqrt", "reciprocal") else -2
    xs = tensors(dtype, 0, low=low if dtype.is_floating_point else None, high=2 if dtype.is_floating_point else None)
    if dtype.is_floating_point and name == "sign":
        xs[0][1, 1] = float("nan")
    check(inplace(getattr(torch, f"_foreach_{name}_")), xs, dtype=dtype)
    if name != "zero":
        check(lambda a: getattr(torch, f"_foreach_{name}")(a), xs, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow(dtype):
    xs, es = tensors(dtype, 0, low=0.5, high=2), tensors(dtype, 10, low=-2, high=2)
    check(lambda a: torch._foreach_pow(a, 2.0), xs, dtype=dtype)
    check(lambda a: torch._foreach_pow(a, 0.5), xs, dtype=dtype)
    check(lambda a, e: torch._foreach_pow(a, e), xs, es, dtype=dtype)
    check(lambda e: torch._foreach_pow(0.9, e), es, dtype=dtype)
    check(lambda a: torch._foreach_pow(a, [1.0, 2.0, 3.0]), xs, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ord", [2, 1, math.inf, -math.inf, 0, 3.0])
def test_norm(dtype, ord):
    xs = tensors(dtype, 0)
    check(lambda a: torch._foreach_norm(a, ord), xs, dtype=dtype)
    check(lambda a: torch._foreach_norm(a, ord, dtype=torch.float32), xs, dtype=dtype)


def test_max_and_copy():
    xs, ys = tensors(torch.float32, 0), tensors(torch.float64, 10)
    check(lambda a: torch._foreach_max(a), xs)
    check(inplace(torch._foreach_copy_), xs, ys)


def test_foreach_runs_as_one_program():
    """A _foreach_ call over a list is one device program (the table's
    _foreach_ rows), not one op per element."""
    xs = to_tpu(tensors())
    ys = to_tpu(tensors(seed=10))
    torch._foreach_add_(xs, ys, alpha=2.0)  # compile outside the count
    torchtpu.metrics.reset()
    with no_fallback():
        torch._foreach_add_(xs, ys, alpha=2.0)
        torch._foreach_lerp_(xs, ys, 0.1)
        torchtpu.flush()
    # defer_and_fuse runs both calls as one fused program.
    expected = 1 if torchtpu.get_eager_mode() == "defer_and_fuse" else 2
    assert torchtpu.metrics.metrics().get("executions") == expected


# ---- real optimizers ------------------------------------------------------

def _train(opt_cls, device, dtype, steps=3, **kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3)).to(dtype)
    params = [p.detach().clone().to(device).requires_grad_() for p in model.parameters()]
    opt = opt_cls(params, **kw)
    for step in range(steps):
        g = torch.Generator().manual_seed(100 + step)
        for p in params:
            p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype).to(device)
        opt.step()
    return [p.detach().cpu() for p in params]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opt_cls,kw", [
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, maximize=True)),
    (torch.optim.Adam, dict(lr=0.01)),
    (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    (torch.optim.AdamW, dict(lr=0.01)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True, maximize=True)),
], ids=["sgd", "sgd-momentum", "sgd-nesterov", "sgd-maximize", "adam", "adam-amsgrad",
        "adamw", "adamw-amsgrad"])
def test_optimizer_foreach_matches_cpu(dtype, opt_cls, kw):
    want = _train(opt_cls, "cpu", dtype, foreach=True, **kw)
    with no_fallback():
        got = _train(opt_cls, "tpu", dtype, foreach=True, **kw)
    assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opt_cls,kw", [
    (torch.optim.Adam, dict(lr=0.01)),
    (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True, maximize=True)),
    (torch.optim.AdamW, dict(lr=0.01)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
], ids=["adam", "adam-amsgrad", "adamw", "adamw-amsgrad"])
def test_optimizer_fused_matches_cpu(dtype, opt_cls, kw):
    want = _train(opt_cls, "cpu", dtype, fused=True, **kw)
    with no_fallback():
        got = _train(opt_cls, "tpu", dtype, fused=True, **kw)
    assert_close(got, want, dtype)


def test_clip_grad_norm_foreach():
    ps = tensors(torch.float32, 0)
    gs = tensors(torch.float32, 10)

    def run(device):
        params = [p.clone().to(device).requires_grad_() for p in ps]
        for p, g in zip(params, gs):
            p.grad = g.clone().to(device)
        n = torch.nn.utils.clip_grad_norm_(params, 0.5, foreach=True)
        return [n.cpu()] + [p.grad.cpu() for p in params]

    want = run("cpu")
    with no_fallback():
        got = run("tpu")
    assert_close(got, want)


INPLACE_WRITERS = [
    ("add_ list", lambda xs, ys: torch._foreach_add_(xs, ys, alpha=0.5)),
    ("add_ scalar", lambda xs, ys: torch._foreach_add_(xs, 1.0)),
    ("mul_ scalar", lambda xs, ys: torch._foreach_mul_(xs, 0.5)),
    ("lerp_", lambda xs, ys: torch._foreach_lerp_(xs, ys, 0.3)),
    ("addcmul_", lambda xs, ys: torch._foreach_addcmul_(xs, ys, ys, 0.5)),
    ("addcdiv_", lambda xs, ys: torch._foreach_addcdiv_(xs, ys, [y.abs() + 1 for y in ys])),
    ("copy_", lambda xs, ys: torch._foreach_copy_(xs, ys)),
    ("zero_", lambda xs, ys: torch._foreach_zero_(xs)),
    ("exp_", lambda xs, ys: torch._foreach_exp_(xs)),
]


@pytest.mark.parametrize("name,op", INPLACE_WRITERS, ids=[n for n, _ in INPLACE_WRITERS])
def test_inplace_foreach_bumps_version_counters_as_cpu(name, op):
    # A write must bump each written tensor's version (autograd's check of
    # saved tensors, caches keyed by version): the tpu foreach ops left
    # them unchanged, so an optimizer step went unseen.
    got = []
    for device in ("cpu", "tpu"):
        xs, ys = [t.to(device) for t in tensors()], [t.to(device) for t in tensors(seed=10)]
        before = [x._version for x in xs]
        op(xs, ys)
        got.append([x._version - b for x, b in zip(xs, before)])
    assert got[1] == got[0]


def test_optimizer_step_on_a_saved_parameter_raises_as_cpu():
    # The parameter is saved for the backward, then the foreach step
    # rewrites it: CPU refuses the backward; a silent wrong gradient is not
    # an option.
    errors = []
    for device in ("cpu", "tpu"):
        w = torch.nn.Parameter(torch.randn(4, device=device))
        w.grad = torch.ones(4, device=device)
        loss = (w * w).sum()
        torch.optim.SGD([w], lr=0.1, foreach=True).step()
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as e:
            loss.backward()
        errors.append(type(e.value))
    assert errors[0] is errors[1]
