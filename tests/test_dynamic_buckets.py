"""Bounded dynamic shapes (torchtpu._buckets): a graph with symbolic sizes
runs one program per power-of-two bucket, its padding masked; results,
losses and gradients equal the unpadded run on CPU, and a graph the analysis
cannot prove exact declines to per-size specialisation, still correct."""
import copy
import os
import sys

import pytest
import torch
import torch.nn.functional as F

import torchtpu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))


def counters():
    return dict(torchtpu.metrics.metrics())


def delta(before, prefix):
    now = counters()
    return {k: now.get(k, 0) - before.get(k, 0) for k in now
            if k.startswith(prefix) and now.get(k, 0) != before.get(k, 0)}


@pytest.fixture(autouse=True)
def fresh_dynamo(monkeypatch):
    monkeypatch.delenv("TORCHTPU_DYNAMIC_BUCKETS", raising=False)
    monkeypatch.delenv("TORCHTPU_BUCKET_MAX", raising=False)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _grads_close(model, ref, tol=1e-4):
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if q.grad is None:
            assert p.grad is None, name
            continue
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=tol, atol=tol, msg=name)


def test_demo_transformer_lengths_share_bucket_programs_with_exact_losses():
    from tiny_gpt import TinyGPT
    torch.manual_seed(0)
    model = TinyGPT(14, dim=32, heads=2, layers=2)
    ref = copy.deepcopy(model)
    model.to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    fn = torch.compile(model, backend="tpu", dynamic=True)
    before = counters()
    g = torch.Generator().manual_seed(1)
    lengths = [9, 13, 16, 11, 17, 30, 33, 8]
    for t in lengths:
        x = torch.randint(0, 14, (3, t), generator=g)
        loss = fn(x.to("tpu"), x.roll(-1, 1).to("tpu"))
        loss.backward()
        want = ref(x, x.roll(-1, 1))
        want.backward()
        torch.testing.assert_close(loss.cpu(), want, rtol=1e-5, atol=1e-5)
        _grads_close(model, ref)
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    # buckets 16 (9..16), 32 (17..32), 64 (33), 8 (8): forward and backward each
    assert delta(before, "bucket_compiles") == {"bucket_compiles": 4}
    assert delta(before, "bucket_declined") == {}
    assert delta(before, "compile_specializations") == {}
    assert delta(before, "compile_graphs_eager") == {}


def _tiny_llama(max_positions):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
                                   max_position_embeddings=max_positions, head_dim=8)
    return transformers.LlamaForCausalLM(cfg)


def test_llama_from_transformers_buckets_with_exact_loss_logits_and_grads():
    model = _tiny_llama(64)
    ref = copy.deepcopy(model)
    model.to("tpu")
    fn = torch.compile(model, backend="tpu", dynamic=True)
    before = counters()
    g = torch.Generator().manual_seed(2)
    for t in (9, 13, 11, 17, 30):
        ids = torch.randint(0, 96, (2, t), generator=g)
        out = fn(input_ids=ids.to("tpu"), labels=ids.to("tpu"))
        out.loss.backward()
        want = ref(input_ids=ids, labels=ids)
        want.loss.backward()
        torch.testing.assert_close(out.loss.cpu(), want.loss, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out.logits.cpu(), want.logits, rtol=1e-4, atol=1e-4)
        _grads_close(model, ref)
    assert delta(before, "bucket_compiles") == {"bucket_compiles": 2}
    assert delta(before, "compile_specializations") == {}


