"""`make bench`: runs every benchmark of bench/ on this machine, collects
their JSON and writes bench/RESULTS.md, bench/results.json and the plots
bench/*.png. The torchtpu pieces run in this interpreter's venv; the
PyTorch/XLA peer (bench/xla_peer.py) runs in XLA_PYTHON (default
.venv-xla/bin/python) with PJRT_DEVICE=CPU. A piece that fails is reported
in RESULTS.md with its reason and the rest still runs.

Usage: python bench/run_all.py [--quick] [--xla-python PATH] [--skip NAME,...]
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT_DIR = os.path.join(ROOT, "build", "bench")


def rel(path):
    return os.path.relpath(path, ROOT)


class Runner:
    def __init__(self):
        self.pieces = {}  # name: {"cmd", "wall_s", "rc", "log", "json"}

    def run(self, name, argv, env=None, json_path=None, timeout=1800):
        """Runs argv from the repository root, streaming its output; returns
        the parsed JSON it wrote (or None)."""
        env_extra = env or {}
        cmd = " ".join(f"{k}={shlex.quote(v)}" for k, v in env_extra.items())
        cmd = (cmd + " " if cmd else "") + shlex.join(rel(a) if os.path.isabs(a)
                                                      and a.startswith(ROOT) else a
                                                      for a in argv)
        print(f"\n=== {name}: {cmd}", flush=True)
        if json_path and os.path.exists(json_path):
            os.remove(json_path)
        t0 = time.perf_counter()
        lines = []
        try:
            p = subprocess.Popen(argv, cwd=ROOT, env=dict(os.environ, **env_extra),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for line in p.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                lines.append(line)
            rc = p.wait(timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            rc, lines = -1, lines + [f"{type(e).__name__}: {e}\n"]
        wall = time.perf_counter() - t0
        data = None
        if json_path and rc == 0 and os.path.exists(json_path):
            with open(json_path) as f:
                data = json.load(f)
        # Profiler and Dynamo chatter is not part of a benchmark's output.
        log = "".join(line for line in lines
                      if not line.startswith(("USDT:", "[W1", "[W0"))
                      and "Profiler record function" not in line)
        self.pieces[name] = {"cmd": cmd, "wall_s": wall, "rc": rc, "log": log}
        print(f"=== {name}: rc {rc}, {wall:.0f} s", flush=True)
        return data


def first_steps(runner, py, reps):
    """Time to first step of a fresh process, cold (empty TORCHTPU_CACHE_DIR
    and TORCHINDUCTOR_CACHE_DIR) and warm (the same dirs again), per mode;
    reps cold/warm pairs each. "compile" is torch.compile(backend="tpu")
    (warm: AOTAutograd's cache holds the graphs, Dynamo traces);
    "precompile" is torchtpu.compiler.precompile (warm: nothing traced)."""
    out = {}
    for mode in ("strict", "defer_and_fuse", "compile", "precompile"):
        runs = {"cold": [], "warm": []}
        for rep in range(reps):
            with tempfile.TemporaryDirectory(prefix="torchtpu-bench-cache-") as cache:
                for kind in ("cold", "warm"):
                    name = f"first_step_{mode}_{kind}_{rep + 1}"
                    env = {"TORCHTPU_CACHE": "1", "TORCHTPU_CACHE_DIR": cache,
                           "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor")}
                    runner.run(name, [py, os.path.join(HERE, "train_bench.py"),
                                      "--first-step", mode], env=env)
                    piece = runner.pieces[name]
                    piece["cmd"] = piece["cmd"].replace(cache, "<tmp dir>")
                    try:
                        line = [x for x in piece["log"].splitlines() if x.startswith("{")][-1]
                        runs[kind].append(json.loads(line))
                    except (IndexError, ValueError):
                        pass
        if runs["cold"] and runs["warm"]:
            cold = statistics.median(r["first_step_s"] for r in runs["cold"])
            warm = statistics.median(r["first_step_s"] for r in runs["warm"])
            out[mode] = {"cold_s": cold, "warm_s": warm, "ratio": cold / warm,
                         "cold_compiles": statistics.median(r["compiles"] for r in runs["cold"]),
                         "warm_compiles": statistics.median(r["compiles"] for r in runs["warm"]),
                         "warm_disk_hits": statistics.median(r["disk_hits"]
                                                             for r in runs["warm"]),
                         "import_s": statistics.median(r["import_s"] for r in runs["warm"]),
                         "runs": runs}
    return out


def xla_status(xla_py):
    """(ok, reason) for the PyTorch/XLA venv."""
    if not os.path.exists(xla_py):
        log = os.path.join(OUT_DIR, "xla-install.log")
        tail = ""
        if os.path.exists(log):
            tail = " Install log tail: " + " | ".join(
                x for x in open(log).read().splitlines()
                if not x.startswith("WARNING: Location"))[-600:]
        return False, f"{rel(xla_py)} does not exist (the venv was not created).{tail}"
    p = subprocess.run([xla_py, "-c", "import torch, torch_xla; print(torch.__version__, "
                        "torch_xla.__version__)"], capture_output=True, text=True,
                       env=dict(os.environ, PJRT_DEVICE="CPU"))
    if p.returncode != 0:
        return False, ("`import torch_xla` fails in " + rel(xla_py) + ": "
                       + (p.stderr.strip().splitlines() or ["?"])[-1][:400])
    return True, p.stdout.strip()


def machine():
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    keep = ("Architecture", "Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket",
            "Socket(s)", "CPU max MHz", "L2 cache", "L3 cache")
    lines = [x for x in lscpu.splitlines() if x.split(":")[0].strip() in keep]
    mem = ""
    try:
        mem = [x for x in open("/proc/meminfo") if x.startswith("MemTotal")][0].strip()
    except (OSError, IndexError):
        pass
    return {"lscpu": lines, "meminfo": mem, "platform": platform.platform(),
            "python": platform.python_version()}


# --------------------------------------------------------------------------
# Report

def fmt_us(v):
    return f"{v:,.1f}" if v < 1000 else f"{v / 1000:,.2f} ms"


def plots(res):
    """Writes the PNGs; returns {name: file name}."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"no plots: {e}")
        return {}
    made = {}

    def finish(fig, ax, ylabel, title, key, file_name, legend=True):
        """The common tail of every plot: labels, legend, saved PNG."""
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if legend:
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(HERE, file_name), dpi=110)
        plt.close(fig)
        made[key] = file_name

    def contender_axis(ax, names):
        """x ticks naming the contenders of the training step."""
        ax.set_xticks(range(len(names)), [LABELS.get(n, n) for n in names], fontsize=8,
                      rotation=15)

    def contender_colors(names):
        return ["C0" if n.startswith("tpu") else "C1" if n.startswith("cpu") else "C2"
                for n in names]

    ops = res.get("per_op") or {}
    xla_ops = (res.get("xla") or {}).get("per_op") or {}
    if ops:
        cases = list(ops)
        series = [("tpu strict", [ops[c]["us"]["tpu_strict"] for c in cases]),
                  ("tpu defer_and_fuse", [ops[c]["us"]["tpu_defer_and_fuse"] for c in cases]),
                  ("PyTorch CPU eager", [ops[c]["us"]["cpu_eager"] for c in cases])]
        if xla_ops:
            series.append(("PyTorch/XLA eager", [xla_ops[c]["us"]["xla_eager"] for c in cases]))
        fig, ax = plt.subplots(figsize=(9, 4.5))
        w = 0.8 / len(series)
        for i, (label, vals) in enumerate(series):
            ax.bar([j + i * w for j in range(len(cases))], vals, w, label=label)
        ax.set_xticks([j + 0.4 - w / 2 for j in range(len(cases))], cases, fontsize=8)
        ax.set_yscale("log")
        finish(fig, ax, "µs per op (median, log scale)",
               "Per-op eager time (chain of cache-hit ops, then one sync)", "per_op", "per_op.png")
    tr = res.get("train")
    if tr:
        tps = dict(tr["tokens_per_s"])
        fig, ax = plt.subplots(figsize=(8, 4))
        names = list(tps)
        ax.bar(range(len(names)), [tps[n] for n in names], color=contender_colors(names))
        contender_axis(ax, names)
        c = tr["config"]
        finish(fig, ax, "tokens/s (median)",
               f"Training step, TinyGPT d{c['dim']} L{c['layers']} "
               f"batch {c['batch']}x{c['seq']}, AdamW", "train", "train_tokens.png",
               legend=False)

        fig, ax = plt.subplots(figsize=(8, 4))
        gf = {n: v["achieved_gflops"] for n, v in tr["mfu"].items()}
        names = list(gf)
        ax.bar(range(len(names)), [gf[n] for n in names], color=contender_colors(names))
        ax.axhline(tr["matmul_peak"]["tpu_gflops"], color="C3", ls="--",
                   label=f"measured peak, {tr['matmul_peak']['n']}² matmul on tpu")
        ax.axhline(tr["theoretical"]["peak_gflops"], color="k", ls=":",
                   label="theoretical cores x GHz x FLOP/cycle")
        contender_axis(ax, names)
        finish(fig, ax, "model GFLOP/s", "Achieved model FLOP/s of the training step vs peaks",
               "mfu", "mfu.png")

        fig, ax = plt.subplots(figsize=(8, 4))
        names = list(tr["memory"])
        mem = tr["memory"]
        ax.bar(range(len(names)), [mem[n]["resident_bytes"] / 2**20 for n in names],
               label="resident (params, grads, optimizer state)")
        ax.bar(range(len(names)), [mem[n]["step_peak_extra_bytes"] / 2**20 for n in names],
               bottom=[mem[n]["resident_bytes"] / 2**20 for n in names],
               label="peak extra during the step")
        contender_axis(ax, names)
        finish(fig, ax, "MiB", "Peak memory of one training step", "memory", "memory.png")
    fs = res.get("first_step")
    if fs:
        modes = list(fs)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.bar([i - 0.2 for i in range(len(modes))], [fs[m]["cold_s"] for m in modes], 0.4,
               label="cold cache (empty TORCHTPU_CACHE_DIR)")
        ax.bar([i + 0.2 for i in range(len(modes))], [fs[m]["warm_s"] for m in modes], 0.4,
               label="warm cache")
        ax.set_xticks(range(len(modes)), modes)
        finish(fig, ax, "s to the first step (import excluded)",
               "First training step in a fresh process", "first_step", "first_step.png")
    return made


