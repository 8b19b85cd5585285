"""Runtime overheads as a PyTorch user sees them, beside PyTorch on CPU in
the same run: a cache-hit tiny add, a 64x64 and 512x512 matmul, and copy
bandwidth through .to("tpu") / .cpu(). Medians over repeated runs."""
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


def per_op_us(fn, sync, ops, rounds):
    """Median over rounds of (time for `ops` calls, then sync) / ops."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(ops):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / ops)
    return statistics.median(times) * 1e6


def main():
    # PyTorch CPU gets the machine's threads, as a user would run it.
    print(f"torchtpu {torchtpu.__version__} on {torchtpu.plugin_info()['path']}")
    print("per op: a stream of cache-hit ops then one synchronize, divided by the count;")
    print("op+sync: one op and a synchronize (the full round trip). tpu and CPU alternate")
    print("round by round so machine noise hits both alike; medians over rounds.")
    print(f"{'case':<18}{'tpu per op':>12}{'cpu per op':>12}{'ratio':>8}"
          f"{'tpu op+sync':>13}{'ratio':>8}   (us)")
    nothing = lambda: None  # noqa: E731
    for name, shape, op, ops, rounds in (("tiny add [1]", (1,), torch.add, 200, 40),
                                         ("matmul 64x64", (64, 64), torch.mm, 100, 30),
                                         ("matmul 512x512", (512, 512), torch.mm, 5, 15)):
        a = torch.randn(*shape)
        ta = a.to("tpu")
        op(ta, ta).cpu()  # compile once
        tpu, cpu, lat = [], [], []
        for _ in range(rounds):
            tpu.append(per_op_us(lambda: op(ta, ta), torch.tpu.synchronize, ops, 1))
            cpu.append(per_op_us(lambda: op(a, a), nothing, ops, 1))
            lat.append(per_op_us(lambda: (op(ta, ta), torch.tpu.synchronize()), nothing, ops, 1))
        t, c, l = (statistics.median(v) for v in (tpu, cpu, lat))
        print(f"{name:<18}{t:>12.1f}{c:>12.1f}{t / c:>8.2f}{l:>13.1f}{l / c:>8.2f}")
    x = torch.randn(16 * 1024 * 1024)
    x.to("tpu")
    up = statistics.median([_timed(lambda: x.to("tpu")) for _ in range(5)])
    t = x.to("tpu")
    down = statistics.median([_timed(lambda: t.cpu()) for _ in range(5)])
    print(f"x.to('tpu') 64 MiB: {x.numel() * 4 / up / 1e9:.2f} GB/s   "
          f"t.cpu() 64 MiB: {x.numel() * 4 / down / 1e9:.2f} GB/s")
    demo_tokens_per_second()


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


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
