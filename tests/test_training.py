"""End-to-end training on tpu matches CPU: an MLP and the demo transformer,
20 steps each from the same seed, losses within float32 tolerance, and no
op on the CPU fallback."""
import os
import sys

import torch

from op_testing import no_fallback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples"))
from tiny_gpt import train  # noqa: E402


def train_mlp(device, steps=20):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.SiLU(),
        torch.nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=True)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 16, generator=g)
    y = (x @ torch.randn(16, 4, generator=g)).argmax(1)  # learnable labels
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_mlp_trains_like_cpu():
    cpu = train_mlp("cpu")
    with no_fallback():
        tpu = train_mlp("tpu")
    torch.testing.assert_close(torch.tensor(tpu), torch.tensor(cpu), rtol=1e-4, atol=1e-5)
    assert tpu[-1] < tpu[0] * 0.9  # it learns


def test_demo_transformer_trains_like_cpu():
    cpu, _ = train("cpu", 20, batch_size=8, seq_len=32)
    with no_fallback():
        tpu, _ = train("tpu", 20, batch_size=8, seq_len=32)
    torch.testing.assert_close(torch.tensor(tpu), torch.tensor(cpu), rtol=1e-4, atol=1e-4)
    assert tpu[-1] < tpu[0]