# (function, bucketed?) — the declined ones must still be right
CASES = {
    "sum": (lambda x: x.sum(1), True),
    "reductions": (lambda x: (x.mean(1), x.amax(1), x.softmax(1), x.log_softmax(-1),
                              x.cumsum(1), x.logsumexp(1), x.max(1).values, x.argmax(1)), True),
    "mean_all": (lambda x: x.mean(), True),
    "contract_padded": (lambda x: x @ x.t(), True),
    "contract_tokens": (lambda x: x.t() @ x, True),
    "flatten_sum": (lambda x: x.flatten().sum(), True),
    "shift_difference": (lambda x: x[:, 1:] - x[:, :-1], True),
    "prefix_slice": (lambda x: x[:, :3].sum(1), True),
    "end_pad": (lambda x: F.pad(x, (1, 2), value=3.0), True),
    "expand": (lambda x: x.unsqueeze(0).expand(2, -1, -1).sum(), True),
    "arange_positions": (lambda x: torch.arange(x.shape[1], device=x.device) * x, True),
    "index_from_end": (lambda x: x[:, -1] * 2, True),
    "slice_from_end": (lambda x: x[:, -3:].sum(1), True),
    "ellipsis_from_end": (lambda x: x[..., -2], False),
    "variance": (lambda x: x.var(1), False),
    "sort": (lambda x: x.sort(1).values, False),
    "flip": (lambda x: x.flip(1), False),
    "cat_padded": (lambda x: torch.cat([x, x * 2], 1), True),
    "cat_padded_static": (lambda x: torch.cat([x, x[:, :2]], 1).cumsum(1), True),
    "flat_slice": (lambda x: x.reshape(-1)[:4], False),
    "size_as_value": (lambda x: x / x.shape[1], False),
    "numel": (lambda x: x.numel() * x.sum(), False),
    "arange_start": (lambda x: torch.arange(x.shape[1], x.shape[1] + 2, device=x.device)
                     + x[:, :1], False),
    "roll": (lambda x: x.roll(1, 1), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_padding_is_masked_or_the_graph_declines(case):
    f, bucketed = CASES[case]
    fn = torch.compile(f, backend="tpu", dynamic=True)
    before = counters()
    for shape in ((3, 5), (3, 7), (4, 6)):
        x = torch.randn(*shape)
        got, want = fn(x.to("tpu")), f(x)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-5)
    declined = delta(before, "bucket_declined")
    if bucketed:
        assert not declined and delta(before, "bucket_compiles")
    else:
        assert declined and not delta(before, "bucket_compiles")


@pytest.mark.parametrize("dims", ["one", "all"])
def test_reductions_over_padding_keep_cpus_infinite_rows(dims):
    """Max-like reductions and softmax over a padded dim, with rows all -inf
    (max -inf, argmax 0, logsumexp -inf, softmax NaN on CPU: the padding's
    finite fill must not win them), all +inf (for the min-like ones), one
    -inf, a +inf and a NaN; forward and backward."""
    def f(x):
        if dims == "all":
            # amax / amin of the all-infinite rows: forward only (their
            # tie-split gradient counts the padding: _extreme_input)
            return (x[1:2].amax().detach(), x[5:6].amin().detach(), x[1:2].logsumexp((0, 1)),
                    x[1:3].amax((0, 1)))
        return (x.softmax(-1), x.log_softmax(1), torch.softmax(x * 2, -1, dtype=torch.float64),
                x.t().softmax(0), x.amax(1).detach(), x.argmax(1), x.max(1).values,
                x.amin(-1).detach(), x.argmin(1), x.min(1).values, x.logsumexp(1),
                x[2:5].amax(1), x[2:5].amin(1))

    fn = torch.compile(f, backend="tpu", dynamic=True)
    before = counters()
    for t in (5, 7, 6):
        x = torch.randn(6, t)
        x[1] = float("-inf")
        x[5] = float("inf")
        x[2, 0] = float("-inf")
        x[3, 1] = float("inf")
        x[4, 2] = float("nan")
        xt = x.to("tpu").requires_grad_()
        xc = x.clone().requires_grad_()
        got, want = fn(xt), f(xc)
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w.detach(), rtol=1e-5, atol=1e-5, equal_nan=True)
        def loss(outs):  # a NaN-free part of each float output
            return sum(o[4:5].sum() if o.dim() else o for o in outs if o.is_floating_point())
        loss(got).backward()
        loss(want).backward()
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert delta(before, "bucket_compiles") and not delta(before, "bucket_declined")


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int64])
def test_integer_inputs_weigh_padding_as_nothing(dtype):
    """logsumexp, softmax and log_softmax of an integer input compute in
    floating point, where the integer's lowest value is no -inf: padding
    filled with uint8's 0 weighed exp(0) = 1 per padded position
    (logsumexp of three uint8 ones gave log(3e + 1)), int8's -128 as much
    as a valid -128. Rows of the dtype's extremes; min/max-like reductions
    of the same inputs beside them."""
    def f(x):
        return (torch.logsumexp(x, 0), torch.logsumexp(x, 1), x.softmax(0, dtype=torch.float32),
                x.log_softmax(1, dtype=torch.float64), x.amax(0), x.amin(1), x.argmax(0),
                x.argmin(1), x.sum(0), x.any(1))

    info = torch.iinfo(dtype)
    fn = torch.compile(f, backend="tpu", dynamic=True)
    before = counters()
    for rows, cols in ((3, 5), (5, 7), (6, 3)):
        g = torch.Generator().manual_seed(rows)
        x = torch.randint(max(info.min, -20), min(info.max, 20) + 1, (rows, cols), generator=g,
                          dtype=dtype)
        x[0] = info.min
        x[1] = info.max
        x[:, -1] = info.min
        for got, want in zip(fn(x.to("tpu")), f(x)):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)
    assert delta(before, "bucket_compiles") and not delta(before, "bucket_declined")


