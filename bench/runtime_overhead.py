"""Runtime overheads as a PyTorch user sees them, beside PyTorch on CPU in
the same run: a cache-hit tiny add, a 64x64 and 512x512 matmul, softmax,
layer_norm and the demo's causal attention (bench/op_cases.py: chains of
ops), in strict and defer_and_fuse eager modes, and copy bandwidth
through .to("tpu") / .cpu(). Medians over repeated runs.

Usage: python bench/runtime_overhead.py [--json PATH] [--no-demo]"""
import argparse
import json
import statistics
import time

import torch

import torchtpu


def median_us(fn, n):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def per_op_table():
    """Per-op times of tpu strict, tpu defer_and_fuse and PyTorch CPU eager,
    alternating round by round; returns {case: {contender: us}}."""
    from op_cases import CASES, alternate, chain_us, inputs, to

    nothing = lambda: None  # noqa: E731
    sync = torch.tpu.synchronize
    results = {}
    print(f"{'case':<20}{'strict':>9}{'defer':>9}{'cpu':>9}{'strict/cpu':>11}"
          f"{'defer/cpu':>10}{'strict op+sync':>15}   (us per op)")
    for name, shape, op, ops, rounds in CASES:
        x, y = inputs(name, shape)
        tx, ty = x.to("tpu"), to(y, "tpu")

        def in_mode(mode, sync_each=False):
            def run():
                with torchtpu.eager_mode(mode):
                    return chain_us(op, tx, ty, sync, ops, sync_each)
            return run

        contenders = {
            "tpu_strict": in_mode("strict"),
            "tpu_defer_and_fuse": in_mode("defer_and_fuse"),
            "cpu_eager": lambda: chain_us(op, x, y, nothing, ops),
            "tpu_strict_op_sync": in_mode("strict", sync_each=True),
        }
        med, ratio = alternate(contenders, rounds)
        results[name] = {"us": med, "ratio_to_cpu": ratio, "ops_per_round": ops,
                         "rounds": rounds}
        print(f"{name:<20}{med['tpu_strict']:>9.1f}{med['tpu_defer_and_fuse']:>9.1f}"
              f"{med['cpu_eager']:>9.1f}{ratio['tpu_strict']:>11.2f}"
              f"{ratio['tpu_defer_and_fuse']:>10.2f}{med['tpu_strict_op_sync']:>15.1f}",
              flush=True)
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="also write the figures to this JSON file")
    ap.add_argument("--no-demo", action="store_true", help="skip the demo tokens/s")
    args = ap.parse_args()
    # PyTorch CPU gets the machine's threads, as a user would run it.
    print(f"torchtpu {torchtpu.__version__} on {torchtpu.plugin_info()['path']}")
    print("per op: a stream of cache-hit ops then one synchronize, divided by the count;")
    print("op+sync: one op and a synchronize (the full round trip). Each op takes the")
    print("previous result. Contenders alternate round by round so machine noise")
    print("hits all alike; medians over rounds, ratios are medians of round ratios.")
    out = {"torch": torch.__version__, "torchtpu": torchtpu.__version__,
           "threads": torch.get_num_threads()}
    out["per_op"] = per_op_table()
    x = torch.randn(16 * 1024 * 1024)
    x.to("tpu")
    up = statistics.median([_timed(lambda: x.to("tpu")) for _ in range(5)])
    t = x.to("tpu")
    down = statistics.median([_timed(lambda: t.cpu()) for _ in range(5)])
    print(f"x.to('tpu') 64 MiB: {x.numel() * 4 / up / 1e9:.2f} GB/s   "
          f"t.cpu() 64 MiB: {x.numel() * 4 / down / 1e9:.2f} GB/s")
    out["copy_GBps"] = {"to_tpu_64MiB": x.numel() * 4 / up / 1e9,
                        "to_cpu_64MiB": x.numel() * 4 / down / 1e9}
    if not args.no_demo:
        out["demo_tokens_per_s"] = demo_tokens_per_second()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


def demo_tokens_per_second(steps=25):
    """The demo's training step (TinyGPT, batch 16 x 64) on tpu and on CPU."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "examples"))
    from tiny_gpt import train
    rates = {}
    for device in ("tpu", "cpu"):
        _, rates[device] = train(device, steps)
    print(f"demo training step: tpu {rates['tpu']:,.0f} tokens/s, cpu eager "
          f"{rates['cpu']:,.0f} tokens/s, tpu/cpu {rates['tpu'] / rates['cpu']:.2f}x")
    return rates


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
