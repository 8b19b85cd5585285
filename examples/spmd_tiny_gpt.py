"""TinyGPT trained over the local tpu devices of one process with
torchtpu.spmd: data parallel (batch split over every device) or data x
tensor parallel (batch split over "dp", the attention and MLP matmuls split
over "tp" as Megatron splits them). The same steps on one device are the
reference: every number agrees up to the order of floating-point sums.

    TORCHTPU_NUM_DEVICES=4 python examples/spmd_tiny_gpt.py --mesh 2x2
"""
import argparse
import time

import torch

from tiny_gpt import TinyGPT, batches, make_corpus


def tensor_parallel_plan(tp_axis, ndim):
    """Megatron's split of a Block: qkv and fc1 by output features
    (columns), proj and fc2 by input features (rows); `tp_axis` is the
    mesh dimension that splits them, the others replicate."""
    from torchtpu.spmd import Replicate, Shard

    def on_tp(p):
        return tuple(p if a == tp_axis else Replicate() for a in range(ndim))

    plan = {}
    for name in ("qkv", "fc1"):
        plan[f"{name}.weight"] = on_tp(Shard(0))
        plan[f"{name}.bias"] = on_tp(Shard(0))
    for name in ("proj", "fc2"):
        plan[f"{name}.weight"] = on_tp(Shard(1))
    return plan


def train(steps, mesh_shape=None, batch_size=8, seq_len=32, model_kwargs=None, seed=0,
          lr=0.1, timed=False):
    """Trains `steps` steps under torch.compile(backend="tpu"); mesh_shape
    None: on tpu:0 alone; (n,): data parallel over n devices; (d, t): d-way
    data x t-way tensor parallel. Returns (losses, seconds per step after
    the first two or None, counters moved over those steps: bytes to and
    from the host, bytes copied device to device, partitioned runs)."""
    import torchtpu
    from torchtpu import spmd
    from torchtpu.spmd import Replicate, Shard

    # Each configuration compiles afresh: a graph compiled for unannotated
    # inputs is partitioned for one device (it saves activations), and
    # Dynamo's guards do not see annotations.
    torch._dynamo.reset()
    data, vocab = make_corpus()
    torch.manual_seed(seed)
    model = TinyGPT(len(vocab), **(model_kwargs or {})).to("tpu")
    stream = batches(data, batch_size, seq_len, seed)
    # Every batch on the device first: the steps then move no bytes
    # between host and devices but the losses read at the end.
    xs, ys = zip(*[next(stream) for _ in range(steps)])
    xs, ys = [x.to("tpu") for x in xs], [y.to("tpu") for y in ys]
    on_batch = None
    if mesh_shape is not None:
        names = ("dp",) if len(mesh_shape) == 1 else ("dp", "tp")
        mesh = spmd.init_device_mesh(mesh_shape, names)
        plan = tensor_parallel_plan(1, 2) if len(mesh_shape) == 2 else {}
        spmd.distribute_module(model, mesh, plan)
        on_batch = (Shard(0),) + tuple(Replicate() for _ in mesh_shape[1:])
        for t in xs + ys:
            spmd.mark_sharding(t, mesh, on_batch)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, foreach=True)
    run = torch.compile(model, backend="tpu")
    losses = []
    start = None
    counters = ("bytes_to_host", "bytes_to_device", "bytes_device_to_device", "spmd_executions")
    first = {}
    for step in range(steps):
        if step == 2:  # after the compiles (their constants are uploaded)
            torch.tpu.synchronize()
            start = time.perf_counter()
            first = {k: torchtpu.metrics.metrics().get(k, 0) for k in counters}
        loss = run(xs[step], ys[step])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    torch.tpu.synchronize()
    per_step = (time.perf_counter() - start) / (steps - 2) if timed and steps > 2 else None
    moved = {k: torchtpu.metrics.metrics().get(k, 0) - first.get(k, 0) for k in counters}
    return torch.stack(losses).cpu().tolist(), per_step, moved


if __name__ == "__main__":
    import torchtpu  # noqa: F401

    ap = argparse.ArgumentParser()
    ap.add_argument("--mesh", default="4", help="4 (data parallel) or 2x2 (data x tensor)")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    shape = tuple(int(s) for s in a.mesh.split("x"))
    ref = train(a.steps)[0]
    got = train(a.steps, shape)[0]
    for i, (r, g) in enumerate(zip(ref, got)):
        print(f"step {i:3d}  one device {r:.6f}  mesh {a.mesh} {g:.6f}")
