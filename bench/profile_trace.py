"""A picture of what torch.profiler sees of the device: profiles a few
training steps of the demo transformer (examples/tiny_gpt.py, AdamW,
loss.item() each step) on tpu in strict and in defer_and_fuse mode,
exports each Chrome trace, prints the device rows of key_averages(), and
draws bench/profile_trace.png: one band per thread (the Python thread,
autograd's backward thread, torchtpu's launcher thread), one row per kind
of event (user ranges, ATen ops, PJRT executions, compiles, transfers,
defer_and_fuse flushes), the whole profile on the left (the first step
compiles) and the last step on the right.

    python bench/profile_trace.py [--steps 3] [--out bench/profile_trace.png]
        [--trace-dir /tmp]   # where the Chrome traces go (open in Perfetto)
    python bench/profile_trace.py --draw-only   # redraw from the traces there

Drawing needs matplotlib (bench/requirements.txt); without it the traces
are still written and --draw-only can draw them from another environment
(it imports neither torch nor torchtpu).
"""
import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ["strict", "defer_and_fuse"]

ROWS = [  # (label, predicate on an event name, colour)
    ("user ranges", lambda n: n.startswith("step "), "#999999"),
    ("ATen ops", lambda n: n.startswith("aten::") or n.startswith("autograd::")
     or n.startswith("Optimizer."), "#4c72b0"),
    ("PJRT executions", lambda n: n.startswith("tpu::execute"), "#dd8452"),
    ("compiles", lambda n: n.startswith("tpu::compile"), "#c44e52"),
    ("transfers", lambda n: n.startswith("tpu::to_"), "#55a868"),
    ("flushes", lambda n: n.startswith("tpu::flush"), "#8172b3"),
]


def profile_steps(mode, steps, trace_path):
    import torch
    from torch.profiler import profile, record_function

    import torchtpu

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from tiny_gpt import TinyGPT, batches, make_corpus

    torch.manual_seed(0)
    data, vocab = make_corpus(400)
    model = TinyGPT(len(vocab)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    it = batches(data, 16, 64)
    losses = []
    with torchtpu.eager_mode(mode):
        torchtpu.set_eager_mode(mode)  # autograd's thread follows the process-wide mode
        with profile(record_shapes=True) as prof:
            for step in range(steps):
                with record_function(f"step {step}"):
                    x, y = (t.to("tpu") for t in next(it))
                    loss = model(x, y)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
        torchtpu.set_eager_mode("strict")
    prof.export_chrome_trace(trace_path)
    return prof, losses


def lanes(events):
    """tid -> lane label: the thread with the step ranges is Python's; one
    that runs only executions is the launcher's; the rest autograd's."""
    by_tid = {}
    for e in events:
        by_tid.setdefault(e["tid"], []).append(e["name"])
    main = next(e["tid"] for e in events if e["name"].startswith("step "))
    out = {}
    for tid, names in by_tid.items():
        if tid == main:
            out[tid] = "Python thread"
        elif all(n.startswith("tpu::execute") for n in names):
            out[tid] = "launcher thread"
        else:
            out[tid] = "autograd thread"
    return out


def draw(ax, events, lane_of, t0, window, title):
    order = sorted(set(lane_of.values()),
                   key=["Python thread", "autograd thread", "launcher thread"].index)
    y, ticks, labels = 0, [], []
    min_us = (window[1] - window[0]) / 1500
    for lane in order:
        for label, pred, colour in ROWS:
            # Short events stay visible: at least 1/1500 of the window wide.
            bars = [((e["ts"] - t0) / 1e3, max(e["dur"], min_us) / 1e3) for e in events
                    if lane_of[e["tid"]] == lane and pred(e["name"])
                    and e["ts"] + e["dur"] >= window[0] and e["ts"] <= window[1]]
            if not bars:
                continue
            ax.broken_barh(bars, (y, 0.8), facecolors=colour, edgecolors="none")
            ticks.append(y + 0.4)
            labels.append(f"{lane}: {label} ({len(bars)})")
            y += 1
        y += 0.5
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlim((window[0] - t0) / 1e3, (window[1] - t0) / 1e3)
    ax.set_ylim(-0.3, y)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the profile's first event", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.tick_params(axis="x", labelsize=7)


def trace_path(trace_dir, mode):
    return os.path.join(trace_dir, f"torchtpu_profile_{mode}.json")


def run_profiles(args):
    os.makedirs(args.trace_dir, exist_ok=True)
    for mode in MODES:
        path = trace_path(args.trace_dir, mode)
        prof, losses = profile_steps(mode, args.steps, path)
        print(f"== {mode}: losses {', '.join(f'{v:.4f}' for v in losses)}; trace {path}")
        rows = [e for e in prof.key_averages() if e.key.startswith("tpu::")]
        rows.sort(key=lambda e: -e.cpu_time_total)
        for e in rows[:14]:
            print(f"  {e.key:48s} {e.count:6d} calls {e.cpu_time_total / 1e3:9.2f} ms")


def draw_all(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(MODES), 2, figsize=(15, 4.4 * len(MODES)),
                             gridspec_kw={"width_ratios": [1, 1.3]})
    for row, mode in enumerate(MODES):
        with open(trace_path(args.trace_dir, mode)) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        events = [e for e in events if any(p(e["name"]) for _, p, _ in ROWS)]
        lane_of = lanes(events)
        t0 = min(e["ts"] for e in events)
        t1 = max(e["ts"] + e["dur"] for e in events)
        last = max((e for e in events if e["name"].startswith("step ")), key=lambda e: e["ts"])
        draw(axes[row][0], events, lane_of, t0, (t0, t1),
             f"{mode}: training steps (step 0 compiles or loads its programs)")
        draw(axes[row][1], events, lane_of, t0, (last["ts"], last["ts"] + last["dur"]),
             f"{mode}: {last['name']}")
    fig.suptitle("torch.profiler on tpu: TinyGPT training steps (XLA CPU plugin, 2 cores)",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "profile_trace.png"))
    ap.add_argument("--trace-dir", default=tempfile.gettempdir())
    ap.add_argument("--draw-only", action="store_true")
    args = ap.parse_args()
    if not args.draw_only:
        run_profiles(args)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("no matplotlib here: draw with `python bench/profile_trace.py --draw-only "
              f"--trace-dir {args.trace_dir}` where it is installed")
        return
    draw_all(args)


if __name__ == "__main__":
    main()
