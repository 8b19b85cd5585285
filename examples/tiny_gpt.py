"""A small decoder-only transformer language model and a synthetic corpus,
shared by the demo, the training tests and the benchmarks."""
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_corpus(n_lines=4000, seed=0):
    """Character-level text with learnable structure: additions with their
    answers ("17+25=42."), so the loss can fall well below uniform."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        a, b = rng.randrange(100), rng.randrange(100)
        lines.append(f"{a}+{b}={a + b}.")
    text = " ".join(lines)
    vocab = sorted(set(text))
    stoi = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    return data, vocab


def batches(data, batch_size, seq_len, seed=0):
    """Endless (inputs, targets) batches of random windows, reproducible."""
    g = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=g)
        x = torch.stack([data[s:s + seq_len] for s in starts.tolist()])
        y = torch.stack([data[s + 1:s + seq_len + 1] for s in starts.tolist()])
        yield x, y


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab_size, dim=64, heads=4, layers=2, max_len=128):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02 * (1 if p.shape[0] != p.shape[1] else 1 / math.sqrt(2)))

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def model_loss(model, x, y):
    """The forward step as a function of the model (for precompile)."""
    return model(x, y)


def train(device, steps, batch_size=16, seq_len=64, log_every=0, seed=0, model_kwargs=None,
          backend=None, return_model=False, precompile=None):
    """Trains TinyGPT on `device` from a fixed seed; returns (losses, tokens/s).
    With `backend`, the model (forward and backward) and the optimizer step
    run under torch.compile(backend=backend); backend="default" calls
    torch.compile with no backend argument, as most code does. With
    `precompile` (a folder), both are torchtpu.compiler.precompile'd there:
    a later process loads them instead of tracing."""
    import time

    data, vocab = make_corpus()
    torch.manual_seed(seed)
    model = TinyGPT(len(vocab), **(model_kwargs or {})).to(device)
    # capturable: the step counts live on the device, so a compiled step is
    # one device program (CPU step counts would keep it partly on the host).
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, foreach=True,
                            capturable=bool(backend or precompile))
    run_model, opt_step = model, opt.step
    if precompile:
        import os

        import torchtpu.compiler
        loss_fn = torchtpu.compiler.precompile(model_loss, os.path.join(precompile, "loss.tpuc"))
        opt_step = torchtpu.compiler.precompile(opt.step, os.path.join(precompile, "step.tpuc"))
        run_model = lambda x, y: loss_fn(model, x, y)  # noqa: E731
    elif backend:
        options = {} if backend == "default" else {"backend": backend}
        run_model = torch.compile(model, **options)
        opt_step = torch.compile(opt.step, **options)
    losses = []
    stream = batches(data, batch_size, seq_len, seed)
    start = time.perf_counter()
    timed_from, timed_tokens = None, 0
    for step in range(steps):
        x, y = next(stream)
        x, y = x.to(device), y.to(device)
        loss = run_model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt_step()
        losses.append(loss.item())  # a host sync each step, like real logging
        if step == 1:  # skip the first steps' compiles in the throughput
            timed_from = time.perf_counter()
        elif step > 1:
            timed_tokens += batch_size * seq_len
        if log_every and (step % log_every == 0 or step == steps - 1):
            elapsed = time.perf_counter() - (timed_from or start)
            rate = timed_tokens / elapsed if timed_tokens else float("nan")
            print(f"  step {step:4d}  loss {losses[-1]:.4f}  tokens/s {rate:,.0f}", flush=True)
    elapsed = time.perf_counter() - (timed_from or start)
    rate = timed_tokens / elapsed if timed_tokens else float("nan")
    return (losses, rate, model) if return_model else (losses, rate)


@torch.no_grad()
def generate(model, vocab, prompt, max_new=12, stop="."):
    """Greedy decoding on the model's device, one token at a time."""
    stoi = {c: i for i, c in enumerate(vocab)}
    device = next(model.parameters()).device
    idx = torch.tensor([[stoi[c] for c in prompt]], device=device)
    out = prompt
    model.eval()
    for _ in range(max_new):
        nxt = model(idx)[0, -1].argmax().item()
        out += vocab[nxt]
        if vocab[nxt] == stop:
            break
        idx = torch.cat([idx, torch.tensor([[nxt]], device=device)], dim=1)
    model.train()
    return out