def test_python_size_outputs_are_the_true_sizes():
    fn = torch.compile(lambda x: (x.shape[1] + 1, x.sum(1)), backend="tpu", dynamic=True)
    for t in (5, 7):
        got = fn(torch.ones(2, t, device="tpu"))
        assert got[0] == t + 1 and got[1].cpu().tolist() == [float(t)] * 2


def test_buckets_off_and_bound(monkeypatch):
    f = lambda x: x.sum(1)  # noqa: E731
    monkeypatch.setenv("TORCHTPU_DYNAMIC_BUCKETS", "0")
    before = counters()
    fn = torch.compile(f, backend="tpu", dynamic=True)
    for t in (5, 7):
        assert torch.equal(fn(torch.ones(2, t, device="tpu")).cpu(), torch.full((2,), float(t)))
    assert not delta(before, "bucket_compiles")
    torch._dynamo.reset()
    monkeypatch.setenv("TORCHTPU_DYNAMIC_BUCKETS", "1")
    monkeypatch.setenv("TORCHTPU_BUCKET_MAX", "8")
    before = counters()
    fn = torch.compile(f, backend="tpu", dynamic=True)
    for t in (5, 7, 9, 10):  # 5, 7 -> 8; beyond the bound each size is its own
        assert torch.equal(fn(torch.ones(3, t, device="tpu")).cpu(), torch.full((3,), float(t)))
    assert delta(before, "bucket_compiles") == {"bucket_compiles": 3}


def test_outputs_have_eager_strides_not_views_of_the_padding():
    f = lambda x: (x * 2).transpose(0, 1)  # noqa: E731
    fn = torch.compile(f, backend="tpu", dynamic=True)
    for t in (5, 7):
        x = torch.randn(3, t)
        got, want = fn(x.to("tpu")), f(x)
        assert got.shape == want.shape and got.stride() == want.stride()
        assert got.storage_offset() == 0 and got.untyped_storage().nbytes() == want.numel() * 4
        torch.testing.assert_close(got.cpu(), want)


