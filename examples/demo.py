"""torchtpu demo: train a small decoder-only transformer language model on
torch.device("tpu") with AdamW, unchanged PyTorch code, in the eager mode
TORCHTPU_EAGER_MODE selects (strict by default; defer_and_fuse fuses each
step into one program).
Prints the device and plugin, loss and tokens/s as it trains, a greedy
sample, and the runtime's counters."""
import os
import sys
import time

import torch

import torchtpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_gpt import make_corpus, train  # noqa: E402

STEPS = int(os.environ.get("DEMO_STEPS", "150"))


def main():
    info = torchtpu.plugin_info()
    print(f"torchtpu {torchtpu.__version__}, torch {torch.__version__}")
    print(f"accelerator: {torch.accelerator.current_accelerator()} "
          f"({torch.tpu.device_count()} device(s): {torch.tpu.get_device_name()})")
    print(f"plugin: {info['path']} (xla_version {info['attributes'].get('xla_version')}, "
          f"PJRT API {info['api_version']})\n")

    print(f"Training TinyGPT (2 layers, dim 64) on tpu for {STEPS} steps, "
          f"batch 16 x 64 tokens, AdamW, eager mode {torchtpu.get_eager_mode()}:")
    torchtpu.metrics.reset()
    t0 = time.perf_counter()
    losses, rate = train("tpu", STEPS, log_every=25)
    wall = time.perf_counter() - t0
    print(f"\nfirst loss {losses[0]:.3f} -> final loss {losses[-1]:.3f} "
          f"in {wall:.1f} s ({rate:,.0f} tokens/s after warm-up)")

    m = torchtpu.metrics.metrics()
    fallbacks = torchtpu.metrics.fallback_counts()
    print(f"compiles: {m.get('compiles', 0)} ({m.get('compile_ns', 0) / 1e9:.1f} s), "
          f"executions: {m.get('executions', 0)}, eager cache hits: "
          f"{m.get('eager_cache_hits', 0)}, host syncs: {m.get('host_syncs', 0)}")
    print("ops on the CPU fallback:", ", ".join(sorted(fallbacks)) or "none")
    ok = losses[-1] < 0.75 * losses[0]
    print("\ndemo:", "OK (the model learned)" if ok else "FAILED (loss did not fall)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