LABELS = {"tpu_strict": "tpu strict", "tpu_defer_and_fuse": "tpu defer_and_fuse",
          "tpu_compile": "tpu torch.compile", "cpu_eager": "CPU eager",
          "cpu_inductor": "CPU Inductor", "xla_compile": "torch_xla.compile"}


def write_report(res, runner, made, total_s):
    L = []
    add = L.append
    tr = res.get("train") or {}
    xla = res.get("xla") or {}
    ops = res.get("per_op") or {}
    xops = xla.get("per_op") or {}
    fs = res.get("first_step") or {}
    add("# torchtpu benchmarks beside its peers")
    add("")
    add(f"Written by `make bench` (`bench/run_all.py`) on {res['date']} in {total_s / 60:.1f} "
        f"min. Machine: {machine_line(res['machine'])}. torchtpu runs on the OpenXLA CPU PJRT plugin, so "
        "\"tpu\" below is this CPU through XLA. Every figure comes from this one run; "
        "contenders in one process alternate round by round and figures are medians over "
        "rounds, ratios medians of per-round ratios unless marked otherwise. Raw numbers: "
        "[results.json](results.json).")
    add("")
    if not res.get("xla_ok"):
        add(f"**PyTorch/XLA peer not measured:** {res.get('xla_reason')}")
        add("")
    add("## Summary")
    add("")
    add("| figure | value |")
    add("|---|---|")
    for k, v in summary_rows(res):
        add(f"| {k} | {v} |")
    add("")

    add("How to read these: on this machine the \"tpu\" device is the OpenXLA CPU PJRT "
        "plugin on the same cores as PyTorch CPU, so tpu vs CPU compares torchtpu's dispatch "
        "plus XLA's CPU code generation with PyTorch's own CPU kernels, not an accelerator "
        "with a CPU; PyTorch/XLA (PJRT_DEVICE=CPU) runs XLA's CPU backend too, so tpu vs "
        "torch_xla compares the two front ends on like compilers. A ratio above 1 means "
        "the first named is faster for throughput ratios (tokens/s); per-op ratios are of time "
        "(above 1: slower than PyTorch CPU eager). The background load during the run is not controlled: "
        "alternating rounds spread it over the contenders of one process, but pieces run "
        "one after another.")
    add("")
    add("## 1. Per-op eager overhead")
    add("")
    add("A chain of cache-hit ops (`x = op(x, y)`: every result is used, so a deferred "
        "backend cannot merge identical ops; matmuls multiply by an orthogonal matrix; "
        "`bench/op_cases.py`), then one synchronize, divided by "
        "the count; \"op+sync\" synchronizes after every op. tpu strict, tpu defer_and_fuse and PyTorch CPU eager alternate round by "
        "round in one process (`bench/runtime_overhead.py`). PyTorch/XLA eager mode "
        "(`torch_xla.experimental.eager_mode(True)`, sync `xm.wait_device_ops()`) runs in "
        "its own venv and process beside its own PyTorch CPU eager (`bench/xla_peer.py --ops`); "
        "its ratio is to that CPU eager. µs per op; ratio = time / CPU eager time.")
    add("")
    if ops:
        hdr = "| case | tpu strict | tpu defer_and_fuse | CPU eager | strict/CPU | defer/CPU | strict op+sync |"
        sep = "|---|---:|---:|---:|---:|---:|---:|"
        if xops:
            hdr += " XLA eager | XLA/CPU (its process) | XLA op+sync |"
            sep += "---:|---:|---:|"
        add(hdr)
        add(sep)
        for c, v in ops.items():
            u, r = v["us"], v["ratio_to_cpu"]
            row = (f"| {c} | {fmt_us(u['tpu_strict'])} | {fmt_us(u['tpu_defer_and_fuse'])} | "
                   f"{fmt_us(u['cpu_eager'])} | {r['tpu_strict']:.2f}x | "
                   f"{r['tpu_defer_and_fuse']:.2f}x | {fmt_us(u['tpu_strict_op_sync'])} |")
            if xops and c in xops:
                xu, xr = xops[c]["us"], xops[c]["ratio_to_cpu"]
                row += (f" {fmt_us(xu['xla_eager'])} | {xr['xla_eager']:.2f}x | "
                        f"{fmt_us(xu['xla_eager_op_sync'])} |")
            add(row)
        add("")
        if "per_op" in made:
            add(f"![per-op]({made['per_op']})")
            add("")
        cp = res.get("per_op_extra", {}).get("copy_GBps")
        if cp:
            add(f"Copies: `x.to('tpu')` 64 MiB {cp['to_tpu_64MiB']:.2f} GB/s, "
                f"`t.cpu()` 64 MiB {cp['to_cpu_64MiB']:.2f} GB/s.")
            add("")

    add("## 2. Training step")
    add("")
    if tr:
        c = tr["config"]
        add(f"TinyGPT (`examples/tiny_gpt.py`): hidden {c['dim']}, {c['heads']} heads, "
            f"{c['layers']} layers, sequence {c['seq']}, batch {c['batch']} "
            f"({c['batch'] * c['seq']} tokens/step), vocab {c['vocab']}, AdamW (foreach; "
            "capturable when compiled), loss.item() every step. "
            f"{c['warmup_steps']} warm-up steps (compiles), then {c['rounds']} rounds x "
            f"{c['steps_per_round']} steps per contender, alternating (`bench/train_bench.py`). "
            f"torch.compile wraps the model and `opt.step`. tpu XLA compiles during the timed "
            f"rounds: {tr['compiles_timed']}.")
        add("")
        add("| contender | ms/step | tokens/s | warm-up (s) |")
        add("|---|---:|---:|---:|")
        for k in tr["ms_per_step"]:
            add(f"| {LABELS.get(k, k)} | {tr['ms_per_step'][k]:.1f} | "
                f"{tr['tokens_per_s'][k]:,.0f} | {tr['warmup_s'][k]:.1f} |")
        add("")
        add("| ratio (tokens/s) | value |")
        add("|---|---:|")
        for k, v in tr["ratios"].items():
            a, b = k.split("/")
            add(f"| {LABELS.get(a, a)} / {LABELS.get(b, b)} | {v:.2f}x |")
        add("")
        xi = tr.get("xla") or {}
        if "xla_compile" in tr["ms_per_step"]:
            add(f"torch_xla.compile (torch {xi.get('torch')}, torch_xla {xi.get('torch_xla')}, "
                "PJRT_DEVICE=CPU) runs in a process of its own venv (`bench/xla_peer.py "
                "--serve`, started by `train_bench.py --xla-python`) and takes its turn in the "
                "same round-by-round alternation over a pipe, so its ratios are side by side "
                "like the others. The whole step (forward, backward, AdamW) is one "
                "`torch_xla.compile`d function; AdamW is not capturable there (torch 2.9 refuses "
                f"capturable on xla tensors). torch_xla compiles during the timed rounds: "
                f"{xi.get('compiles_timed')}. First losses, torch_xla vs tpu compile: "
                f"{[round(x, 4) for x in xi.get('first_losses', [])]} vs "
                f"{[round(x, 4) for x in tr['first_losses'].get('tpu_compile', [])]}.")
            add("")
        elif xi.get("error"):
            add(f"torch_xla.compile not measured: {xi['error']}")
            add("")
        if "train" in made:
            add(f"![training tokens/s]({made['train']})")
            add("")

        add("## 3. MFU of the training step")
        add("")
        fl = tr["flops"]
        th = tr["theoretical"]
        pk = tr["matmul_peak"]
        add(f"Model FLOPs per step = tokens x (6N + 12 L d T) with N = "
            f"{fl['n_params_nonembedding']:,} (parameters that multiply: every weight but the "
            f"token and position embeddings), L = {c['layers']}, d = {c['dim']}, "
            f"T = {c['seq']}: **{fl['analytic_per_step'] / 1e9:.2f} GFLOP**. "
            f"FlopCounterMode on one CPU forward+backward counts "
            f"{fl['flop_counter_per_step'] / 1e9:.2f} GFLOP "
            f"({fl['flop_counter_per_step'] / fl['analytic_per_step']:.3f}x). It runs with the "
            "math SDPA backend, as FlopCounterMode has no formula for CPU's fused flash "
            "attention kernel and would leave attention out; like the formula it counts the "
            "matmuls only (causal attention counted in full, as in the formula), not the "
            "elementwise work or the optimizer.")
        add("")
        add(f"- (a) measured peak: a {pk['n']}x{pk['n']} float32 matmul on the tpu device in "
            f"this run: **{pk['tpu_gflops']:.1f} GFLOP/s** (PyTorch CPU, same matmul: "
            f"{pk['cpu_gflops']:.1f} GFLOP/s).")
        add(f"- (b) theoretical: **{th['peak_gflops']:.1f} GFLOP/s** = {th['assumption']}. "
            f"CPU: {th['cpu_model']}; threads per core {th['threads_per_core']}.")
        add("")
        add("| contender | model GFLOP/s | MFU vs measured peak | MFU vs theoretical |")
        add("|---|---:|---:|---:|")
        for k, v in tr["mfu"].items():
            add(f"| {LABELS.get(k, k)} | {v['achieved_gflops']:.1f} | "
                f"{v['mfu_measured_peak']:.1%} | {v['mfu_theoretical_peak']:.1%} |")
        add("")
        if "mfu" in made:
            add(f"![MFU]({made['mfu']})")
            add("")
    else:
        add("Not measured: " + runner.pieces.get("train", {}).get("log", "")[-800:])
        add("")

    add("## 4. Compile cache: first step in a fresh process, cold vs warm")
    add("")
    if fs:
        reps = len(next(iter(fs.values()))["runs"]["cold"])
        add("Each run is a new process (`bench/train_bench.py --first-step MODE`) timing model "
            "build, the first training step of section 2's model and its loss.item(); imports "
            "are excluded (listed separately). Cold: an empty `TORCHTPU_CACHE_DIR`; warm: "
            f"the same directory again, in a new process. Medians of {reps} cold/warm pairs, "
            "each pair with its own fresh directory.")
        add("")
        add("| mode | cold (s) | warm (s) | cold/warm | XLA compiles cold / warm | disk hits warm | import (s) |")
        add("|---|---:|---:|---:|---:|---:|---:|")
        for m, v in fs.items():
            add(f"| {m} | {v['cold_s']:.2f} | {v['warm_s']:.2f} | {v['ratio']:.2f}x | "
                f"{v['cold_compiles']:.0f} / {v['warm_compiles']:.0f} | "
                f"{v['warm_disk_hits']:.0f} | {v['import_s']:.2f} |")
        add("")
        if "first_step" in made:
            add(f"![first step]({made['first_step']})")
            add("")

    add("## 5. Peak memory of one training step")
    add("")
    if tr:
        add("Resident = bytes of the contender's parameters, gradients and optimizer state "
            "(summed over its tensors' storages). Step = the most bytes allocated beyond what "
            "was live when the step began. tpu: torchtpu's own byte accounting, "
            "`torch.tpu.reset_peak_memory_stats()` then `max_memory_allocated() - "
            "memory_allocated()`. CPU: `tracemalloc` does not see PyTorch's allocator, so the "
            "step runs under `torch.profiler.profile(profile_memory=True)` and the figure is "
            "the largest \"Total Allocated\" of the CPU allocator's `[memory]` records, which "
            "count only allocations made while profiling (so exactly the step's own). One "
            "step after the timed rounds; the batch's input tensors are included in both.")
        add("")
        add("| contender | resident (MiB) | step extra (MiB) | peak (MiB) |")
        add("|---|---:|---:|---:|")
        for k, v in tr["memory"].items():
            add(f"| {LABELS.get(k, k)} | {v['resident_bytes'] / 2**20:.1f} | "
                f"{v['step_peak_extra_bytes'] / 2**20:.1f} | {v['peak_bytes'] / 2**20:.1f} |")
        add("")
        if "memory" in made:
            add(f"![memory]({made['memory']})")
            add("")

    add("## Other benchmarks of bench/ (their own output)")
    add("")
    for name, title in (("runtime_bench", "C runtime layer (`bench/runtime_bench.c`)"),
                        ("runtime_overhead", "Per-op script and demo step "
                         "(`bench/runtime_overhead.py`)"),
                        ("eager_modes", "Demo step, strict vs defer_and_fuse "
                         "(`bench/eager_modes.py`)"),
                        ("compile_bench", "Demo step, compiled vs peers "
                         "(`bench/compile_bench.py`)"),
                        ("jax_peer", "Bench-sized step, compiled vs JAX's jax.jit "
                         "(`bench/jax_peer.py`)"),
                        ("dynamic_bench", "Dynamic shapes: 26 lengths and HF generate, "
                         "buckets vs specialised (`bench/dynamic_bench.py`)"),
                        ("xla_cpu_floor", "What XLA:CPU itself costs: the demo's graphs "
                         "run by JAX, a + a by size, the warm first step split "
                         "(`bench/xla_cpu_floor.py`)"),
                        ("dist_bench", "Distributed (`bench/dist_bench.py`)")):
        p = runner.pieces.get(name)
        if not p:
            continue
        add(f"### {title}")
        add("")
        add("```")
        add(p["log"].rstrip()[-6000:])
        add("```")
        add("")

    add("## Command lines")
    add("")
    add("Run from the repository root by `make bench` (which first installs "
        "`bench/requirements.txt` into .venv and creates .venv-xla with "
        "`python3.11 -m venv .venv-xla && .venv-xla/bin/pip install torch==2.9.0 "
        "torch_xla==2.9.0`):")
    add("")
    add("| piece | command | rc | wall (s) |")
    add("|---|---|---:|---:|")
    for name, p in runner.pieces.items():
        add(f"| {name} | `{p['cmd']}` | {p['rc']} | {p['wall_s']:.0f} |")
    add("")
    add(f"Total: {total_s:.0f} s.")
    add("")
    with open(os.path.join(HERE, "RESULTS.md"), "w") as f:
        f.write("\n".join(L))


