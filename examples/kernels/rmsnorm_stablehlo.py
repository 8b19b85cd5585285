"""A fused RMSNorm written in StableHLO, used as a PyTorch op inside a small
model trained under torch.compile(backend="tpu"). Its backward is PyTorch
code (recomputed from the inputs), so autograd works through the kernel."""
import torch
import torch.nn as nn

import torchtpu
import torchtpu.kernels

EPS = 1e-6


def rmsnorm_text(x_spec, w_spec):
    """StableHLO for x [rows, dim] (float32) and weight [dim]."""
    (_, (rows, dim)), _ = x_spec, w_spec
    t, v = f"tensor<{rows}x{dim}xf32>", f"tensor<{rows}xf32>"
    return f"""
func.func @main(%x: {t}, %w: tensor<{dim}xf32>) -> {t} {{
  %sq = stablehlo.multiply %x, %x : {t}
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %sum = stablehlo.reduce(%sq init: %zero) applies stablehlo.add across dimensions = [1]
      : ({t}, tensor<f32>) -> {v}
  %n = stablehlo.constant dense<{float(dim)}> : {v}
  %eps = stablehlo.constant dense<{EPS:.1e}> : {v}
  %mean = stablehlo.divide %sum, %n : {v}
  %r = stablehlo.rsqrt %0 : {v}
  %rb = stablehlo.broadcast_in_dim %r, dims = [0] : ({v}) -> {t}
  %wb = stablehlo.broadcast_in_dim %w, dims = [1] : (tensor<{dim}xf32>) -> {t}
  %y = stablehlo.multiply %x, %rb : {t}
  %out = stablehlo.multiply %y, %wb : {t}
  return %out : {t}
}}""".replace("%r = stablehlo.rsqrt %0", "%me = stablehlo.add %mean, %eps : " + v +
              "\n  %r = stablehlo.rsqrt %me")


def rmsnorm_reference(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rmsnorm_backward(inputs, outputs, grads):
    x, w = inputs
    with torch.enable_grad():
        x = x.detach().requires_grad_()
        w = w.detach().requires_grad_()
        y = rmsnorm_reference(x, w)
    return list(torch.autograd.grad(y, (x, w), grads[0]))


rmsnorm = torchtpu.kernels.stablehlo("fused_rmsnorm", rmsnorm_text, backward=rmsnorm_backward)


class Model(nn.Module):
    def __init__(self, dim=32, classes=4):
        super().__init__()
        self.up = nn.Linear(dim, dim)
        self.norm_weight = nn.Parameter(torch.ones(dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        h = torch.relu(self.up(x))
        return self.head(rmsnorm(h, self.norm_weight))


def train(steps=30):
    torch.manual_seed(0)
    model = Model().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step_model = torch.compile(model, backend="tpu", fullgraph=True)
    x = torch.randn(64, 32, device="tpu")
    y = torch.randint(0, 4, (64,), device="tpu")
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
    print(f"fused RMSNorm (StableHLO) model under torch.compile: loss {losses[0]:.3f} -> "
          f"{losses[-1]:.3f}")
