"""Device placement as on CUDA: an op whose tensors live on different devices
raises "Expected all tensors to be on the same device" before anything runs,
on the device path and on the CPU fallback alike; what PyTorch allows (0-dim
CPU scalars, CPU indices, copies between devices) works and computes on the
device, checked against CPU."""
import warnings

import pytest
import torch

from op_testing import no_fallback
from conftest import run_python

SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"


def tpu(x):
    return x.to("tpu")


def raises_same_device(fn, *args):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match=SAME_DEVICE) as info:
            fn(*args)
    # The fallback never got the call: no warning blames a missing lowering.
    assert not [w for w in seen if "lowering" in str(w.message)], [str(w.message) for w in seen]
    return str(info.value)


MIXED = {
    "add": lambda a, b: a + b,
    "mul_": lambda a, b: a.mul_(b),
    "mm": lambda a, b: a @ b.t(),
    "cat": lambda a, b: torch.cat([a, b]),
    "stack": lambda a, b: torch.stack([a, b]),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "maximum": torch.maximum,
    "copysign": torch.copysign,
    "addcmul": lambda a, b: torch.addcmul(a, a, b),
    "lerp": lambda a, b: torch.lerp(a, b, 0.5),
    "mse_loss": torch.nn.functional.mse_loss,
}


@pytest.mark.parametrize("name", sorted(MIXED))
@pytest.mark.parametrize("tpu_first", [True, False])
def test_mixed_cpu_and_tpu_tensors_raise(name, tpu_first):
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    a, b = (tpu(a), b) if tpu_first else (a, tpu(b))
    msg = raises_same_device(MIXED[name], a, b)
    assert "tpu:0 and cpu!" in msg


def test_matmul_of_cpu_and_tpu_raises_naming_the_op():
    msg = raises_same_device(torch.matmul, torch.randn(3, 4), tpu(torch.randn(4, 2)))
    assert "aten::mm" in msg


def test_nn_ops_with_a_cpu_argument_raise():
    x = tpu(torch.randn(2, 3))
    raises_same_device(torch.nn.functional.cross_entropy, x, torch.tensor([0, 1]))
    raises_same_device(torch.nn.functional.embedding, torch.tensor([0, 1]), x)
    raises_same_device(lambda: x.index_select(0, torch.tensor([1])))
    raises_same_device(lambda: x.masked_fill(torch.tensor([[True, False, True]] * 2), 1.0))
    raises_same_device(lambda: x.gather(1, torch.tensor([[0], [1]])))
    lin = torch.nn.Linear(3, 2)  # left on the CPU, as accelerate did
    raises_same_device(lin, x)


def test_module_on_cpu_with_tpu_input_never_trains_silently():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    x = tpu(torch.randn(5, 4))
    raises_same_device(model, x)


def test_op_without_a_lowering_raises_before_the_fallback():
    # searchsorted runs on the CPU fallback; a CPU argument must still raise.
    raises_same_device(torch.searchsorted, tpu(torch.arange(5.0)), torch.tensor([1.5]))


def test_zero_dim_cpu_tensors_are_scalars():
    a = torch.randn(3, 4)
    s = torch.tensor(2.5)
    cases = [
        lambda x: x + s,
        lambda x: x * torch.tensor(3),
        lambda x: torch.where(x > 0, x, torch.tensor(0.0)),
        lambda x: torch.lerp(x, x * 2, torch.tensor(0.25)),
        lambda x: x.masked_fill(x > 0, torch.tensor(-1.0)),
        lambda x: x.clone().add_(torch.tensor(1.0), alpha=2),
    ]
    for fn in cases:
        want = fn(a)
        with no_fallback():
            got = fn(tpu(a))
        assert got.device.type == "tpu"
        torch.testing.assert_close(got.cpu(), want)


def test_cpu_indices_index_a_tpu_tensor_on_the_device():
    base = torch.arange(24.0).reshape(4, 6)
    idx = torch.tensor([2, 0, 3])
    mask = torch.tensor([True, False, True, True])
    reads = [
        lambda x: x[idx],
        lambda x: x[:, idx],
        lambda x: x[mask],
        lambda x: x[idx, idx],
    ]
    for fn in reads:
        want = fn(base)
        with no_fallback():
            got = fn(tpu(base))
        assert got.device.type == "tpu"
        assert torch.equal(got.cpu(), want)

    def writes(x):
        x[idx] = 7.0
        x[mask, 1] = torch.tensor(-1.0)
        x.index_put_((idx, idx), torch.ones(3, device=x.device), accumulate=True)
        return x

    want = writes(base.clone())
    with no_fallback():
        got = writes(tpu(base))
    assert torch.equal(got.cpu(), want)


def test_tpu_indices_into_a_cpu_tensor_raise_like_cuda():
    # PyTorch's own check (indices on the CPU or on self's device): IndexError.
    c = torch.zeros(3)
    i = tpu(torch.tensor([0]))
    with pytest.raises(IndexError, match="indices should be either on cpu or on the same device"):
        c[i] = 1.0
    with pytest.raises(IndexError, match="indices should be either on cpu or on the same device"):
        c[i]
    assert torch.equal(c, torch.zeros(3))


def test_copies_between_devices_are_allowed():
    c = torch.randn(3, 4)
    t = tpu(torch.zeros(3, 4))
    t.copy_(c)
    assert torch.equal(t.cpu(), c)
    back = torch.zeros(3, 4)
    back.copy_(t * 2)
    assert torch.equal(back, c * 2)
    assert torch.equal(torch.zeros_like(c, device="tpu").cpu(), torch.zeros(3, 4))
    assert torch.equal(c.to(t.device).cpu(), c)


def test_backward_through_mixed_devices_raises():
    w = tpu(torch.randn(4, 2)).requires_grad_()
    x = torch.randn(3, 4)
    raises_same_device(lambda: (x @ w).sum().backward())
    assert w.grad is None


def test_two_tpu_devices_do_not_mix():
    out = run_python(
        "import torch, torchtpu\n"
        "a = torch.ones(3, device='tpu:0'); b = torch.ones(3, device='tpu:1')\n"
        "try:\n"
        "    a + b\n"
        "except RuntimeError as e:\n"
        "    print('RAISED', e)\n",
        {"TORCHTPU_NUM_DEVICES": "2"})
    assert out.returncode == 0, out.stderr
    assert "RAISED " + SAME_DEVICE in out.stdout and "tpu:0 and tpu:1" in out.stdout, out.stdout


def test_compiled_function_with_mixed_devices_raises():
    fn = torch.compile(lambda a, b: a + b, backend="tpu")
    with pytest.raises(RuntimeError):
        fn(tpu(torch.ones(3)), torch.ones(3))
