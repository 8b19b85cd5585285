"""Training step of a bench-sized decoder transformer (examples/tiny_gpt.py's
TinyGPT at hidden 256, 4 heads, 2 layers, sequence 128, batch 8, AdamW) in
one process, beside its CPU peers:

  tpu strict eager, tpu defer_and_fuse eager, tpu torch.compile(backend="tpu"),
  PyTorch CPU eager, PyTorch CPU torch.compile(backend="inductor"), and with
  --xla-python PY, PyTorch/XLA's torch_xla.compile (PJRT_DEVICE=CPU) in a
  process of its own venv (bench/xla_peer.py --serve) that takes its turn
  in the same alternation over a pipe.

Every contender has its own model from the same seed and the same batches;
each step is forward, zero_grad, backward, optimizer step and loss.item()
(a host sync, like real logging). After warm-up steps (compiles excluded)
the contenders alternate round by round; figures are medians over rounds,
ratios medians of per-round ratios. Also, in the same run:

  - MFU: model FLOPs per step (6N + 12*L*d*T per token; N = the parameters
    that multiply, i.e. without the token and position embeddings),
    cross-checked with torch.utils.flop_counter.FlopCounterMode on one CPU
    forward+backward (math SDPA backend, so attention's matmuls count), over the median step time, against (a) the measured
    peak of a large matmul on the tpu device (and on PyTorch CPU) and (b) the
    theoretical peak cores x GHz x FLOP/cycle from /proc/cpuinfo and lscpu.
  - Memory: peak bytes of one training step. tpu: torch.tpu's byte
    accounting (reset_peak_memory_stats, max_memory_allocated). CPU: the
    bytes live at the step's start (parameters, gradients, optimizer state,
    summed over the tensors) plus the peak of bytes allocated during the step
    and still live, from torch.profiler(profile_memory=True)'s allocator
    events ("Total Allocated" of the CPU allocator's [memory] records).

With --first-step MODE (strict, defer_and_fuse or compile) it instead times
the first training step of a fresh process (model build, first step,
loss.item()); run_all.py runs it with an empty and then a warm
TORCHTPU_CACHE_DIR.

Usage: python bench/train_bench.py [--rounds R] [--steps S] [--xla-python PY] [--json PATH]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

DIM, HEADS, LAYERS, SEQ, BATCH = 256, 4, 2, 128, 8
MODEL_KW = dict(dim=DIM, heads=HEADS, layers=LAYERS, max_len=SEQ)
WARMUP = 2
CONTENDERS = {  # name: (device, eager mode, torch.compile backend)
    "tpu_strict": ("tpu", "strict", None),
    "tpu_defer_and_fuse": ("tpu", "defer_and_fuse", None),
    "tpu_compile": ("tpu", "strict", "tpu"),
    "tpu_precompile": ("tpu", "strict", "precompile"),  # --first-step only
    # torch.compile with each graph executed when called (TORCHTPU_GRAPH_FUSION=0),
    # beside tpu_compile's one fused program per step; only with --only
    "tpu_compile_unfused": ("tpu", "strict", "tpu"),
    "cpu_eager": ("cpu", None, None),
    "cpu_inductor": ("cpu", None, "inductor"),
}


class Trainer:
    def __init__(self, name, data, vocab):
        import torch
        from tiny_gpt import TinyGPT, batches

        self.name = name
        self.device, self.mode, self.backend = CONTENDERS[name]
        if self.mode:
            import torchtpu
            torchtpu.set_eager_mode(self.mode)
        torch.manual_seed(0)
        self.model = TinyGPT(len(vocab), **MODEL_KW).to(self.device)
        # capturable for compiled steps: the step counts live on the device,
        # so the compiled optimizer step is one device program.
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=0.01,
                                     foreach=True, capturable=bool(self.backend))
        self.run_model, self.opt_step = self.model, self.opt.step
        if self.backend == "precompile":
            # torchtpu.compiler.precompile: a fresh process with its files
            # loads the step without tracing (first-step timing only)
            import torchtpu.compiler
            from tiny_gpt import model_loss
            folder = os.environ["TORCHTPU_CACHE_DIR"]
            loss_fn = torchtpu.compiler.precompile(model_loss, os.path.join(folder, "loss.tpuc"))
            self.run_model = lambda x, y: loss_fn(self.model, x, y)
            self.opt_step = torchtpu.compiler.precompile(self.opt.step,
                                                         os.path.join(folder, "step.tpuc"))
        elif self.backend:
            self.run_model = torch.compile(self.model, backend=self.backend)
            self.opt_step = torch.compile(self.opt.step, backend=self.backend)
        self.stream = batches(data, BATCH, SEQ, seed=0)
        self.losses = []

    def step(self):
        x, y = next(self.stream)
        x, y = x.to(self.device), y.to(self.device)
        loss = self.run_model(x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt_step()
        self.losses.append(loss.item())

    def sync(self):
        if self.device == "tpu":
            import torch
            torch.tpu.synchronize()

    def steps(self, n):
        if self.mode:  # process-wide: autograd's backward thread follows it
            import torchtpu
            torchtpu.set_eager_mode(self.mode)
            torchtpu._C._set_graph_fusion(self.name != "tpu_compile_unfused")
        t0 = time.perf_counter()
        for _ in range(n):
            self.step()
        self.sync()
        return (time.perf_counter() - t0) / n


class XlaRemote:
    """The torch_xla.compile contender, in its own venv and process
    (bench/xla_peer.py --serve), stepped over a pipe in turn with the
    others."""
    device = "xla"

    def __init__(self, xla_python):
        t0 = time.perf_counter()
        self.p = subprocess.Popen([xla_python, os.path.join(HERE, "xla_peer.py"), "--serve"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=dict(os.environ, PJRT_DEVICE="CPU"))
        self.hello = self._read()
        self.warmup_s = time.perf_counter() - t0

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"xla_peer.py --serve exited (rc {self.p.wait()})")
        return json.loads(line)

    def steps(self, n):
        self.p.stdin.write(f"steps {n}\n")
        self.p.stdin.flush()
        return self._read()["s_per_step"]

    def close(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        out = self._read()
        self.p.stdin.close()
        self.p.wait()
        return out


def model_flops(vocab_size):
    """(analytic FLOPs per step, FlopCounterMode FLOPs per step, N)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from tiny_gpt import TinyGPT

    torch.manual_seed(0)
    model = TinyGPT(vocab_size, **MODEL_KW)
    n = sum(p.numel() for name, p in model.named_parameters()
            if not name.startswith(("tok.", "pos.")))
    tokens = BATCH * SEQ
    analytic = tokens * (6 * n + 12 * LAYERS * DIM * SEQ)
    x = torch.randint(0, vocab_size, (BATCH, SEQ))
    # The math SDPA backend: FlopCounterMode has no formula for CPU's fused
    # flash attention kernel, and would leave attention out.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        model(x, x).backward()
    return analytic, fc.get_total_flops(), n