def test_hf_generate_with_the_dynamic_cache_compiles_per_bucket_not_per_length():
    model = _tiny_llama(128).eval()
    ids = torch.randint(0, 96, (1, 7), generator=torch.Generator().manual_seed(3))
    want = model.generate(ids, max_new_tokens=20, do_sample=False)
    model.to("tpu")
    model.forward = torch.compile(model.forward, backend="tpu", dynamic=True)
    before = counters()
    got = model.generate(ids.to("tpu"), max_new_tokens=20, do_sample=False)
    assert torch.equal(got.cpu(), want)
    # prefill (7 -> 8) and decode over cache lengths 7..26 (buckets 8, 16, 32)
    assert delta(before, "bucket_compiles") == {"bucket_compiles": 4}
    assert delta(before, "compile_specializations") == {}


@pytest.mark.parametrize("ignore", [-100, 0])
def test_cross_entropy_positional_ignore_index_and_reduction(ignore):
    """Also: an int argument Dynamo makes symbolic (ignore_index) is a value,
    never bucketed like a size."""
    def f(logits, target):  # logits [N, C, T], target [N, T]
        return (F.cross_entropy(logits, target, None, None, ignore, None, "sum"),
                F.cross_entropy(logits.transpose(1, 2).reshape(-1, 4), target.reshape(-1),
                                ignore_index=ignore))

    fn = torch.compile(f, backend="tpu", dynamic=True)
    g = torch.Generator().manual_seed(0)
    for t in (5, 7):
        logits, target = torch.randn(2, 4, t, generator=g), torch.randint(0, 4, (2, t), generator=g)
        got, want = fn(logits.to("tpu"), target.to("tpu")), f(logits, target)
        for a, b in zip(got, want):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)


def test_flat_argmax_and_zero_sizes():
    f = lambda x: (x.argmax(), x.sum(1))  # noqa: E731
    fn = torch.compile(f, backend="tpu", dynamic=True)
    for shape in ((3, 5), (3, 7), (3, 0), (2, 6)):
        x = torch.randn(*shape)
        if x.numel() == 0:
            torch.testing.assert_close(torch.compile(lambda x: x.sum(1), backend="tpu",
                                                     dynamic=True)(x.to("tpu")).cpu(), x.sum(1))
            continue
        got, want = fn(x.to("tpu")), f(x)
        assert int(got[0]) == int(want[0])
        torch.testing.assert_close(got[1].cpu(), want[1])


def test_in_place_writes_to_padded_inputs_decline():
    def f(x, y):
        x += 1
        y.sub_(2)
        return x.sum(1) + y.sum(1)

    _writes_decline_and_land(f, lambda t: (torch.randn(2, t), torch.randn(2, t)), (5, 7))


def _writes_decline_and_land(f, make_inputs, lengths):
    """f writes into its inputs: the graph declines the buckets, and the
    results and the inputs written equal CPU's."""
    fn = torch.compile(f, backend="tpu", dynamic=True)
    before = counters()
    for t in lengths:
        inputs = make_inputs(t)
        on_device = [a.to("tpu") for a in inputs]
        got = fn(*on_device)
        want = f(*inputs)
        torch.testing.assert_close(got.cpu(), want)
        for d, c in zip(on_device, inputs):
            torch.testing.assert_close(d.cpu(), c)
    assert delta(before, "bucket_declined") and not delta(before, "bucket_compiles")


@pytest.mark.parametrize("write", ["setitem", "view_add_", "index_copy_"])
def test_writes_through_views_of_padded_inputs_decline(write):
    """Fuzz seed 5059: `v0 = a.permute(1, 0); v0[:-1] = 0` wrote into the
    padded copy of `a`, not `a`."""
    def f(x, cache):
        if write == "setitem":
            x.permute(1, 0)[:-1] = 0
        elif write == "view_add_":
            x[:, 0].add_(1)
        else:
            cache.index_copy_(1, torch.arange(x.shape[1], device=x.device), x)
        return x.sum(1)

    _writes_decline_and_land(f, lambda t: (torch.randn(2, t), torch.zeros(2, 8)), (3, 5))
