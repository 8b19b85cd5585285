"""Eager modes on the demo transformer's training step (examples/tiny_gpt.py:
2 layers, dim 64, batch 16 x 64 tokens, AdamW, loss.item() every step as in
the demo): strict vs defer_and_fuse in one run. The two modes alternate
round by round, each with its own model from the same seed, so machine noise
hits both alike; the figures are median step times over rounds and the
median over rounds of the strict / defer_and_fuse time ratio. Also
reports programs per step and compiles during the timed rounds, and checks
that both modes computed the same losses.

Rounds of their own then time what fusing and overlap can reach on this
host (omit with --no-peers), each against strict again: defer_and_fuse
reading the losses once per round instead of every step (the recording of
a step overlaps the previous step's program: the most overlap can give),
the step under torch.compile(backend="tpu") (the forward and backward as
one program, the optimizer as another), and PyTorch's own CPU eager and
torch.compile(backend="inductor") on the plain CPU."""
import argparse
import json
import os
import statistics
import sys
import time

import torch

import torchtpu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))
from tiny_gpt import TinyGPT, batches, make_corpus  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "11"))
STEPS = int(os.environ.get("BENCH_STEPS", "5"))
WARMUP = 3


def metric(name):
    return torchtpu.metrics.metrics().get(name, 0)


# name: (device, eager mode, torch.compile backend)
CONTENDERS = {
    "strict": ("tpu", "strict", None),
    "defer_and_fuse": ("tpu", "defer_and_fuse", None),
    # The same, reading the losses once per round instead of every step:
    # a step's recording then overlaps the previous step's program, the
    # most that overlapping the host with the device can give.
    "defer_no_read": ("tpu", "defer_and_fuse", None),
    "tpu_compile": ("tpu", "strict", "tpu"),
    "cpu_eager": ("cpu", None, None),
    "cpu_inductor": ("cpu", None, "inductor"),
}
# Peers by phase: each phase's rounds alternate strict with its peers. A
# CPU peer's threads spin on after its steps and slow the device contender
# that follows (by up to 20% here), so the device peers have a phase of
# their own, and the modes' headline rounds have neither.
PHASES = (("defer_no_read", "tpu_compile"), ("cpu_eager", "cpu_inductor"))
PEERS = tuple(p for phase in PHASES for p in phase)


