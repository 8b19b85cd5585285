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


def main():
    torch.set_num_threads(1)
    print(f"torchtpu {torchtpu.__version__} on {torchtpu.plugin_info()['path']}")
    print(f"{'case':<28}{'tpu (us)':>12}{'cpu (us)':>12}{'tpu/cpu':>10}")
    for name, shape, op, n in (("tiny add [1]", (1,), torch.add, 2000),
                               ("matmul 64x64", (64, 64), torch.mm, 1000),
                               ("matmul 512x512", (512, 512), torch.mm, 50)):
        a = torch.randn(*shape)
        ta = a.to("tpu")
        op(ta, ta).cpu()  # compile once
        # Enqueue + wait: the result is read back so the work really ran.
        tpu = median_us(lambda: (op(ta, ta), torch.tpu.synchronize()), n)
        cpu = median_us(lambda: op(a, a), n)
        print(f"{name:<28}{tpu:>12.1f}{cpu:>12.1f}{tpu / cpu:>10.2f}")
    x = torch.randn(16 * 1024 * 1024)
    x.to("tpu")
    up = statistics.median([_timed(lambda: x.to("tpu")) for _ in range(5)])
    t = x.to("tpu")
    down = statistics.median([_timed(lambda: t.cpu()) for _ in range(5)])
    print(f"x.to('tpu') 64 MiB: {x.numel() * 4 / up / 1e9:.2f} GB/s   "
          f"t.cpu() 64 MiB: {x.numel() * 4 / down / 1e9:.2f} GB/s")


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
