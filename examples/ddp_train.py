"""Data-parallel TinyGPT training on tpu with DistributedDataParallel.

    torchrun --nproc-per-node 2 examples/ddp_train.py --steps 30

One process per device; torchrun's LOCAL_RANK picks it. The code is what it
would be on CUDA with "tpu" for "cuda": tpudist is the default backend of
the tpu device.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import torchtpu  # noqa: F401  (registers the tpu device and tpudist)

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

    data, vocab = make_corpus()
    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts)
    model = DDP(TinyGPT(len(vocab)).to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    stream = batches(data, args.batch_size, 64, seed=rank)  # a different shard per rank
    for step in range(args.steps):
        x, y = (t.to(device) for t in next(stream))
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # gradients are averaged across processes here
        opt.step()
        if step % 10 == 0 or step == args.steps - 1:
            mean = loss.detach().clone()
            dist.all_reduce(mean, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step:3d}  loss {mean.item():.4f}  ({world} processes)", flush=True)

    # Every replica must hold the same weights after training.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    lo, hi = flat.clone(), flat.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    spread = (hi - lo).abs().max().item()
    if rank == 0:
        print(f"replicas agree: max weight spread {spread:.3g}", flush=True)
    dist.destroy_process_group()
    if spread != 0:
        sys.exit(f"replicas diverged (spread {spread})")


if __name__ == "__main__":
    main()
