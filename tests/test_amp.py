"""torch.autocast("tpu"): PyTorch's cast policy on the tpu device, checked
against CPU autocast and float32."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu  # noqa: F401


def test_supported_dtypes_and_availability():
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16, torch.float32]
    assert torch.amp.autocast_mode.is_autocast_available("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert torch.tpu.is_autocast_enabled() and torch.tpu.get_autocast_dtype() == torch.bfloat16
    assert not torch.tpu.is_autocast_enabled()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cast_policy(dtype):
    """Matmuls in the autocast dtype; softmax, norms, reductions and losses
    in float32 (CUDA's lists); values within the low dtype's precision of
    float32 on CPU."""
    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(16, 8)
    low, f32 = dtype, torch.float32
    cases = {
        "mm": (lambda x, y: x @ y, low),
        "linear": (lambda x, y: F.linear(x, y.t()), low),
        "softmax": (lambda x, y: (x @ y).softmax(-1), f32),
        "log_softmax": (lambda x, y: F.log_softmax(x @ y, -1), f32),
        "layer_norm": (lambda x, y: F.layer_norm(x @ y, (8,)), f32),
        "sum": (lambda x, y: (x @ y).sum(), f32),
        "add": (lambda x, y: (x @ y) + 1, low),
        "mse": (lambda x, y: F.mse_loss(x @ y, torch.zeros(8, 8, device=x.device)), f32),
    }
    for name, (f, want_dtype) in cases.items():
        want = f(a, b)
        with torch.autocast("tpu", dtype=dtype):
            got = f(a.to("tpu"), b.to("tpu"))
        assert got.dtype == want_dtype, name
        torch.testing.assert_close(got.cpu().float(), want, rtol=3e-2, atol=6e-2, msg=name)


def test_autocast_training_step_with_grad_scaler_api():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("tpu", enabled=False)  # bf16 needs no scaling; API accepts "tpu"
    x, y = torch.randn(64, 16, device="tpu"), torch.randint(0, 4, (64,), device="tpu")
    losses = []
    for _ in range(15):
        with torch.autocast("tpu", dtype=torch.bfloat16):
            out = model(x)
            assert out.dtype == torch.bfloat16
            loss = F.cross_entropy(out, y)
        assert loss.dtype == torch.float32
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    assert losses[-1] < 0.7 * losses[0]