def machine_peak():
    """Theoretical fp32 peak from /proc/cpuinfo and lscpu, with the assumption."""
    info = open("/proc/cpuinfo").read()
    model = re.search(r"model name\s*:\s*(.*)", info)
    model = model.group(1).strip() if model else "unknown"
    cores = os.cpu_count()
    ghz = None
    m = re.search(r"@\s*([\d.]+)\s*GHz", model)
    if m:
        ghz = float(m.group(1))
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        lscpu = ""
    mx = re.search(r"CPU max MHz:\s*([\d.]+)", lscpu)
    mhz = re.findall(r"cpu MHz\s*:\s*([\d.]+)", info)
    ghz_source = "model name"
    if ghz is None and mx:
        ghz, ghz_source = float(mx.group(1)) / 1000, "lscpu CPU max MHz"
    if ghz is None and mhz:
        ghz, ghz_source = statistics.median(float(v) for v in mhz) / 1000, "/proc/cpuinfo cpu MHz"
    fl = re.search(r"flags\s*:\s*(.*)", info)
    flags = set(fl.group(1).split()) if fl else set()
    if "avx512f" in flags:
        width, isa = 16, "AVX-512"
    elif "avx2" in flags or "avx" in flags:
        width, isa = 8, "AVX2" if "avx2" in flags else "AVX"
    else:
        width, isa = 4, "SSE"
    fma = 2 if "fma" in flags else 1  # an FMA is 2 FLOPs
    units = 2
    per_cycle = width * fma * units
    tpc = re.search(r"Thread\(s\) per core:\s*(\d+)", lscpu)
    return {
        "cpu_model": model, "logical_cpus": cores, "ghz": ghz, "ghz_source": ghz_source,
        "threads_per_core": int(tpc.group(1)) if tpc else None,
        "isa": isa, "fma": "fma" in flags, "flop_per_cycle": per_cycle,
        "peak_gflops": cores * (ghz or 0) * per_cycle,
        "assumption": (f"{cores} logical CPUs x {ghz} GHz ({ghz_source}) x {per_cycle} fp32 "
                       f"FLOP/cycle = {isa} {width} lanes x {fma} (FMA) x {units} vector FMA "
                       "units per core; each logical CPU counted as a core, no turbo or "
                       "AVX-frequency offsets"),
    }


