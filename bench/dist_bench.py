"""torch.distributed on tpu ("tpudist") beside Gloo on CPU, in one run:

  1. DDP weak scaling: an MLP (512-1024-1024-512, ReLU, MSE, SGD) with a
     fixed per-rank batch of 64, under DistributedDataParallel, in worlds of
     1 and 2 processes. Efficiency = step time at 1 process / step time at 2
     (1.0 is perfect weak scaling). The peer is the same model and batch as
     plain CPU DDP over a Gloo group, in the same processes.
  2. all_reduce bus bandwidth by message size (float32, 4 KiB .. 64 MiB) in a
     world of 2: tpu tensors over tpudist vs CPU tensors over Gloo. tpudist's
     transport is Gloo plus the device<->host copies, so the ratio is the
     staging cost. busbw = algbw * 2(n-1)/n, the nccl-tests convention.
  3. The same all_reduce in ONE process driving 2 local devices
     (torch.tpu.comm, TORCHTPU_NUM_DEVICES=2): the collective compiled into
     one XLA program over both devices, no host staging; beside tpudist's
     times from part 2 (medians of separate runs, so only sizes are paired).
  4. The bench-sized TinyGPT training step (torch.compile, global batch 16)
     over 4 local devices in ONE process with torchtpu.spmd (data parallel,
     tensor parallel, 2 x 2), beside tpu:0 alone and beside 4 tpudist
     processes: under DDP (a quarter of the batch each) and split by
     DTensor's tensor parallelism (examples/tiny_gpt_tp.py).

The script launches its own worlds as torchrun would (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR/PORT; one process per device, each running this file
with --worker); rank 0 writes the world's results to a JSON file that the
launcher reads. Each worker calls init_process_group("tpudist") and makes a
Gloo group for the CPU peer; the two contenders alternate step by step (or
iteration by iteration), so machine noise hits both alike. Every rank times
each step or all_reduce from a barrier to a synchronize; a step's time is the
slowest rank's, and figures are medians; ratios are medians of per-pair
ratios. torch's CPU threads are 1 per process in every world (OMP_NUM_THREADS
unless already set), so a world of 2 uses twice the cores of a world of 1.

Usage: python bench/dist_bench.py [--quick] [--json PATH]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")  # tiny_gpt
MLP_DIMS = (512, 1024, 1024, 512)
BATCH = 64
KIB, MIB = 1024, 1024 * 1024


# --------------------------------------------------------------------------
# Worker side: one process of a world (python dist_bench.py --worker CFG OUT).

def _mlp(torch):
    torch.manual_seed(0)
    layers = []
    for a, b in zip(MLP_DIMS, MLP_DIMS[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def _slowest(dist, group, times):
    """Per-iteration max over ranks of this rank's `times`."""
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, times, group=group)
    return [max(ts) for ts in zip(*every)]


def _ddp(torch, dist, gloo, cfg):
    from torch.nn.parallel import DistributedDataParallel as DDP
    F = torch.nn.functional
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(BATCH, MLP_DIMS[0], generator=g)
    y = torch.randn(BATCH, MLP_DIMS[-1], generator=g)
    sync_tpu = torch.tpu.synchronize
    contenders = {
        # Default group: tpudist.
        "tpu": (DDP(_mlp(torch).to("tpu")), x.to("tpu"), y.to("tpu"), sync_tpu),
        "cpu": (DDP(_mlp(torch), process_group=gloo), x, y, lambda: None),
    }
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, (m, *_) in contenders.items()}

    def step(name):
        model, xx, yy, _ = contenders[name]
        opts[name].zero_grad(set_to_none=True)
        F.mse_loss(model(xx), yy).backward()
        opts[name].step()

    for _ in range(cfg["warmup"]):
        for name in contenders:
            step(name)
            contenders[name][3]()
    times = {name: [] for name in contenders}
    for _ in range(cfg["steps"]):
        for name, (*_, sync) in contenders.items():
            dist.barrier(group=gloo)
            sync()
            t0 = time.perf_counter()
            step(name)
            sync()
            times[name].append(time.perf_counter() - t0)
    # Both models saw the same data: their weights must agree.
    w_tpu = contenders["tpu"][0].module[0].weight.detach().cpu()
    w_cpu = contenders["cpu"][0].module[0].weight.detach()
    return {"step_s": {k: _slowest(dist, gloo, v) for k, v in times.items()},
            "max_weight_diff": float((w_tpu - w_cpu).abs().max())}


