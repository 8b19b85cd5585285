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
from tiny_gpt import generate, make_corpus, train  # noqa: E402

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
    losses, rate, model = train("tpu", STEPS, log_every=25, return_model=True)
    wall = time.perf_counter() - t0
    print(f"\nfirst loss {losses[0]:.3f} -> final loss {losses[-1]:.3f} "
          f"in {wall:.1f} s ({rate:,.0f} tokens/s after warm-up)")
    _, vocab = make_corpus()
    print("greedy samples on tpu:", " | ".join(generate(model, vocab, p) for p in ("12+34=", "7+5=")))

    m = torchtpu.metrics.metrics()
    fallbacks = torchtpu.metrics.fallback_counts()
    print(f"compiles: {m.get('compiles', 0)} ({m.get('compile_ns', 0) / 1e9:.1f} s), "
          f"executions: {m.get('executions', 0)}, eager cache hits: "
          f"{m.get('eager_cache_hits', 0)}, host syncs: {m.get('host_syncs', 0)}")
    print("ops on the CPU fallback:", ", ".join(sorted(fallbacks)) or "none")

    compiled_steps = int(os.environ.get("DEMO_COMPILED_STEPS", "40"))
    if compiled_steps:
        print(f"\nThe same training under torch.compile(backend=\"tpu\") for {compiled_steps} "
              f"steps (forward, backward and AdamW step each one XLA program):")
        t0 = time.perf_counter()
        closses, crate = train("tpu", compiled_steps, backend="tpu")
        print(f"first loss {closses[0]:.3f} -> loss {closses[-1]:.3f} (eager at that step: "
              f"{losses[min(compiled_steps, len(losses)) - 1]:.3f}); {crate:,.0f} tokens/s, "
              f"{time.perf_counter() - t0:.1f} s including compiles")
    hf_generate_demo()
    ok = losses[-1] < 0.75 * losses[0]
    print("\ndemo:", "OK (the model learned)" if ok else "FAILED (loss did not fall)")
    return 0 if ok else 1


def hf_generate_demo():
    """A tiny Hugging Face Llama (random weights, built offline) generating on
    tpu; its greedy tokens equal CPU's."""
    try:
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        return
    import copy
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
                      max_position_embeddings=64)
    cpu = LlamaForCausalLM(cfg).eval()
    tpu = copy.deepcopy(cpu).to("tpu")
    ids = torch.tensor([[5, 17, 42, 8]])
    out = tpu.generate(ids.to("tpu"), max_new_tokens=8, do_sample=False, pad_token_id=0)
    ref = cpu.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    print(f"\nHugging Face LlamaForCausalLM.generate on tpu: {out[0].tolist()} "
          f"({'same as' if out.cpu().tolist() == ref.tolist() else 'DIFFERENT from'} CPU)")


if __name__ == "__main__":
    raise SystemExit(main())
