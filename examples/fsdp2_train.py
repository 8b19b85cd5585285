"""Sharded TinyGPT training on tpu with FSDP2 (fully_shard).

    torchrun --nproc-per-node 2 examples/fsdp2_train.py --steps 30

Each block's parameters are sharded across the processes (DTensors on a
DeviceMesh of tpu devices); they are gathered for compute and the gradients
reduce-scattered, all through tpudist.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

import torchtpu  # noqa: F401  (registers the tpu device and tpudist)
import torchtpu.distributed as tpudist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_gpt import TinyGPT, batches, make_corpus  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=8, help="per process")
    args = ap.parse_args()

    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("tpu", torch.tpu.current_device())
    # Ranks laid out by the chips' torus coordinates where the plugin has them.
    mesh = tpudist.init_device_mesh((world,), mesh_dim_names=("fsdp",))

    data, vocab = make_corpus()
    torch.manual_seed(0)
    model = TinyGPT(len(vocab)).to(device)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    local = sum(p.to_local().numel() for p in model.parameters())
    total = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"{total:,} parameters, {local:,} held by each of {world} processes", flush=True)

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    stream = batches(data, args.batch_size, 64, seed=rank)
    first = None
    for step in range(args.steps):
        x, y = (t.to(device) for t in next(stream))
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        first = mean.item() if first is None else first
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {mean.item():.4f}", flush=True)
    last = mean.item()
    dist.destroy_process_group()
    if not last < first:
        sys.exit(f"loss did not fall: {first:.4f} -> {last:.4f}")


if __name__ == "__main__":
    main()
