"""Ops that run on the device through the lowering table, compared with
CPU PyTorch; none of them may touch the CPU fallback."""
import pytest
import torch

import torchtpu

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


@pytest.fixture(autouse=True)
def no_fallback():
    torchtpu.metrics.reset()
    yield
    assert torchtpu.metrics.fallback_counts() == {}


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def tol(dtype):
    return {"atol": 1e-2, "rtol": 1e-2} if dtype in (torch.bfloat16, torch.float16) \
        else {"atol": 1e-5, "rtol": 1e-5}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_binary_same_shape_and_broadcast(op, dtype):
    fn = getattr(torch, op)
    a, b, row = rand(4, 5, dtype=dtype), rand(4, 5, dtype=dtype, seed=1), rand(5, dtype=dtype, seed=2)
    for x, y in ((a, b), (a, row), (row, a), (a[:1], a)):
        got = fn(x.to("tpu"), y.to("tpu")).cpu()
        torch.testing.assert_close(got, fn(x, y), **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_integer_arithmetic_exact(dtype):
    a = torch.randint(-1000, 1000, (3, 7), dtype=dtype)
    b = torch.randint(-1000, 1000, (7,), dtype=dtype)
    ta, tb = a.to("tpu"), b.to("tpu")
    assert torch.equal((ta + tb).cpu(), a + b)
    assert torch.equal((ta - tb).cpu(), a - b)
    assert torch.equal((ta * tb).cpu(), a * b)


def test_noncontiguous_operands():
    a = rand(6, 4)
    ta = a.to("tpu")
    torch.testing.assert_close((ta.t() * 2).cpu(), a.t() * 2)
    torch.testing.assert_close((ta[1:4] + ta[2:5]).cpu(), a[1:4] + a[2:5])


def test_python_scalars_are_runtime_arguments():
    a = rand(8)
    ta = a.to("tpu")
    (ta * 0.5).cpu()
    compiles = torchtpu.metrics.metrics().get("compiles", 0)
    for lr in (0.1, 0.01, 3.0, -2.5):
        torch.testing.assert_close((ta * lr).cpu(), a * lr)
        torch.testing.assert_close((ta + lr).cpu(), a + lr)
    (ta + 1.0).cpu()
    # One compile for the first `+` scalar program, none for new values.
    assert torchtpu.metrics.metrics()["compiles"] - compiles <= 1


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_mm(dtype):
    a, b = rand(7, 9, dtype=dtype), rand(9, 5, dtype=dtype, seed=3)
    torch.testing.assert_close((a.to("tpu") @ b.to("tpu")).cpu(), a @ b, **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64,
                                   torch.int8, torch.bool, torch.complex64], ids=str)
def test_fill_and_zero(dtype):
    t = torch.empty(3, 4, dtype=dtype, device="tpu")
    value = True if dtype == torch.bool else 3
    t.fill_(value)
    assert torch.equal(t.cpu(), torch.full((3, 4), value, dtype=dtype))
    t[1].zero_()  # a view: written through the base
    ref = torch.full((3, 4), value, dtype=dtype)
    ref[1] = 0
    assert torch.equal(t.cpu(), ref)


def test_run_stablehlo_module_and_errors():
    a = rand(2, 3)
    module = """
module @m {
  func.func public @main(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
    %0 = "stablehlo.multiply"(%x, %y) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %1 = "stablehlo.exponential"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    "func.return"(%0, %1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> ()
  }
}"""
    ta = a.to("tpu")
    prod, ex = torchtpu.runtime.run_stablehlo(module, ta, ta)
    torch.testing.assert_close(prod.cpu(), a * a)
    torch.testing.assert_close(ex.cpu(), a.exp())
    with pytest.raises(RuntimeError, match="does not compile.*error"):
        torchtpu.runtime.run_stablehlo("module { this is not stablehlo", ta)
    with pytest.raises(RuntimeError, match=r"argument 0 is declared tensor<2x3xf32>"):
        torchtpu.runtime.run_stablehlo(module, ta[:1], ta[:1])
    # Same byte size, other dtype: PJRT alone would reinterpret the bits.
    with pytest.raises(RuntimeError, match=r"argument 1 is declared"):
        torchtpu.runtime.run_stablehlo(module, ta, ta.view(torch.int32))
    with pytest.raises(RuntimeError, match="takes 2 arguments, got 1"):
        torchtpu.runtime.run_stablehlo(module, ta)
    # The process keeps working after both errors.
    torch.testing.assert_close((ta + ta).cpu(), a + a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_polar(dtype):
    """torch.polar (torchtitan's rotary frequencies): abs * e^(i angle), with
    broadcasting, on the device (it used to fall back to the CPU)."""
    r, theta = rand(5, 1, 4, dtype=dtype).abs(), rand(1, 3, 4, dtype=dtype, seed=1) * 4
    got = torch.polar(r.to("tpu"), theta.to("tpu"))
    assert got.dtype == torch.polar(r, theta).dtype
    torch.testing.assert_close(got.cpu(), torch.polar(r, theta), **tol(dtype))
