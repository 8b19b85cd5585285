"""torch.compile(backend="tpu") beside its peers, in one run, on the demo
transformer's training step (TinyGPT, batch 16 x 64, AdamW):

  1. compiled tpu vs strict eager tpu          (target >= 3.8x)
  2. compiled tpu vs torch.compile(backend="inductor") on CPU (target >= 1.0x)
  3. time to the first compiled step in a fresh process, cold caches vs
     warm, through torch.compile (AOTAutograd's cache holds our graphs) and
     through torchtpu.compiler.precompile (no tracing)   (target >= 10x)

Throughputs are tokens/s after two warm-up steps (so compiles are excluded);
rounds alternate the contenders, and each ratio is the median of its
per-round ratios. Usage: python bench/compile_bench.py [--steps N] [--rounds R] [--json PATH]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

FIRST_STEP = r"""
import os, sys, time, json
t0 = time.perf_counter()
sys.path.insert(0, {examples!r})
import torch, torchtpu
import torch._dynamo  # every mode's AdamW imports it: counted as import time
from tiny_gpt import train
t1 = time.perf_counter()
if {api!r} == "precompile":
    train("tpu", 1, precompile={folder!r})
else:
    train("tpu", 1, backend="tpu")
t2 = time.perf_counter()
m = torchtpu.metrics.metrics()
from torch._dynamo.utils import counters
print(json.dumps({{"import_s": t1 - t0, "first_step_s": t2 - t1, "compiles": m.get("compiles", 0),
                  "disk_hits": m.get("cache_hits::local", 0),
                  "graphs_built": m.get("compiled_graphs", 0),
                  "graphs_loaded": m.get("compiled_graph_loads", 0),
                  "dynamo_frames": counters["stats"].get("unique_graphs", 0)}}))
"""


def first_step(cache_dir, api):
    """The first training step of a fresh process whose caches live in
    cache_dir: XLA executables (TORCHTPU_CACHE_DIR), AOTAutograd's cache
    with torchtpu's graphs (TORCHINDUCTOR_CACHE_DIR), precompiled files."""
    env = dict(os.environ, TORCHTPU_CACHE_DIR=os.path.join(cache_dir, "xla"), TORCHTPU_CACHE="1",
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_dir, "inductor"))
    code = FIRST_STEP.format(examples=os.path.join(os.path.dirname(HERE), "examples"), api=api,
                             folder=os.path.join(cache_dir, "precompiled"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the figures to this JSON file")
    args = ap.parse_args()

    import torch
    import torchtpu
    from tiny_gpt import train

    print(f"torchtpu {torchtpu.__version__}, torch {torch.__version__}, "
          f"{os.cpu_count()} CPU threads; TinyGPT step, batch 16 x 64, AdamW")
    contenders = {
        "tpu strict eager": ("tpu", None),
        "tpu compiled": ("tpu", "tpu"),
        "cpu eager": ("cpu", None),
        "cpu inductor": ("cpu", "inductor"),
    }
    rates = {k: [] for k in contenders}
    for r in range(args.rounds):
        for name, (device, backend) in contenders.items():
            torch._dynamo.reset()
            losses, rate = train(device, args.steps, backend=backend)
            rates[name].append(rate)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items())
              + " tokens/s", flush=True)

    def ratio(a, b):
        return statistics.median(x / y for x, y in zip(rates[a], rates[b]))

    print()
    print(f"{'':22}{'tokens/s (median)':>20}")
    for k, v in rates.items():
        print(f"{k:22}{statistics.median(v):>20,.0f}")
    r1 = ratio("tpu compiled", "tpu strict eager")
    r2 = ratio("tpu compiled", "cpu inductor")
    print(f"compiled / strict eager:  {r1:.2f}x   (target 3.8x)")
    print(f"compiled / cpu inductor:  {r2:.2f}x   (target 1.0x)")

    # Cold: every cache empty. Warm, torch.compile: the same call in a new
    # process (AOTAutograd's cache holds our graphs, the disk cache the
    # executables; Dynamo traces). Warm, precompile: torchtpu.compiler.
    # precompile's files (no Dynamo, no AOTAutograd).
    first = {}
    for api in ("torch.compile", "precompile"):
        with tempfile.TemporaryDirectory() as cache:
            first[api] = {"cold": first_step(cache, api), "warm": first_step(cache, api)}
    for api, f in first.items():
        cold, warm = f["cold"], f["warm"]
        f["cold/warm"] = cold["first_step_s"] / warm["first_step_s"]
        print(f"first compiled step in a fresh process, {api}: cold {cold['first_step_s']:.2f} s "
              f"({cold['compiles']} XLA compiles), warm {warm['first_step_s']:.2f} s "
              f"({warm['compiles']} compiles, {warm['graphs_loaded']} graphs loaded, "
              f"{warm['graphs_built']} built): {f['cold/warm']:.1f}x   (target 10x; import "
              f"{warm['import_s']:.2f} s not included)")
    r3 = first["precompile"]["cold/warm"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tokens_per_s": {k: statistics.median(v) for k, v in rates.items()},
                       "rates": rates, "compiled/strict": r1, "compiled/inductor": r2,
                       "first_step": first["torch.compile"],
                       "first_step_precompile": first["precompile"], "cold/warm": r3}, f, indent=1)


if __name__ == "__main__":
    main()
