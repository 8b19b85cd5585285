"""TinyGPT split by DTensor's tensor parallelism over a tpudist mesh (one
process per device, torchrun): Megatron's split of each Block, qkv and fc1
by output features, proj and fc2 by input features, each rank computing
its own attention heads. The peer of torchtpu.spmd's one-process tensor
parallelism in bench/dist_bench.py.

    torchrun --nproc-per-node 4 examples/tiny_gpt_tp.py
"""
import torch
import torch.nn.functional as F


def _tp_forward(self, x):
    # As Block.forward, with this rank's share of the heads: widths come
    # from the tensors (the rank's columns of qkv), not from the model's.
    b, t, _ = x.shape
    q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=2)
    hd = self.qkv.in_features // self.heads
    q, k, v = (z.reshape(b, t, -1, hd).transpose(1, 2) for z in (q, k, v))
    att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + self.proj(att.transpose(1, 2).reshape(b, t, -1))
    return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def tensor_parallel(model, mesh):
    """Splits every Block of `model` (on its tpu device) over the 1-D
    `mesh`. The computed function is unchanged: qkv's rows [q; k; v] are
    reordered so that each rank's contiguous share holds whole heads of all
    three ([q_0; k_0; v_0; q_1; ...]), which the chunk in the forward reads
    back. Returns `model`."""
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    n = mesh.size()
    for blk in model.blocks:
        d = blk.qkv.in_features
        if blk.heads % n:
            raise ValueError(f"{blk.heads} heads do not split over {n} ranks")
        per = d // n
        order = torch.cat([torch.arange(part * d + r * per, part * d + (r + 1) * per)
                           for r in range(n) for part in range(3)]).to(blk.qkv.weight.device)
        with torch.no_grad():
            blk.qkv.weight.copy_(blk.qkv.weight[order])
            blk.qkv.bias.copy_(blk.qkv.bias[order])
        blk.forward = _tp_forward.__get__(blk)
        parallelize_module(blk, mesh, {"qkv": ColwiseParallel(), "proj": RowwiseParallel(),
                                       "fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    return model


if __name__ == "__main__":
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import torchtpu  # noqa: F401
    from tiny_gpt import TinyGPT, batches, make_corpus

    dist.init_process_group()
    mesh = init_device_mesh("tpu", (dist.get_world_size(),))
    data, vocab = make_corpus()
    torch.manual_seed(0)
    model = tensor_parallel(TinyGPT(len(vocab)).to("tpu"), mesh)
    # foreach=False: DTensor refuses a foreach list mixing DTensor (split)
    # and plain (embedding, norm) parameters, on any device
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    run = torch.compile(model, backend="tpu")
    stream = batches(data, 8, 32, 0)
    for step in range(10):
        x, y = next(stream)
        loss = run(x.to("tpu"), y.to("tpu"))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if dist.get_rank() == 0:
            print(f"step {step}  loss {loss.item():.4f}")
    dist.destroy_process_group()
