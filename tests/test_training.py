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


class TiedLM(torch.nn.Module):
    """nanoGPT's shape of weight tying: the head shares the embedding."""

    def __init__(self, vocab=37, dim=16):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, dim)
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, idx):
        return self.head(self.ln(self.wte(idx)) * self.scale)


def train_tied(device, steps=6, optimizer_before_move=True):
    torch.manual_seed(0)
    model = TiedLM()
    params = list(model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2) if optimizer_before_move else None
    model.to(device)
    assert [p for p in model.parameters()] == params  # the same objects
    assert model.head.weight is model.wte.weight
    if opt is None:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, 37, (4, 9), generator=g).to(device)
    losses = []
    for _ in range(steps):
        logits = model(idx[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 37), idx[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(p.device.type == torch.device(device).type for p in params)
    return losses, len(list(model.parameters()))


def test_module_to_keeps_parameters_and_tied_weights():
    """Module.to("tpu") moves each Parameter in place (as on CUDA): tied
    weights stay one tensor and an optimizer built before the move trains
    the moved model, matching CPU step for step."""
    cpu, n_cpu = train_tied("cpu")
    for before in (True, False):
        tpu, n_tpu = train_tied("tpu", optimizer_before_move=before)
        assert n_tpu == n_cpu
        torch.testing.assert_close(torch.tensor(tpu), torch.tensor(cpu), rtol=1e-4, atol=1e-5)


def test_module_round_trip_and_dtype_moves_keep_parameters():
    model = TiedLM()
    w = model.wte.weight
    model(torch.tensor([[1, 2]])).sum().backward()
    grad = w.grad.clone()
    model.to("tpu")
    assert model.wte.weight is w and w.device.type == "tpu" and w.grad.device.type == "tpu"
    assert torch.equal(w.grad.cpu(), grad)
    model.to(torch.bfloat16)
    assert model.head.weight is w and w.dtype == torch.bfloat16
    model.cpu().float()
    assert model.wte.weight is w and w.device.type == "cpu" and model.head.weight is w
    assert model.scale.device.type == "cpu"
