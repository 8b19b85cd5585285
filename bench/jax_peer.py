"""The compiled training step against XLA's own front end: the bench-sized
TinyGPT (dim 256, 4 heads, 2 layers, batch 8 x 128, AdamW) written in JAX
(jax.numpy, a jax.jit training step with the same math: embeddings, pre-LN
blocks with causal attention and a GELU MLP, cross-entropy, AdamW with
weight decay 0.01), beside torch.compile(backend="tpu") of examples/tiny_gpt.py
on torchtpu, in one process, rounds alternating. JAX runs on its built-in
XLA:CPU client (jaxlib), torchtpu on the xla-cpu-pjrt plugin: both are
XLA:CPU, so the ratio is the front ends' (and runtimes') difference.

The weights start equal (copied from the PyTorch model) and the first
losses are printed side by side as a check that the two compute the same
step. Usage: python bench/jax_peer.py [--rounds R] [--steps N] [--json PATH]"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

DIM, HEADS, LAYERS, SEQ, BATCH = 256, 4, 2, 128, 8
LR, WD, BETAS, EPS = 3e-3, 0.01, (0.9, 0.999), 1e-8


def jax_step_fn(jax, jnp):
    def layer_norm(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * w + b

    def forward(p, idx):
        b, t = idx.shape
        x = p["tok"][idx] + p["pos"][:t]
        mask = jnp.tril(jnp.ones((t, t), bool))
        for blk in p["blocks"]:
            h = layer_norm(x, blk["ln1_w"], blk["ln1_b"])
            qkv = h @ blk["qkv_w"].T + blk["qkv_b"]
            q, k, v = jnp.split(qkv, 3, axis=-1)
            q, k, v = (z.reshape(b, t, HEADS, DIM // HEADS).transpose(0, 2, 1, 3)
                       for z in (q, k, v))
            att = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(DIM // HEADS)
            att = jax.nn.softmax(jnp.where(mask, att, -jnp.inf), axis=-1)
            y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, DIM)
            x = x + y @ blk["proj_w"].T + blk["proj_b"]
            h = layer_norm(x, blk["ln2_w"], blk["ln2_b"])
            h = jax.nn.gelu(h @ blk["fc1_w"].T + blk["fc1_b"], approximate=False)
            x = x + h @ blk["fc2_w"].T + blk["fc2_b"]
        return layer_norm(x, p["ln_w"], p["ln_b"]) @ p["head"].T

    def loss_fn(p, idx, tgt):
        logits = forward(p, idx)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(logp, tgt[..., None], axis=-1).mean()

    def step(p, m, v, count, idx, tgt):
        loss, g = jax.value_and_grad(loss_fn)(p, idx, tgt)
        count = count + 1
        b1, b2 = BETAS
        m = jax.tree_util.tree_map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
        v = jax.tree_util.tree_map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_, v, g)
        c1, c2 = 1 - b1 ** count, 1 - b2 ** count

        def upd(p_, m_, v_):
            p_ = p_ * (1 - LR * WD)
            return p_ - LR * (m_ / c1) / (jnp.sqrt(v_ / c2) + EPS)

        p = jax.tree_util.tree_map(upd, p, m, v)
        return p, m, v, count, loss

    return jax.jit(step, donate_argnums=(0, 1, 2))


def params_from_torch(model, jnp):
    sd = {k: jnp.asarray(v.detach().cpu().numpy()) for k, v in model.state_dict().items()}
    p = {"tok": sd["tok.weight"], "pos": sd["pos.weight"], "ln_w": sd["ln.weight"],
         "ln_b": sd["ln.bias"], "head": sd["head.weight"], "blocks": []}
    for i in range(LAYERS):
        pre = f"blocks.{i}."
        p["blocks"].append({k.replace(".", "_"): sd[pre + k] for k in (
            "ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
            "ln2.weight", "ln2.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")})
        p["blocks"][-1] = {k.replace("_weight", "_w").replace("_bias", "_b"): v
                           for k, v in p["blocks"][-1].items()}
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import torch
    import torchtpu  # noqa: F401
    from tiny_gpt import TinyGPT, batches, make_corpus

    data, vocab = make_corpus()
    torch.manual_seed(0)
    model = TinyGPT(len(vocab), dim=DIM, heads=HEADS, layers=LAYERS, max_len=SEQ)
    p = params_from_torch(model, jnp)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, p)
    m, v, count = zeros, jax.tree_util.tree_map(jnp.zeros_like, p), jnp.zeros((), jnp.float32)
    jstep = jax_step_fn(jax, jnp)

    model.to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD,
                            foreach=True, capturable=True)
    run = torch.compile(model, backend="tpu")
    ostep = torch.compile(opt.step, backend="tpu")
    stream = batches(data, BATCH, SEQ, seed=0)
    fixed = [next(stream) for _ in range(args.steps)]

    def torch_steps(n):
        losses = []
        for i in range(n):
            x, y = fixed[i % len(fixed)]
            loss = run(x.to("tpu"), y.to("tpu"))
            loss.backward()
            ostep()
            opt.zero_grad(set_to_none=True)
            losses.append(loss)
        return [float(x.item()) for x in losses]

    jx = [(jnp.asarray(x.numpy()), jnp.asarray(y.numpy())) for x, y in fixed]

    def jax_steps(n):
        nonlocal p, m, v, count
        losses = []
        for i in range(n):
            x, y = jx[i % len(jx)]
            p, m, v, count, loss = jstep(p, m, v, count, x, y)
            losses.append(loss)
        return [float(x) for x in losses]

    first_t = torch_steps(2)
    first_j = jax_steps(2)
    print(f"first losses: torchtpu {first_t}, JAX {first_j}")
    rates = {"torchtpu compiled": [], "jax.jit": []}
    tokens = args.steps * BATCH * SEQ
    for r in range(args.rounds):
        t0 = time.perf_counter()
        torch_steps(args.steps)
        rates["torchtpu compiled"].append(tokens / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        jax_steps(args.steps)
        rates["jax.jit"].append(tokens / (time.perf_counter() - t0))
        print(f"round {r + 1}: " + ", ".join(f"{k} {x[-1]:,.0f}" for k, x in rates.items())
              + " tokens/s", flush=True)
    ratio = statistics.median(a / b for a, b in zip(rates["torchtpu compiled"], rates["jax.jit"]))
    print(f"torchtpu compiled / jax.jit: {ratio:.2f}x   (target 1.0x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tokens_per_s": {k: statistics.median(x) for k, x in rates.items()},
                       "rates": rates, "compiled/jax": ratio,
                       "first_losses": {"torchtpu": first_t, "jax": first_j}}, f, indent=1)


if __name__ == "__main__":
    main()