def matmul_peak(n=2048, reps=5):
    """Measured fp32 GFLOP/s of an n x n matmul on tpu and PyTorch CPU,
    alternating; medians."""
    import torch

    a = torch.randn(n, n)
    ta = a.to("tpu")
    torch.mm(ta, ta).cpu()
    torch.mm(a, a)
    t_tpu, t_cpu = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(ta, ta)
        torch.tpu.synchronize()
        t_tpu.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        torch.mm(a, a)
        t_cpu.append(time.perf_counter() - t0)
    flops = 2 * n ** 3
    return {"n": n, "tpu_gflops": flops / statistics.median(t_tpu) / 1e9,
            "cpu_gflops": flops / statistics.median(t_cpu) / 1e9}


def resident_bytes(tr):
    """Bytes of the trainer's parameters, gradients and optimizer state."""
    import torch

    seen, total = set(), 0
    tensors = list(tr.model.parameters())
    tensors += [p.grad for p in tr.model.parameters() if p.grad is not None]
    for st in tr.opt.state.values():
        tensors += [v for v in st.values() if torch.is_tensor(v)]
    for t in tensors:
        key = (t.device.type, t.untyped_storage().data_ptr())
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def cpu_step_peak_bytes(tr):
    """CPU: live bytes at the step's start + peak of the step's own live
    allocations (torch.profiler's CPU allocator events)."""
    from torch.profiler import ProfilerActivity, profile

    base = resident_bytes(tr)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        tr.step()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    peak = 0
    for ev in trace.get("traceEvents", []):
        if ev.get("name") == "[memory]":
            args = ev.get("args", {})
            if args.get("Device Type", 0) == 0:
                peak = max(peak, args.get("Total Allocated", 0))
    return base, peak


def tpu_step_peak_bytes(tr):
    import torch

    tr.steps(1)
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()  # every tpu trainer's tensors
    torch.tpu.reset_peak_memory_stats()
    tr.steps(1)
    return resident_bytes(tr), torch.tpu.max_memory_allocated() - before


