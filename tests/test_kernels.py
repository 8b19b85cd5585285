"""Custom kernels (torchtpu.kernels): StableHLO, JAX and Pallas kernels as
PyTorch ops, forward and backward against PyTorch references, in eager and
under torch.compile with no graph break."""
import os
import sys

import pytest
import torch

import torchtpu
import torchtpu.kernels as K

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples", "kernels"))
jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import pallas_softmax  # noqa: E402
import rmsnorm_stablehlo  # noqa: E402


def counters():
    return torchtpu.metrics.metrics()


def grads_of(f, *tensors):
    ts = [t.detach().clone().requires_grad_() for t in tensors]
    out = f(*ts)
    out.square().sum().backward()
    return out.detach(), [t.grad for t in ts]


def check(kernel_fn, reference, *cpu_inputs, compiled=False, tol=1e-5):
    want, want_grads = grads_of(reference, *cpu_inputs)
    torch._dynamo.reset()
    fn = torch.compile(kernel_fn, backend="tpu", fullgraph=True) if compiled else kernel_fn
    before = counters()
    got, got_grads = grads_of(fn, *[t.to("tpu") for t in cpu_inputs])
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g.cpu(), w, rtol=tol, atol=tol)
    after = counters()
    if compiled:  # forward and backward each one graph, nothing run eagerly
        built = sum(after.get(k, 0) - before.get(k, 0)
                    for k in ("compiled_graphs", "compiled_graph_loads"))
        assert built == 2
        assert after.get("compile_graphs_eager", 0) == before.get("compile_graphs_eager", 0)
    return before, after


@pytest.mark.parametrize("compiled", [False, True])
def test_stablehlo_rmsnorm_forward_backward(compiled):
    x, w = torch.randn(6, 32), torch.rand(32) + 0.5
    before, after = check(rmsnorm_stablehlo.rmsnorm, rmsnorm_stablehlo.rmsnorm_reference, x, w,
                          compiled=compiled)
    if not compiled:  # eager runs on the storages' buffers: nothing restaged
        assert after.get("restages", 0) == before.get("restages", 0)


@pytest.mark.parametrize("compiled", [False, True])
def test_jax_kernel_with_jax_vjp(compiled):
    kern = K.jax(lambda a, b: jnp.tanh(a) * b + jnp.sin(b), name=f"tanh_mul_{int(compiled)}")
    x, w = torch.randn(4, 8), torch.randn(8)
    check(kern, lambda a, b: torch.tanh(a) * b + torch.sin(b), x, w, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True])
def test_pallas_softmax(compiled):
    x = torch.randn(8, 16)
    check(pallas_softmax.softmax, lambda a: torch.softmax(a, -1), x, compiled=compiled)


def test_no_graph_break_and_per_shape_lowering():
    from torch._dynamo.utils import counters as dynamo_counters
    kern = K.jax(lambda a: jnp.cos(a) * 2, name="cos2")
    f = torch.compile(lambda a: kern(a + 1) - 1, backend="tpu", fullgraph=True)
    dynamo_counters.clear()
    for n in (3, 5):
        x = torch.randn(n)
        torch.testing.assert_close(f(x.to("tpu")).cpu(), torch.cos(x + 1) * 2 - 1)
        torch.testing.assert_close(kern(x.to("tpu")).cpu(), torch.cos(x) * 2)
    assert not dynamo_counters["graph_break"]
    assert len(kern.definition.by_spec) == 2  # one lowering per input shape, like jax.jit


def test_jax_static_arguments_like_jit():
    def scaled_sum(a, *, axis, scale):
        return jnp.sum(a, axis=axis) * scale

    kern = K.jax(scaled_sum, static_argnames=("axis", "scale"))
    x = torch.randn(3, 4)
    for axis, scale in ((0, 2.0), (1, 0.5), (0, 2.0)):
        xt = x.to("tpu").requires_grad_()
        y = kern(xt, axis=axis, scale=scale)
        torch.testing.assert_close(y.detach().cpu(), x.sum(axis) * scale)
        y.sum().backward()
        torch.testing.assert_close(xt.grad.cpu(), torch.full_like(x, scale))
    assert len(kern.by_static) == 2  # one kernel per set of static values
    with pytest.raises(K.KernelError, match="are not static arguments"):
        kern(x.to("tpu"), axis=0, scale=1.0, bogus=1)


def test_examples_train():
    r = rmsnorm_stablehlo.train(steps=20)
    p = pallas_softmax.train(steps=20)
    assert r[-1] < 0.5 * r[0] and p[-1] < 0.8 * p[0]


def test_bad_kernels_raise_naming_the_kernel():
    x = torch.randn(4, 8, device="tpu")
    broken = K.stablehlo("broken_text", "func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {"
                         " %y = stablehlo.frobnicate %x : tensor<4x8xf32> return %y }")
    with pytest.raises(K.KernelError, match="kernel 'broken_text'"):
        broken(x)
    with pytest.raises(K.KernelError, match="kernel 'no_main'"):
        K.stablehlo("no_main", "func.func @other() { return }")(x)
    good = ("func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {\n"
            "  %y = stablehlo.negate %x : tensor<4x8xf32>\n  return %y : tensor<4x8xf32>\n}")
    wrong = K.stablehlo("wrong_shape", good, outputs=lambda s: [(torch.float32, (8, 4))])
    with pytest.raises(K.KernelError, match=r"kernel 'wrong_shape': declared outputs \[float32\[8, 4\]\]"):
        wrong(x)
    # under torch.compile Dynamo wraps the error; the message still names it
    with pytest.raises(Exception, match="kernel 'wrong_shape': declared outputs"):
        torch.compile(lambda a: wrong(a), backend="tpu")(x)
    with pytest.raises(K.KernelError, match=r"kernel 'neg_fixed': called with \[float32\[2, 2\]\]"):
        K.stablehlo("neg_fixed", good)(torch.ones(2, 2, device="tpu"))
    two_args = K.jax(lambda a, b: a + b, name="needs_two")
    with pytest.raises(K.KernelError, match="kernel 'needs_two': JAX could not lower it"):
        two_args(x)
    with pytest.raises(K.KernelError, match="kernel 'complex_in'.*complex64"):
        K.jax(lambda a: a, name="complex_in")(torch.ones(2, dtype=torch.complex64, device="tpu"))
    with pytest.raises(K.KernelError, match="already defined"):
        K.stablehlo("broken_text", good)
