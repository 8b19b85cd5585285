"""A Pallas softmax kernel (run by JAX's Pallas interpreter on CPU; compiled
for the chip on TPU) used as a PyTorch op inside a small model trained under
torch.compile(backend="tpu"). Pallas kernels have no JAX autodiff rule, so
the backward is supplied (PyTorch code on the kernel's output)."""
import jax
import jax.numpy as jnp
import torch
import torch.nn as nn
from jax.experimental import pallas as pl

import torchtpu
import torchtpu.kernels


def _softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)


def pallas_softmax(x):
    # interpret=True: the kernel body runs as ordinary JAX ops, which lower
    # to StableHLO any PJRT plugin runs.
    return pl.pallas_call(_softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          interpret=True)(x)


def softmax_backward(inputs, outputs, grads):
    # Pallas kernels have no JAX autodiff rule, so the backward is ours:
    # d softmax = y * (g - sum(g * y)), in PyTorch on the tpu tensors.
    (y,), (g,) = outputs, grads
    return [y * (g - (g * y).sum(-1, keepdim=True))]


softmax = torchtpu.kernels.jax(pallas_softmax, name="pallas_softmax", backward=softmax_backward)


class Model(nn.Module):
    def __init__(self, dim=16, classes=4):
        super().__init__()
        self.scores = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        attn = softmax(self.scores(x))  # a softmax "attention" over features
        return self.head(attn * x)


def train(steps=30):
    torch.manual_seed(0)
    model = Model().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2)
    step_model = torch.compile(model, backend="tpu", fullgraph=True)
    x = torch.randn(32, 16, device="tpu")
    y = torch.randint(0, 4, (32,), device="tpu")
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(step_model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


if __name__ == "__main__":
    losses = train()
    print(f"Pallas softmax model under torch.compile: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
