"""The PyTorch/XLA peer, run by bench/run_all.py in its own venv (.venv-xla:
torch 2.9 + torch_xla 2.9 from PyPI) with PJRT_DEVICE=CPU, so XLA runs on
the same CPU plugin family as torchtpu here. Two parts, each beside PyTorch
CPU eager of that venv in the same process (alternating round by round):

  --ops    per-op time in torch_xla's eager mode
           (torch_xla.experimental.eager_mode(True)): the cases of
           bench/runtime_overhead.py, a stream of cache-hit ops then one
           xm.wait_device_ops(), divided by the count; results kept alive.
  --serve  (what bench/train_bench.py --xla-python runs) the training step
           below as one more contender of train_bench.py's alternation.
  --train  standalone: the bench transformer's training step of bench/train_bench.py
           (same model, seed, batches, AdamW foreach, loss.item() every
           step) under torch_xla.compile. AdamW is not capturable here:
           torch 2.9 refuses capturable on xla tensors.

Usage: .venv-xla/bin/python bench/xla_peer.py --ops|--train [--json PATH]
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.debug.metrics as met  # noqa: E402


def compile_count():
    data = met.metric_data("CompileTime")
    return data[0] if data else 0


def ops_part():
    from torch_xla.experimental import eager_mode
    eager_mode(True)
    dev = torch_xla.device()
    from op_cases import CASES, alternate, chain_us, inputs, to

    nothing = lambda: None  # noqa: E731
    wait = xm.wait_device_ops
    results = {}
    print(f"{'case':<20}{'xla eager':>10}{'cpu':>9}{'xla/cpu':>9}{'xla op+sync':>13}   (us per op)")
    for name, shape, op, ops, rounds in CASES:
        x, y = inputs(name, shape)
        xx, xy = x.to(dev), to(y, dev)
        contenders = {
            "xla_eager": lambda: chain_us(op, xx, xy, wait, ops),
            "cpu_eager": lambda: chain_us(op, x, y, nothing, ops),
            "xla_eager_op_sync": lambda: chain_us(op, xx, xy, wait, ops, sync_each=True),
        }
        med, ratio = alternate(contenders, rounds)
        results[name] = {"us": med, "ratio_to_cpu": ratio, "ops_per_round": ops,
                         "rounds": rounds}
        print(f"{name:<20}{med['xla_eager']:>10.1f}{med['cpu_eager']:>9.1f}"
              f"{ratio['xla_eager']:>9.2f}{med['xla_eager_op_sync']:>13.1f}", flush=True)
    return {"per_op": results}


class Trainer:
    """TinyGPT + AdamW, one step = forward, backward, optimizer step and a
    loss.item(); on the XLA device the whole step is one torch_xla.compile
    graph, on the CPU it runs eagerly."""

    def __init__(self, data, vocab, cfg, xla):
        from tiny_gpt import TinyGPT, batches
        self.dev = torch_xla.device() if xla else torch.device("cpu")
        torch.manual_seed(0)
        self.model = TinyGPT(len(vocab), dim=cfg["dim"], heads=cfg["heads"],
                             layers=cfg["layers"], max_len=cfg["seq"]).to(self.dev)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=0.01,
                                     foreach=True)  # capturable: not on xla in 2.9
        self.step = torch_xla.compile(self._step) if xla else self._step
        self.wait = xm.wait_device_ops if xla else (lambda: None)
        self.stream = batches(data, cfg["batch"], cfg["seq"], seed=0)
        self.losses = []

    def _step(self, x, y):
        loss = self.model(x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss

    def steps(self, n):
        t0 = time.perf_counter()
        for _ in range(n):
            x, y = next(self.stream)
            self.losses.append(self.step(x.to(self.dev), y.to(self.dev)).item())
        self.wait()
        return (time.perf_counter() - t0) / n


def train_part(rounds, steps):
    from train_bench import BATCH, DIM, HEADS, LAYERS, SEQ, WARMUP
    from tiny_gpt import make_corpus
    cfg = dict(dim=DIM, heads=HEADS, layers=LAYERS, seq=SEQ, batch=BATCH)
    data, vocab = make_corpus()
    trainers = {}
    warm_s = {}
    for name, xla in (("xla_compile", True), ("cpu_eager", False)):
        t0 = time.perf_counter()
        trainers[name] = Trainer(data, vocab, cfg, xla)
        trainers[name].steps(WARMUP)
        warm_s[name] = time.perf_counter() - t0
        print(f"  warm-up {name}: {warm_s[name]:.1f} s", flush=True)
    c0 = compile_count()
    times = {k: [] for k in trainers}
    for r in range(rounds):
        for name, tr in trainers.items():
            times[name].append(tr.steps(steps))
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1] * 1e3:.0f}" for k, v in times.items())
              + " ms/step", flush=True)
    compiles = compile_count() - c0
    tokens = BATCH * SEQ
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = statistics.median(c / x for x, c in zip(times["xla_compile"], times["cpu_eager"]))
    for k in trainers:
        print(f"{k:<22}{med[k] * 1e3:>10.1f} ms/step{tokens / med[k]:>11,.0f} tokens/s")
    print(f"tokens/s ratio xla_compile/cpu_eager: {ratio:.2f}x; "
          f"XLA compiles during the timed rounds: {compiles}")
    return {"config": cfg, "ms_per_step": {k: v * 1e3 for k, v in med.items()},
            "tokens_per_s": {k: tokens / v for k, v in med.items()}, "round_times_s": times,
            "ratios": {"xla_compile/cpu_eager": ratio}, "warmup_s": warm_s,
            "compiles_timed": compiles,
            "first_losses": {k: tr.losses[:3] for k, tr in trainers.items()}}


def serve():
    """A torch_xla.compile contender driven by bench/train_bench.py over
    stdin/stdout, so it alternates round by round with the contenders there:
    reads "steps N", runs N steps, answers {"s_per_step": ...}; "quit"
    answers a summary. Everything else it prints goes to stderr."""
    from train_bench import BATCH, DIM, HEADS, LAYERS, SEQ, WARMUP
    from tiny_gpt import make_corpus
    proto, sys.stdout = sys.stdout, sys.stderr
    cfg = dict(dim=DIM, heads=HEADS, layers=LAYERS, seq=SEQ, batch=BATCH)
    data, vocab = make_corpus()
    t0 = time.perf_counter()
    tr = Trainer(data, vocab, cfg, xla=True)
    tr.steps(WARMUP)
    warm = time.perf_counter() - t0
    c0 = compile_count()

    def answer(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    answer({"ready": True, "warmup_s": warm, "torch": torch.__version__,
            "torch_xla": torch_xla.__version__})
    for line in sys.stdin:
        cmd = line.split()
        if cmd and cmd[0] == "steps":
            answer({"s_per_step": tr.steps(int(cmd[1]))})
        else:
            answer({"compiles_timed": compile_count() - c0, "first_losses": tr.losses[:3]})
            return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", action="store_true")
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--serve", action="store_true", help="(used by bench/train_bench.py)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.serve:
        return serve()
    print(f"torch {torch.__version__}, torch_xla {torch_xla.__version__}, "
          f"PJRT_DEVICE={os.environ.get('PJRT_DEVICE')}, device {torch_xla.device()}, "
          f"{torch.get_num_threads()} CPU threads", flush=True)
    out = {"torch": torch.__version__, "torch_xla": torch_xla.__version__}
    if args.train:  # before --ops: eager mode is process-wide
        out["train"] = train_part(args.rounds, args.steps)
    if args.ops:
        out.update(ops_part())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