def machine_line(m):
    d = {x.split(":", 1)[0].strip(): x.split(":", 1)[1].strip() for x in m["lscpu"]}
    mem = m.get("meminfo", "").split(":")[-1].strip()
    return (f"{d.get('Model name', '?')}, {d.get('CPU(s)', '?')} logical CPUs "
            f"({d.get('Thread(s) per core', '?')} thread(s) per core), MemTotal {mem}, "
            f"{m['platform']}, Python {m['python']}")


def summary_rows(res):
    rows = []
    ops = res.get("per_op") or {}
    xops = (res.get("xla") or {}).get("per_op") or {}
    tr = res.get("train") or {}
    for c in ("tiny add [1]", "matmul 64x64", "matmul 512x512", "softmax 128x512",
              "layer_norm 128x512", "sdpa 16x4x64x16"):
        if c in ops:
            u, r = ops[c]["us"], ops[c]["ratio_to_cpu"]
            v = (f"strict {fmt_us(u['tpu_strict'])} ({r['tpu_strict']:.2f}x), defer "
                 f"{fmt_us(u['tpu_defer_and_fuse'])} ({r['tpu_defer_and_fuse']:.2f}x), CPU "
                 f"{fmt_us(u['cpu_eager'])}")
            if c in xops:
                v += (f"; XLA eager {fmt_us(xops[c]['us']['xla_eager'])} "
                      f"({xops[c]['ratio_to_cpu']['xla_eager']:.2f}x its CPU)")
            rows.append((f"{c}, µs per op (time / CPU eager's)", v))
    if tr:
        t = tr["tokens_per_s"]
        v = ", ".join(f"{LABELS[k]} {t[k]:,.0f}" for k in t)
        rows.append(("training step tokens/s", v))
        r = tr["ratios"]
        if "tpu_compile/cpu_inductor" in r:
            rows.append(("tpu compile / CPU Inductor (tokens/s)",
                         f"**{r['tpu_compile/cpu_inductor']:.2f}x**"))
        if "tpu_compile/xla_compile" in r:
            rows.append(("tpu compile / torch_xla.compile (tokens/s)",
                         f"**{r['tpu_compile/xla_compile']:.2f}x**"))
        for a, b in (("tpu_compile", "tpu_strict"), ("tpu_defer_and_fuse", "tpu_strict"),
                     ("tpu_compile", "cpu_eager")):
            k = f"{a}/{b}"
            if k in r:
                rows.append((f"{LABELS[a]} / {LABELS[b]} (tokens/s)", f"{r[k]:.2f}x"))
        m = tr["mfu"].get("tpu_compile")
        if m:
            rows.append(("MFU of the compiled tpu step",
                         f"**{m['mfu_measured_peak']:.1%}** of measured peak "
                         f"({tr['matmul_peak']['tpu_gflops']:.1f} GFLOP/s), "
                         f"**{m['mfu_theoretical_peak']:.1%}** of theoretical "
                         f"({tr['theoretical']['peak_gflops']:.1f} GFLOP/s); "
                         f"{m['achieved_gflops']:.1f} model GFLOP/s"))
        mem = tr["memory"]
        if "tpu_compile" in mem and "cpu_eager" in mem:
            rows.append(("peak memory of a step, MiB",
                         ", ".join(f"{LABELS[k]} {v['peak_bytes'] / 2**20:.1f}"
                                   for k, v in mem.items())))
    for m, v in (res.get("first_step") or {}).items():
        rows.append((f"first step in a fresh process, {m}, cold vs warm cache",
                     f"{v['cold_s']:.2f} s vs {v['warm_s']:.2f} s: **{v['ratio']:.2f}x**"))
    jp = res.get("jax_peer")
    if jp:
        t = jp["tokens_per_s"]
        rows.append(("bench-sized step, tpu torch.compile / JAX jax.jit (tokens/s)",
                     f"{t['torchtpu compiled']:,.0f} / {t['jax.jit']:,.0f}: "
                     f"**{jp['compiled/jax']:.2f}x**"))
    dy = res.get("dynamic_bench")
    if dy:
        lb, ls = dy["lengths_8_33"]["buckets"], dy["lengths_8_33"]["specialised"]
        rows.append(("26 lengths 8..33 under dynamic=True, buckets vs specialised",
                     f"{lb['total_s']:.1f} s vs {ls['total_s']:.1f} s "
                     f"(**{dy['lengths_8_33']['speedup']:.2f}x**); programs per graph "
                     f"{lb['bucket_programs']} vs {ls['specialisations'] // 2}; graphs run "
                     f"eagerly {lb['graphs_eager']}"))
        gb, gs = dy["hf_generate"]["buckets"], dy["hf_generate"]["specialised"]
        rows.append(("HF generate() first call / steady tokens/s, buckets vs specialised",
                     f"{gb['first_call_s']:.2f} s / {gb['steady_tokens_per_s']:.0f} vs "
                     f"{gs['first_call_s']:.2f} s / {gs['steady_tokens_per_s']:.0f}"))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--xla-python", default=os.path.join(ROOT, ".venv-xla", "bin", "python"))
    ap.add_argument("--skip", default="", help="comma-separated pieces to leave out")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite RESULTS.md and the plots from the last run's saved results")
    args = ap.parse_args()
    if args.report_only:
        with open(os.path.join(HERE, "results.json")) as f:
            res = json.load(f)
        runner = Runner()
        with open(os.path.join(OUT_DIR, "pieces.json")) as f:
            runner.pieces = json.load(f)
        write_report(res, runner, plots(res), res["total_s"])
        return
    skip = set(filter(None, args.skip.split(",")))
    os.makedirs(OUT_DIR, exist_ok=True)
    py = sys.executable
    t_start = time.perf_counter()
    runner = Runner()
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": machine()}
    rounds = ["--rounds", "2", "--steps", "1"] if args.quick else []

    def js(name):
        return os.path.join(OUT_DIR, f"{name}.json")

    rb = os.path.join(ROOT, "build", "bench", "runtime_bench")
    if "runtime_bench" not in skip and os.path.exists(rb):
        runner.run("runtime_bench", [rb])
    if "runtime_overhead" not in skip:
        d = runner.run("runtime_overhead", [py, os.path.join(HERE, "runtime_overhead.py"),
                                            "--json", js("runtime_overhead")],
                       json_path=js("runtime_overhead"))
        if d:
            res["per_op"] = d.pop("per_op")
            res["per_op_extra"] = d
    ok, why = xla_status(args.xla_python)
    res["xla_ok"], res["xla_reason"] = ok, why
    if "xla" in skip:
        ok, res["xla_ok"], res["xla_reason"] = False, False, "left out of this run (--skip xla)"
    if "train" not in skip:
        res["train"] = runner.run("train", [py, os.path.join(HERE, "train_bench.py"), *rounds,
                                            *(["--xla-python", args.xla_python] if ok else []),
                                            "--json", js("train")],
                                  json_path=js("train"))
    if ok:
        res["xla"] = runner.run("xla_peer", [args.xla_python, os.path.join(HERE, "xla_peer.py"),
                                             "--ops", "--json", js("xla_peer")],
                                env={"PJRT_DEVICE": "CPU"}, json_path=js("xla_peer"))
        if not res["xla"]:
            res["xla_ok"] = False
            res["xla_reason"] = ("bench/xla_peer.py failed: "
                                 + runner.pieces["xla_peer"]["log"][-600:].replace("\n", " | "))
    else:
        print(f"\n=== PyTorch/XLA peer not run: {res['xla_reason']}", flush=True)
    if "first_step" not in skip:
        res["first_step"] = first_steps(runner, py, 1 if args.quick else 3)
    if "eager_modes" not in skip:
        res["eager_modes"] = runner.run(
            "eager_modes", [py, os.path.join(HERE, "eager_modes.py"), "--json", js("eager_modes")],
            env={"BENCH_ROUNDS": "3", "BENCH_STEPS": "2"} if args.quick else None,
            json_path=js("eager_modes"))
    if "compile_bench" not in skip:
        res["compile_bench"] = runner.run(
            "compile_bench", [py, os.path.join(HERE, "compile_bench.py"),
                              *(["--rounds", "1", "--steps", "5"] if args.quick else []),
                              "--json", js("compile_bench")], json_path=js("compile_bench"))
    if "jax_peer" not in skip:
        res["jax_peer"] = runner.run(
            "jax_peer", [py, os.path.join(HERE, "jax_peer.py"),
                         *(["--rounds", "1", "--steps", "3"] if args.quick else []),
                         "--json", js("jax_peer")], json_path=js("jax_peer"))
    if "dynamic_bench" not in skip:
        res["dynamic_bench"] = runner.run(
            "dynamic_bench", [py, os.path.join(HERE, "dynamic_bench.py"),
                              "--json", js("dynamic_bench")], json_path=js("dynamic_bench"))
    if "xla_cpu_floor" not in skip:
        res["xla_cpu_floor"] = runner.run(
            "xla_cpu_floor", [py, os.path.join(HERE, "xla_cpu_floor.py"),
                              "--json", js("xla_cpu_floor")], json_path=js("xla_cpu_floor"))
    if "dist_bench" not in skip:
        res["dist"] = runner.run("dist_bench", [py, os.path.join(HERE, "dist_bench.py"),
                                                *(["--quick"] if args.quick else []),
                                                "--json", js("dist_bench")],
                                 json_path=js("dist_bench"))
    total = time.perf_counter() - t_start
    made = plots(res)
    res["pieces"] = {k: {kk: vv for kk, vv in v.items() if kk != "log"}
                     for k, v in runner.pieces.items()}
    res["total_s"] = total
    with open(os.path.join(HERE, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(OUT_DIR, "pieces.json"), "w") as f:
        json.dump(runner.pieces, f)
    write_report(res, runner, made, total)
    print(f"\nwrote bench/RESULTS.md, bench/results.json and {len(made)} plots in {total:.0f} s")


if __name__ == "__main__":
    main()