def first_step(mode):
    """One fresh-process first step; prints a JSON line."""
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (every mode's AdamW imports it: import time)
    import torchtpu
    from tiny_gpt import make_corpus
    t1 = time.perf_counter()
    data, vocab = make_corpus()
    name = {"strict": "tpu_strict", "defer_and_fuse": "tpu_defer_and_fuse",
            "compile": "tpu_compile", "precompile": "tpu_precompile"}[mode]
    tr = Trainer(name, data, vocab)
    tr.steps(1)
    t2 = time.perf_counter()
    m = torchtpu.metrics.metrics()
    print(json.dumps({"mode": mode, "import_s": t1 - t0, "first_step_s": t2 - t1,
                      "compiles": m.get("compiles", 0),
                      "disk_hits": m.get("cache_hits::local", 0),
                      "graphs_built": m.get("compiled_graphs", 0),
                      "graphs_loaded": m.get("compiled_graph_loads", 0)}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=3, help="steps per contender per round")
    ap.add_argument("--only", help="comma-separated contenders (default: all)")
    ap.add_argument("--first-step", choices=("strict", "defer_and_fuse", "compile", "precompile"))
    ap.add_argument("--xla-python", help="also torch_xla.compile, run by this interpreter "
                    "(a venv with torch_xla) as bench/xla_peer.py --serve")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.first_step:
        return first_step(args.first_step)

    import torch
    import torchtpu
    from tiny_gpt import make_corpus

    data, vocab = make_corpus()
    names = args.only.split(",") if args.only else [
        n for n in CONTENDERS if n not in ("tpu_precompile", "tpu_compile_unfused")]
    print(f"torchtpu {torchtpu.__version__}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} CPU threads; TinyGPT dim {DIM}, {HEADS} heads, "
          f"{LAYERS} layers, batch {BATCH} x seq {SEQ}, AdamW; {args.rounds} rounds x "
          f"{args.steps} steps per contender, alternating", flush=True)
    trainers = {}
    warm_s = {}
    for name in names:
        t0 = time.perf_counter()
        trainers[name] = Trainer(name, data, vocab)
        trainers[name].steps(WARMUP)
        warm_s[name] = time.perf_counter() - t0
        print(f"  warm-up {name}: {warm_s[name]:.1f} s", flush=True)
    xla_info = None
    if args.xla_python:
        try:
            trainers["xla_compile"] = XlaRemote(args.xla_python)
            names.append("xla_compile")
            warm_s["xla_compile"] = trainers["xla_compile"].warmup_s
            xla_info = dict(trainers["xla_compile"].hello)
            print(f"  warm-up xla_compile (torch_xla {xla_info['torch_xla']}, own process): "
                  f"{warm_s['xla_compile']:.1f} s", flush=True)
        except (OSError, RuntimeError, ValueError) as e:
            xla_info = {"error": f"{type(e).__name__}: {e}"}
            print(f"  xla_compile not run: {xla_info['error']}", flush=True)
    c0 = torchtpu.metrics.metrics().get("compiles", 0)
    times = {k: [] for k in names}
    for r in range(args.rounds):
        for name, tr in trainers.items():
            times[name].append(tr.steps(args.steps))
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1] * 1e3:.0f}" for k, v in times.items())
              + " ms/step", flush=True)
    compiles_timed = torchtpu.metrics.metrics().get("compiles", 0) - c0
    if "xla_compile" in trainers:
        xla_info.update(trainers.pop("xla_compile").close())
        print(f"  torch_xla compiles during the timed rounds: {xla_info['compiles_timed']}")
    torchtpu.set_eager_mode("strict")
    tokens = BATCH * SEQ
    med = {k: statistics.median(v) for k, v in times.items()}

    def ratio(a, b):  # throughput ratio a/b = time ratio b/a, per round
        return statistics.median(tb / ta for ta, tb in zip(times[a], times[b]))

    ratios = {}
    for a, b in (("tpu_compile", "cpu_inductor"), ("tpu_compile", "xla_compile"),
                 ("xla_compile", "cpu_eager"), ("tpu_compile", "cpu_eager"),
                 ("tpu_compile", "tpu_strict"), ("tpu_defer_and_fuse", "tpu_strict"),
                 ("tpu_strict", "cpu_eager"), ("cpu_inductor", "cpu_eager")):
        if a in times and b in times:
            ratios[f"{a}/{b}"] = ratio(a, b)
    print(f"\n{'contender':<22}{'ms/step':>10}{'tokens/s':>11}")
    for k in names:
        print(f"{k:<22}{med[k] * 1e3:>10.1f}{tokens / med[k]:>11,.0f}")
    for k, v in ratios.items():
        print(f"tokens/s ratio {k}: {v:.2f}x")
    print(f"compiles during the timed rounds: {compiles_timed}")
    first = {k: tr.losses[:3] for k, tr in trainers.items()}

    analytic, counted, n_params = model_flops(len(vocab))
    peak = matmul_peak()
    theo = machine_peak()
    mfu = {}
    for k in names:
        achieved = analytic / med[k] / 1e9
        mfu[k] = {"achieved_gflops": achieved,
                  "mfu_measured_peak": achieved / peak["tpu_gflops"],
                  "mfu_theoretical_peak": achieved / theo["peak_gflops"]
                  if theo["peak_gflops"] else None}
    print(f"\nmodel FLOPs/step: {analytic / 1e9:.2f} GFLOP (6N + 12*L*d*T, N={n_params:,}); "
          f"FlopCounterMode {counted / 1e9:.2f} GFLOP ({counted / analytic:.3f}x)")
    print(f"measured peak: {peak['n']}^2 matmul on tpu {peak['tpu_gflops']:.1f} GFLOP/s "
          f"(PyTorch CPU {peak['cpu_gflops']:.1f}); theoretical {theo['peak_gflops']:.1f} "
          f"GFLOP/s ({theo['assumption']})")
    for k, v in mfu.items():
        print(f"  {k:<22}{v['achieved_gflops']:>8.1f} GFLOP/s  MFU vs measured "
              f"{v['mfu_measured_peak']:.1%}, vs theoretical {v['mfu_theoretical_peak']:.1%}")

    memory = {}
    for k, tr in trainers.items():
        if tr.device == "tpu":
            base, peak_delta = tpu_step_peak_bytes(tr)
            method = ("resident tensor bytes + torch.tpu.max_memory_allocated - "
                      "memory_allocated, after reset_peak_memory_stats")
        else:
            base, peak_delta = cpu_step_peak_bytes(tr)
            method = "resident tensor bytes + torch.profiler profile_memory peak"
        memory[k] = {"resident_bytes": base, "step_peak_extra_bytes": peak_delta,
                     "peak_bytes": base + peak_delta, "method": method}
        print(f"  peak memory {k:<22}{(base + peak_delta) / 2**20:>8.1f} MiB "
              f"(resident {base / 2**20:.1f} + step {peak_delta / 2**20:.1f})")
    torchtpu.set_eager_mode("strict")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": {"dim": DIM, "heads": HEADS, "layers": LAYERS, "seq": SEQ,
                                  "batch": BATCH, "vocab": len(vocab), "rounds": args.rounds,
                                  "steps_per_round": args.steps, "warmup_steps": WARMUP},
                       "torch": torch.__version__, "threads": torch.get_num_threads(),
                       "ms_per_step": {k: v * 1e3 for k, v in med.items()},
                       "tokens_per_s": {k: tokens / v for k, v in med.items()},
                       "round_times_s": times, "ratios": ratios,
                       "warmup_s": warm_s, "compiles_timed": compiles_timed,
                       "first_losses": first,
                       "flops": {"analytic_per_step": analytic, "flop_counter_per_step": counted,
                                 "n_params_nonembedding": n_params},
                       "matmul_peak": peak, "theoretical": theo, "mfu": mfu,
                       "memory": memory, "xla": xla_info}, f, indent=1)


if __name__ == "__main__":
    main()
