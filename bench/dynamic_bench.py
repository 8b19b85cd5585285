"""Dynamic shapes, bucketed vs specialised, each in a fresh process with cold
caches (XLA executables and AOTAutograd's):

  1. the demo transformer's training step under torch.compile(dynamic=True)
     over the 26 sequence lengths 8..33: XLA programs compiled per graph,
     graphs run eagerly, and the total time of the 26 steps;
  2. Hugging Face generate() of a tiny Llama (20 new tokens, greedy) with
     its dynamic cache: the first call (compiles included) and steady
     tokens/s (a second call).

Buckets are torchtpu._buckets (TORCHTPU_DYNAMIC_BUCKETS=1, the default);
"specialised" is TORCHTPU_DYNAMIC_BUCKETS=0 (a program per size).
Usage: python bench/dynamic_bench.py [--json PATH]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")

LENGTHS = r"""
import json, sys, time
sys.path.insert(0, {examples!r})
import torch, torch._dynamo, torchtpu
from tiny_gpt import TinyGPT, make_corpus
data, vocab = make_corpus()
torch.manual_seed(0)
model = TinyGPT(len(vocab), dim=64, heads=4, layers=2, max_len=64).to("tpu")
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, foreach=True, capturable=True)
run = torch.compile(model, backend="tpu", dynamic=True)
step = torch.compile(opt.step, backend="tpu")
g = torch.Generator().manual_seed(0)
t0 = time.perf_counter()
losses = []
for t in range(8, 34):
    s = torch.randint(0, len(data) - t - 1, (8,), generator=g)
    x = torch.stack([data[i:i + t] for i in s.tolist()]).to("tpu")
    y = torch.stack([data[i + 1:i + t + 1] for i in s.tolist()]).to("tpu")
    loss = run(x, y)
    loss.backward()
    step()
    opt.zero_grad()
    losses.append(loss.item())
total = time.perf_counter() - t0
m = torchtpu.metrics.metrics()
print(json.dumps({{"total_s": total, "losses": losses,
                  "graphs_compiled": m.get("compiled_graphs", 0),
                  "bucket_programs": m.get("bucket_compiles", 0),
                  "specialisations": m.get("compile_specializations", 0),
                  "graphs_eager": m.get("compile_graphs_eager", 0),
                  "xla_compiles": m.get("compiles", 0)}}))
"""

GENERATE = r"""
import json, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch, torchtpu, transformers
torch.manual_seed(0)
cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                               max_position_embeddings=256, head_dim=16)
model = transformers.LlamaForCausalLM(cfg).eval().to("tpu")
model.forward = torch.compile(model.forward, backend="tpu", dynamic=True)
ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1)).to("tpu")
t0 = time.perf_counter()
first = model.generate(ids, max_new_tokens=20, do_sample=False)
t1 = time.perf_counter()
second = model.generate(ids, max_new_tokens=20, do_sample=False)
t2 = time.perf_counter()
m = torchtpu.metrics.metrics()
print(json.dumps({{"first_call_s": t1 - t0, "steady_tokens_per_s": 20 / (t2 - t1),
                  "same_tokens": bool(torch.equal(first, second)),
                  "bucket_programs": m.get("bucket_compiles", 0),
                  "specialisations": m.get("compile_specializations", 0)}}))
"""


def fresh(code, buckets):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHTPU_CACHE_DIR=os.path.join(cache, "xla"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
                   TORCHTPU_DYNAMIC_BUCKETS="1" if buckets else "0")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    res = {}
    for name, code in (("lengths_8_33", LENGTHS.format(examples=EXAMPLES)),
                       ("hf_generate", GENERATE.format())):
        res[name] = {"buckets": fresh(code, True), "specialised": fresh(code, False)}
    lb, ls = res["lengths_8_33"]["buckets"], res["lengths_8_33"]["specialised"]
    same = max(abs(a - b) for a, b in zip(lb["losses"], ls["losses"]))
    print("26 sequence lengths 8..33, demo training step, torch.compile(dynamic=True):")
    for k, r in (("buckets", lb), ("specialised", ls)):
        per_graph = r["bucket_programs"] if k == "buckets" else r["specialisations"] / 2
        print(f"  {k:12} total {r['total_s']:6.1f} s, programs per graph {per_graph:4.0f} "
              f"(forward and backward), graphs run eagerly {r['graphs_eager']}, "
              f"XLA compiles {r['xla_compiles']}")
    print(f"  speed-up {ls['total_s'] / lb['total_s']:.2f}x; largest loss difference {same:.2e}")
    gb, gs = res["hf_generate"]["buckets"], res["hf_generate"]["specialised"]
    print("HF generate(), tiny Llama, 12-token prompt, 20 new tokens, dynamic cache:")
    for k, r in (("buckets", gb), ("specialised", gs)):
        print(f"  {k:12} first call {r['first_call_s']:6.2f} s, steady "
              f"{r['steady_tokens_per_s']:7.1f} tokens/s, bucket programs {r['bucket_programs']}, "
              f"specialisations {r['specialisations']}")
    res["lengths_8_33"]["speedup"] = ls["total_s"] / lb["total_s"]
    res["lengths_8_33"]["max_loss_diff"] = same
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