def _allreduce(torch, dist, gloo, cfg):
    out = []
    for nbytes in cfg["sizes"]:
        n = nbytes // 4
        iters = cfg["iters"] if nbytes <= 4 * MIB else max(5, cfg["iters"] // 4)
        # Zeros: sums stay finite however many iterations run.
        bufs = {"tpudist": (torch.zeros(n, device="tpu"), None, torch.tpu.synchronize),
                "gloo": (torch.zeros(n), gloo, lambda: None)}
        times = {k: [] for k in bufs}
        for i in range(2 + iters):
            for name, (t, group, sync) in bufs.items():
                dist.barrier(group=gloo)
                sync()
                t0 = time.perf_counter()
                dist.all_reduce(t, group=group)
                sync()
                if i >= 2:
                    times[name].append(time.perf_counter() - t0)
        out.append({"bytes": nbytes, "iters": iters,
                    **{k: _slowest(dist, gloo, v) for k, v in times.items()}})
    return out


def local_worker(cfg_json, out_path):
    """One process, n local devices: torch.tpu.comm.all_reduce times."""
    import torch

    import torchtpu  # noqa: F401

    cfg = json.loads(cfg_json)
    n = torch.tpu.device_count()
    out = []
    for nbytes in cfg["sizes"]:
        iters = cfg["iters"] if nbytes <= 4 * MIB else max(5, cfg["iters"] // 4)
        xs = [torch.zeros(nbytes // 4, device=f"tpu:{i}") for i in range(n)]
        times = []
        for i in range(2 + iters):
            torch.tpu.synchronize()
            t0 = time.perf_counter()
            torch.tpu.comm.all_reduce(xs)
            torch.tpu.synchronize()
            if i >= 2:
                times.append(time.perf_counter() - t0)
        out.append({"bytes": nbytes, "iters": iters, "local": times})
    with open(out_path, "w") as f:
        json.dump({"devices": n, "allreduce": out}, f)


GPT = dict(dim=256, heads=4, layers=2, max_len=128)  # the bench-sized TinyGPT
GPT_BATCH, GPT_SEQ = 16, 128                          # global batch


def spmd_worker(cfg_json, out_path):
    """One process, 4 local devices: TinyGPT steps under torch.compile on
    tpu:0 alone, data parallel, tensor parallel and 2x2 (torchtpu.spmd)."""
    sys.path.insert(0, EXAMPLES)
    import torch

    import torchtpu  # noqa: F401
    from spmd_tiny_gpt import train
    cfg = json.loads(cfg_json)
    out = {}
    for name, mesh in (("one device", None), ("data parallel 4", (4,)),
                       ("tensor parallel 4", (1, 4)), ("2 x 2", (2, 2))):
        losses, per_step, _ = train(cfg["steps"], mesh, batch_size=GPT_BATCH, seq_len=GPT_SEQ,
                                    model_kwargs=GPT, lr=0.01, timed=True)
        out[name] = {"s_per_step": per_step, "last_loss": losses[-1]}
    with open(out_path, "w") as f:
        json.dump(out, f)


def _gpt_step_times(torch, dist, cfg, tensor_parallel):
    """TinyGPT over tpudist: under DDP, each rank a quarter of the batch, or
    split by DTensor's tensor parallelism (examples/tiny_gpt_tp.py), every
    rank the whole batch."""
    sys.path.insert(0, EXAMPLES)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.parallel import DistributedDataParallel as DDP

    from tiny_gpt import TinyGPT, batches, make_corpus
    from tiny_gpt_tp import tensor_parallel as split
    data, vocab = make_corpus()
    torch._dynamo.reset()
    torch.manual_seed(0)
    world, rank = dist.get_world_size(), dist.get_rank()
    model = TinyGPT(len(vocab), **GPT).to("tpu")
    if tensor_parallel:
        model = split(model, init_device_mesh("tpu", (world,)))
    else:
        model = DDP(model)
    run = torch.compile(model, backend="tpu")
    # (foreach=False for DTensor: it refuses lists mixing split and plain
    # parameters)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                          foreach=not tensor_parallel)
    stream = batches(data, GPT_BATCH, GPT_SEQ, 0)
    steps = [next(stream) for _ in range(cfg["steps"])]
    per = GPT_BATCH if tensor_parallel else GPT_BATCH // world
    first = 0 if tensor_parallel else rank * per
    xs = [(x[first:first + per].to("tpu"), y[first:first + per].to("tpu")) for x, y in steps]
    times = []
    for i, (x, y) in enumerate(xs):
        torch.tpu.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        loss = run(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.tpu.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return {"s_per_step": statistics.mean(times), "last_loss": float(loss)}


def worker(cfg_json, out_path):
    import torch
    import torch.distributed as dist

    import torchtpu  # noqa: F401  (registers tpudist)

    dist.init_process_group("tpudist")
    gloo = dist.new_group(backend="gloo")
    res = {"world": dist.get_world_size(), "torch_threads": torch.get_num_threads()}
    cfg = json.loads(cfg_json)
    if cfg.get("ddp"):
        res["ddp"] = _ddp(torch, dist, gloo, cfg["ddp"])
    if cfg.get("allreduce"):
        res["allreduce"] = _allreduce(torch, dist, gloo, cfg["allreduce"])
    if cfg.get("gpt"):
        res["gpt"] = _gpt_step_times(torch, dist, cfg["gpt"], tensor_parallel=False)
        res["gpt_tp"] = _gpt_step_times(torch, dist, cfg["gpt"], tensor_parallel=True)
    dist.barrier(group=gloo)
    if dist.get_rank() == 0:
        with open(out_path + ".tmp", "w") as f:
            json.dump(res, f)
        os.replace(out_path + ".tmp", out_path)
    dist.destroy_process_group()


# --------------------------------------------------------------------------
# Launcher side.

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world, cfg, tmp, timeout=600):
    """Runs one world of `world` processes on `cfg`; returns rank 0's results."""
    out = os.path.join(tmp, f"world{world}-{time.monotonic_ns()}.json")
    base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    base.setdefault("OMP_NUM_THREADS", "1")
    procs = []
    for rank in range(world):
        env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
        log = tempfile.TemporaryFile(mode="w+", dir=tmp)
        procs.append((subprocess.Popen([sys.executable, HERE, "--worker", json.dumps(cfg), out],
                                       env=env, stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + timeout
    failed = []
    for rank, (p, log) in enumerate(procs):
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.returncode != 0:
            log.seek(0)
            failed.append(f"rank {rank} exited with {p.returncode}; its log ends:\n"
                          + log.read()[-3000:])
        log.close()
    if failed or not os.path.exists(out):
        sys.exit(f"world of {world} failed:\n" + "\n".join(failed))
    with open(out) as f:
        return json.load(f)


def _median_ms(ts):
    return statistics.median(ts) * 1e3


def _ratio(a, b):
    return statistics.median(x / y for x, y in zip(a, b))


def _size(nbytes):
    return f"{nbytes // MIB} MiB" if nbytes >= MIB else f"{nbytes // KIB} KiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and steps (< 1 min)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--local-worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--spmd-worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.spmd_worker:
        return spmd_worker(*args.spmd_worker)
    if args.worker:
        return worker(*args.worker)
    if args.local_worker:
        return local_worker(*args.local_worker)

    if args.quick:
        ddp = {"warmup": 3, "steps": 10}
        sizes = [4 * KIB * 16 ** i for i in range(4)]          # 4 KiB .. 16 MiB
        ar = {"sizes": sizes, "iters": 8}
    else:
        ddp = {"warmup": 5, "steps": 60}
        sizes = [4 * KIB * 4 ** i for i in range(8)]           # 4 KiB .. 64 MiB
        ar = {"sizes": sizes, "iters": 40}

    import torch

    import torchtpu
    cores = os.cpu_count()
    n_params = sum(p.numel() for p in _mlp(torch).parameters())
    print(f"torchtpu {torchtpu.__version__}, torch {torch.__version__}, {cores} CPU cores; "
          f"worlds launched like torchrun on 127.0.0.1; torch CPU threads per process: "
          f"{os.environ.get('OMP_NUM_THREADS', '1')} (OMP_NUM_THREADS)")
    if cores is not None and cores <= 2:
        print(f"note: this machine has {cores} cores, so the 2 processes of a world of 2 "
              f"share them (with the tpu device's own threads): the efficiency below "
              f"measures the backend's overhead more than scaling.")
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        w1 = launch(1, {"ddp": ddp}, tmp)
        w2 = launch(2, {"ddp": ddp, "allreduce": ar}, tmp)
        local_out = os.path.join(tmp, "local.json")
        subprocess.run([sys.executable, HERE, "--local-worker", json.dumps(ar), local_out],
                       env=dict(os.environ, TORCHTPU_NUM_DEVICES="2"), check=True, timeout=600)
        with open(local_out) as f:
            local = json.load(f)
        gpt_cfg = {"steps": 6 if args.quick else 12}
        w4 = launch(4, {"gpt": gpt_cfg}, tmp, timeout=1200)
        spmd_out = os.path.join(tmp, "spmd.json")
        subprocess.run([sys.executable, HERE, "--spmd-worker", json.dumps(gpt_cfg), spmd_out],
                       env=dict(os.environ, TORCHTPU_NUM_DEVICES="4"), check=True, timeout=1200)
        with open(spmd_out) as f:
            spmd = json.load(f)
    wall = time.perf_counter() - t_start

    # --- DDP weak scaling
    dims = "-".join(map(str, MLP_DIMS))
    print()
    print(f"DDP weak scaling: MLP {dims} ({n_params / 1e6:.2f} M params, "
          f"{n_params * 4 / MIB:.1f} MiB of gradients), batch {BATCH} per rank, SGD; "
          f"{ddp['steps']} steps after {ddp['warmup']} warm-up, tpu and cpu alternating; "
          f"median step time (slowest rank)")
    print(f"{'contender':<22}{'1 proc ms/step':>15}{'samples/s':>11}"
          f"{'2 proc ms/step':>16}{'samples/s':>11}{'efficiency':>12}")
    report = {"quick": args.quick, "cores": cores, "torch": torch.__version__,
              "torchtpu": torchtpu.__version__, "mlp": list(MLP_DIMS), "params": n_params,
              "batch_per_rank": BATCH, "ddp": {}, "allreduce": []}
    for name, label in (("tpu", "tpu DDP (tpudist)"), ("cpu", "cpu DDP (gloo, peer)")):
        t1 = _median_ms(w1["ddp"]["step_s"][name])
        t2 = _median_ms(w2["ddp"]["step_s"][name])
        eff = t1 / t2
        report["ddp"][name] = {"ms_per_step": {"1": t1, "2": t2},
                               "samples_per_s": {"1": BATCH / t1 * 1e3, "2": 2 * BATCH / t2 * 1e3},
                               "efficiency": eff,
                               "step_s": {"1": w1["ddp"]["step_s"][name],
                                          "2": w2["ddp"]["step_s"][name]}}
        print(f"{label:<22}{t1:>15.2f}{BATCH / t1 * 1e3:>11,.0f}"
              f"{t2:>16.2f}{2 * BATCH / t2 * 1e3:>11,.0f}{eff:>12.2f}")
    r1 = _ratio(w1["ddp"]["step_s"]["tpu"], w1["ddp"]["step_s"]["cpu"])
    r2 = _ratio(w2["ddp"]["step_s"]["tpu"], w2["ddp"]["step_s"]["cpu"])
    diff = max(w1["ddp"]["max_weight_diff"], w2["ddp"]["max_weight_diff"])
    report["ddp"].update({"tpu_over_cpu_time": {"1": r1, "2": r2}, "max_weight_diff": diff})
    print(f"tpu / cpu step time (median of step pairs): {r1:.2f}x at 1 process, {r2:.2f}x at 2; "
          f"max |w_tpu - w_cpu| after training: {diff:.1e}")

    # --- all_reduce bus bandwidth
    print()
    print("all_reduce (sum, float32), world of 2: tpudist on tpu tensors vs gloo on CPU tensors, "
          "alternating;")
    print("median time from a barrier to synchronize (slowest rank); "
          "busbw = bytes/time * 2(n-1)/n; ratio = median of per-pair tpudist/gloo time ratios")
    print(f"{'size':>8}{'iters':>7}{'tpudist us':>13}{'busbw GB/s':>12}"
          f"{'gloo us':>11}{'busbw GB/s':>12}{'ratio':>8}")
    n = 2
    for row in w2["allreduce"]:
        nb = row["bytes"]
        tt, tg = statistics.median(row["tpudist"]), statistics.median(row["gloo"])
        bt, bg = nb / tt * 2 * (n - 1) / n / 1e9, nb / tg * 2 * (n - 1) / n / 1e9
        ratio = _ratio(row["tpudist"], row["gloo"])
        report["allreduce"].append({"bytes": nb, "iters": row["iters"],
                                    "tpudist_us": tt * 1e6, "tpudist_busbw_gbps": bt,
                                    "gloo_us": tg * 1e6, "gloo_busbw_gbps": bg, "ratio": ratio,
                                    "tpudist_s": row["tpudist"], "gloo_s": row["gloo"]})
        print(f"{_size(nb):>8}{row['iters']:>7}{tt * 1e6:>13,.0f}{bt:>12.3f}"
              f"{tg * 1e6:>11,.0f}{bg:>12.3f}{ratio:>8.2f}")

    # --- all_reduce in one program over local devices
    print()
    print(f"all_reduce (sum, float32) over {local['devices']} local devices in ONE process "
          "(torch.tpu.comm, one XLA program) vs tpudist's world of 2 above (staged via Gloo);")
    print("median time from synchronize to synchronize; ratio = tpudist / local median time")
    print(f"{'size':>8}{'local us':>11}{'busbw GB/s':>12}{'tpudist us':>13}{'ratio':>8}")
    report["allreduce_local"] = []
    for row, staged in zip(local["allreduce"], w2["allreduce"]):
        nb, tl = row["bytes"], statistics.median(row["local"])
        tt = statistics.median(staged["tpudist"])
        nd = local["devices"]
        bl = nb / tl * 2 * (nd - 1) / nd / 1e9
        report["allreduce_local"].append({"bytes": nb, "local_us": tl * 1e6,
                                          "local_busbw_gbps": bl, "tpudist_us": tt * 1e6,
                                          "tpudist_over_local": tt / tl, "local_s": row["local"]})
        print(f"{_size(nb):>8}{tl * 1e6:>11,.0f}{bl:>12.3f}{tt * 1e6:>13,.0f}{tt / tl:>8.2f}")

    # --- TinyGPT over 4 local devices: one process (SPMD) vs 4 (tpudist DDP)
    print()
    print(f"TinyGPT {GPT} , global batch {GPT_BATCH} x {GPT_SEQ} tokens, SGD, "
          f"torch.compile(backend='tpu'); {gpt_cfg['steps'] - 2} steps after 2 warm-up; "
          "mean step time")
    print(f"{'contender':<50}{'ms/step':>9}{'tokens/s':>10}{'vs DDP':>8}")
    ddp_s = w4["gpt"]["s_per_step"]
    rows = [(f"one process, {k} (torchtpu.spmd)" if k != "one device" else
             "one process, tpu:0 alone", v["s_per_step"]) for k, v in spmd.items()]
    rows.append(("4 processes, DDP over tpudist", ddp_s))
    rows.append(("4 processes, DTensor tensor parallel (tpudist)", w4["gpt_tp"]["s_per_step"]))
    report["gpt"] = {"spmd": spmd, "tpudist_ddp": w4["gpt"], "tpudist_tp": w4["gpt_tp"]}
    for label, t in rows:
        print(f"{label:<50}{t * 1e3:>9.1f}{GPT_BATCH * GPT_SEQ / t:>10,.0f}{ddp_s / t:>8.2f}")
    print(f"(wall time {wall:.0f} s, including process start-up)")
    report["wall_s"] = wall
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"results written to {args.json}")


if __name__ == "__main__":
    main()
