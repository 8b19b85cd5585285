"""Element and slice reads of a large tensor beside the same reads of a
small one (issue 23 item 7): x[5].item() and x[:3].cpu() of a 512 MiB tpu
tensor should cost what they cost on a 4 KiB tensor, and move only their
bytes. Prints medians and the bytes_to_host per read.

    .venv/bin/python bench/element_read.py [--mib 512] [--reps 200]
"""
import argparse
import statistics
import time

import torch

import torchtpu  # noqa: F401
import torchtpu.metrics


def median_us(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def moved(fn):
    before = torchtpu.metrics.metrics().get("bytes_to_host", 0)
    fn()
    return torchtpu.metrics.metrics().get("bytes_to_host", 0) - before


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--reps", type=int, default=200)
    a = ap.parse_args()
    big = torch.zeros(a.mib * 2**18, device="tpu")  # float32
    small = torch.zeros(1024, device="tpu")
    torch.tpu.synchronize()
    for name, read in [("x[5].item()", lambda t: t[5].item()),
                       ("x[:3].cpu()", lambda t: t[:3].cpu())]:
        # Back to back in one process, medians of each.
        b = median_us(lambda: read(big), a.reps)
        s = median_us(lambda: read(small), a.reps)
        print(f"{name}: {a.mib} MiB tensor {b:.1f} us, 4 KiB tensor {s:.1f} us, "
              f"ratio {b / s:.2f}x; bytes moved {moved(lambda: read(big))}")


if __name__ == "__main__":
    main()
