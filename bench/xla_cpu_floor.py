"""Where the time of the compiled demo step goes on the CPU plugin, and how
much of it any XLA front end could save: the evidence behind the compile
targets that this machine does not reach (issue 6).

  1. The demo TinyGPT's forward and backward graphs as torchtpu emits them
     (StableHLO), run by torchtpu and, unchanged, by JAX's own XLA:CPU
     client; beside them the same forward+backward in PyTorch CPU eager and
     Inductor. If JAX runs our programs no faster, the gap to Inductor is
     XLA:CPU's code and runtime, not our lowering.
  2. One elementwise add at growing sizes: XLA:CPU (JAX) vs PyTorch CPU, in
     this process (all CPUs) and in a child pinned to one CPU (taskset). On
     a 2-vCPU VM XLA splits mid-sized loops across its thread pool and pays
     a cross-CPU wake-up for each.
  3. The first compiled step in a fresh process with a warm executable
     cache, split into Dynamo, AOTAutograd and torchtpu's part (building the
     programs and loading them from disk).

Usage: python bench/xla_cpu_floor.py [--json PATH]
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
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")
sys.path.insert(0, EXAMPLES)


def median_ms(fn, n=30, warm=5):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def capture_graphs():
    """Compiles the demo model's forward+backward under backend "tpu" and
    returns [(stablehlo_text, input_specs, output_specs, with_rng)]."""
    import torch
    import torchtpu._compile as tc
    from tiny_gpt import TinyGPT, batches, make_corpus
    captured = []
    original = tc._C._CompiledGraph

    def recording(text, inputs, outputs, with_rng):
        captured.append((text, inputs, outputs, with_rng))
        return original(text, inputs, outputs, with_rng)

    tc._C._CompiledGraph = recording
    try:
        data, vocab = make_corpus()
        torch.manual_seed(0)
        model = torch.compile(TinyGPT(len(vocab)).to("tpu"), backend="tpu")
        x, y = next(batches(data, 16, 64, 0))
        model(x.to("tpu"), y.to("tpu")).backward()
        torch.tpu.synchronize()
    finally:
        tc._C._CompiledGraph = original
        torch._dynamo.reset()
    return captured


def random_inputs(specs, device):
    import torch
    out = []
    for dtype, shape in specs:
        if dtype.is_floating_point:
            out.append(torch.randn(shape, dtype=dtype).to(device))
        else:
            out.append(torch.randint(0, 14, shape, dtype=dtype).to(device))
    return out


def graphs_section():
    import jax
    import torch
    from jax.extend import backend
    from torchtpu import _C
    from tiny_gpt import TinyGPT, batches, make_corpus

    jax.config.update("jax_enable_x64", True)  # our int64 inputs stay int64
    graphs = capture_graphs()
    cpu = backend.get_backend("cpu")
    rows = []
    for k, (text, ins, outs, rng) in enumerate(graphs):
        text = text.decode() if isinstance(text, bytes) else text
        g = _C._CompiledGraph(text, ins, outs, rng)
        args = random_inputs(ins, "tpu")
        writes = [-1] * len(outs)

        def ours():
            g.run(list(args), writes)
            torch.tpu.synchronize()

        exe = cpu.compile_and_load(text, jax.devices("cpu")[:1])
        # Our programs take every tensor flattened to 1-D (the storage model).
        jargs = [jax.device_put(t.cpu().reshape(-1).numpy()) for t in args]

        def theirs():
            jax.block_until_ready(exe.execute(jargs))

        rounds_ours, rounds_jax = [], []
        for _ in range(3):  # alternate, medians of medians
            rounds_ours.append(median_ms(ours, n=15))
            rounds_jax.append(median_ms(theirs, n=15))
        rows.append({"graph": ["forward", "backward"][k] if k < 2 else f"graph {k}",
                     "torchtpu_ms": statistics.median(rounds_ours),
                     "jax_ms": statistics.median(rounds_jax)})

    data, vocab = make_corpus()
    x, y = next(batches(data, 16, 64, 0))
    peers = {}
    for name, backend_name in [("cpu eager", None), ("cpu inductor", "inductor")]:
        torch.manual_seed(0)
        model = TinyGPT(len(vocab))
        run = torch.compile(model, backend=backend_name) if backend_name else model

        def step():
            run(x, y).backward()

        peers[name] = statistics.median([median_ms(step, n=15) for _ in range(3)])
        torch._dynamo.reset()
    return rows, peers


ADD = r"""
import json, sys, time, jax, jax.numpy as jnp, numpy as np, torch
torch.set_num_threads(len(__import__("os").sched_getaffinity(0)))
f = jax.jit(lambda a: a + a)
out = []
for n in %r:
    x = jnp.asarray(np.random.randn(n).astype(np.float32)); t = torch.randn(n)
    reps = max(50, 2000 * 65536 // n)
    def run_jax():
        r = f(x)
        r.block_until_ready()
    def run_torch():
        t + t
    res = {}
    for name, fn in [("jax", run_jax), ("torch", run_torch)]:
        for _ in range(20): fn()
        t0 = time.perf_counter()
        for _ in range(reps): fn()
        res[name] = (time.perf_counter() - t0) / reps * 1e6
    out.append({"n": n, "jax_us": res["jax"], "torch_us": res["torch"]})
print(json.dumps(out))
"""
SIZES = [16384, 65536, 262144, 1048576, 4194304]


def add_section():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    runs = {}
    for label, prefix in [("all CPUs", []), ("one CPU (taskset -c 0)", ["taskset", "-c", "0"])]:
        proc = subprocess.run(prefix + [sys.executable, "-c", ADD % SIZES], env=env,
                              capture_output=True, text=True, check=True)
        runs[label] = json.loads(proc.stdout.strip().splitlines()[-1])
    return runs


FIRST_STEP = r"""
import json, sys, time
sys.path.insert(0, %r)
import torch, torchtpu
import torchtpu._compile as tc
from tiny_gpt import train
spent = {"backend": 0.0, "torchtpu": 0.0}
def timed(fn, key):
    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[key] += time.perf_counter() - t0
    return wrapper
tc._compile_graph = timed(tc._compile_graph, "torchtpu")
backend = timed(tc.tpu_backend, "backend")
t0 = time.perf_counter()
train("tpu", 1, backend=backend)
total = time.perf_counter() - t0
print(json.dumps({"first_step_s": total, "backend_s": spent["backend"],
                  "torchtpu_s": spent["torchtpu"],
                  "compiles": torchtpu.metrics.metrics().get("compiles", 0)}))
"""


def first_step_section():
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHTPU_CACHE_DIR=cache, TORCHTPU_CACHE="1")
        out = []
        for _ in range(2):  # cold, then warm
            proc = subprocess.run([sys.executable, "-c", FIRST_STEP % EXAMPLES], env=env,
                                  capture_output=True, text=True, check=True)
            out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {"cold": out[0], "warm": out[1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="also write the figures to this JSON file")
    args = ap.parse_args()
    import torch
    import torchtpu  # noqa: F401  (the tpu device)

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    rows, peers = graphs_section()
    print("\n1. demo TinyGPT (batch 16 x 64) graphs, ms (medians)")
    print(f"{'graph':10}{'torchtpu':>10}{'same text in JAX':>18}")
    for r in rows:
        print(f"{r['graph']:10}{r['torchtpu_ms']:>10.2f}{r['jax_ms']:>18.2f}")
    fwd_bwd = sum(r["torchtpu_ms"] for r in rows[:2])
    jax_fwd_bwd = sum(r["jax_ms"] for r in rows[:2])
    print(f"forward+backward: torchtpu {fwd_bwd:.2f}, JAX {jax_fwd_bwd:.2f}, "
          f"PyTorch CPU eager {peers['cpu eager']:.2f}, Inductor {peers['cpu inductor']:.2f}")

    runs = add_section()
    print("\n2. a + a (float32), us per call")
    labels = list(runs)
    print(f"{'n':>9}" + "".join(f"   XLA, {k}   torch, {k}" for k in labels))
    for i, n in enumerate(SIZES):
        line = f"{n:>9}"
        for k in runs:
            w = len(k) + 8
            line += f"{runs[k][i]['jax_us']:>{w}.1f}{runs[k][i]['torch_us']:>{w + 2}.1f}"
        print(line)

    fs = first_step_section()
    print("\n3. first compiled step in a fresh process, s")
    for k in ("cold", "warm"):
        d = fs[k]
        dynamo = d["first_step_s"] - d["backend_s"]
        aot = d["backend_s"] - d["torchtpu_s"]
        print(f"{k:5} total {d['first_step_s']:.2f}: Dynamo and the step itself {dynamo:.2f}, "
              f"AOTAutograd {aot:.2f}, torchtpu (build, compile or load) {d['torchtpu_s']:.2f}; "
              f"{d['compiles']} XLA compiles")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"graphs": rows, "peers_fwd_bwd_ms": peers, "add": runs,
                       "first_step": fs}, f, indent=1)


if __name__ == "__main__":
    main()