class Trainer:
    def __init__(self, mode, data, vocab):
        self.mode = mode
        self.device, self.eager, backend = CONTENDERS[mode]
        torch.manual_seed(0)
        with torchtpu.eager_mode(self.eager or "strict"):
            self.model = TinyGPT(len(vocab)).to(self.device)
        # capturable: a compiled step keeps its step counts on the device.
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=0.01,
                                     foreach=True, capturable=self.device == "tpu" and bool(backend))
        self.forward, self.opt_step = self.model, self.opt.step
        if backend:
            self.forward = torch.compile(self.model, backend=backend)
            self.opt_step = torch.compile(self.opt.step, backend=backend)
        self.stream = batches(data, 16, 64, seed=0)
        self.losses = []

    def steps(self, n):
        # Process-wide: autograd's backward thread follows it too.
        if self.eager:
            torchtpu.set_eager_mode(self.eager)
        unread = []  # defer_no_read's losses, read after the round's steps
        for _ in range(n):
            x, y = next(self.stream)
            x, y = x.to(self.device), y.to(self.device)
            loss = self.forward(x, y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt_step()
            if self.mode == "defer_no_read":
                unread.append(loss.detach())
            else:
                self.losses.append(loss.item())
        self.losses += [v.item() for v in unread]

    def sync(self):
        if self.device == "tpu":
            torch.tpu.synchronize()


def timed_rounds(trainers):
    """ROUNDS rounds of STEPS steps per trainer, alternating: each one's
    step times (s), programs and compiles."""
    for t in trainers:
        t.steps(WARMUP)
    times = {t.mode: [] for t in trainers}
    programs = {t.mode: 0 for t in trainers}
    compiles = {t.mode: 0 for t in trainers}
    for _ in range(ROUNDS):
        for t in trainers:
            c0, e0 = metric("compiles"), metric("executions")
            t0 = time.perf_counter()
            t.steps(STEPS)
            # All of the round's work, not just up to the last loss: strict's
            # optimizer programs may still be running after loss.item().
            t.sync()
            times[t.mode].append((time.perf_counter() - t0) / STEPS)
            compiles[t.mode] += metric("compiles") - c0
            # Strict: every execution is one program. Deferred: the fused runs
            # plus any execution outside them (a lost storage's zero fill).
            programs[t.mode] += metric("executions") - e0
    return times, programs, compiles


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="also write the figures to this JSON file")
    ap.add_argument("--no-peers", action="store_true",
                    help="only strict and defer_and_fuse (no compiled or CPU peers)")
    args = ap.parse_args()
    data, vocab = make_corpus()
    trainers = [Trainer(name, data, vocab) for name in ("strict", "defer_and_fuse")]
    times, programs, compiles = timed_rounds(trainers)
    peers, strict_in_peers = {}, {}
    for phase in () if args.no_peers else PHASES:
        ts = [Trainer(name, data, vocab) for name in phase]
        trainers += ts
        ptimes, pprog, pcomp = timed_rounds([trainers[0]] + ts)
        peers.update({p: statistics.median(s / q for s, q in zip(ptimes["strict"], ptimes[p]))
                      for p in phase})
        strict_in_peers[phase] = statistics.median(ptimes["strict"]) * 1e3
        for d, pd in ((times, ptimes), (programs, pprog), (compiles, pcomp)):
            d.update({p: pd[p] for p in phase})
    torchtpu.set_eager_mode("strict")
    n = ROUNDS * STEPS
    print(f"TinyGPT training step (2 layers, dim 64, batch 16x64, AdamW), {ROUNDS} rounds "
          f"x {STEPS} steps per mode, alternating; medians")
    print(f"{'mode':<16}{'ms/step':>10}{'tokens/s':>11}{'programs/step':>15}{'compiles':>10}")
    for t in trainers:
        ms = statistics.median(times[t.mode]) * 1e3
        tpu = t.device == "tpu"
        print(f"{t.mode:<16}{ms:>10.2f}{16 * 64 / ms * 1e3:>11,.0f}"
              f"{programs[t.mode] / n if tpu else float('nan'):>15.1f}"
              f"{compiles[t.mode] if tpu else '-':>10}")
    # Rounds of the two modes run back to back: the ratio within a round
    # pair cancels slow drifts of the machine; its median is the figure.
    ratio = statistics.median(s / d for s, d in zip(times["strict"], times["defer_and_fuse"]))
    for phase, ms in strict_in_peers.items():
        print(f"rounds of strict with {' and '.join(phase)}: strict {ms:.2f} ms/step; "
              + ", ".join(f"strict / {p} {peers[p]:.2f}x" for p in phase))
    # (strict's own, up to deferred's count: strict trains on with the peers)
    strict_losses = trainers[0].losses[:len(trainers[1].losses)]
    same = strict_losses == trainers[1].losses
    # Fused programs may round differently from one program per op (XLA
    # fuses across op boundaries); tests/test_modes.py pins the short run.
    rel = max(abs(a - b) / max(abs(a), 1e-12)
              for a, b in zip(strict_losses, trainers[1].losses))
    print(f"defer_and_fuse speed-up over strict (median of round ratios): {ratio:.2f}x "
          f"(target >= 1.5x); "
          f"losses identical: {same} (largest relative difference {rel:.1e})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ms_per_step": {m: statistics.median(v) * 1e3 for m, v in times.items()},
                       "programs_per_step": {m: programs[m] / n for m in programs},
                       "compiles": compiles, "strict/defer_and_fuse": ratio,
                       **{f"strict/{p}": r for p, r in peers.items()},
                       "strict_ms_in_peer_rounds": {"+".join(k): v for k, v in strict_in_peers.items()},
                       "losses_identical": same, "rounds": ROUNDS, "steps": STEPS}, f, indent=1)


if __name__ == "__main__":
    main()
