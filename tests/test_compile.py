"""torch.compile(backend="tpu"): graphs lowered whole by the C lowering table,
checked against PyTorch on CPU (and eager tpu) on real training."""
import copy
import os
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))


def counters():
    return torchtpu.metrics.metrics()


def delta(before, name):
    return counters().get(name, 0) - before.get(name, 0)


def graphs_built(before):
    """Graphs compiled whole: built now, or loaded from AOTAutograd's cache
    (a graph an earlier test compiled)."""
    return delta(before, "compiled_graphs") + delta(before, "compiled_graph_loads")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_function_compiles_to_one_graph_and_matches_cpu():
    def f(x, w, b):
        h = torch.relu(x @ w + b) * 0.5 - 1
        return h.softmax(-1).sum(0), h.transpose(0, 1)[1:, ::2].contiguous()

    x, w, b = torch.randn(6, 5), torch.randn(5, 4), torch.randn(4)
    before = counters()
    got = torch.compile(f, backend="tpu", fullgraph=True)(x.to("tpu"), w.to("tpu"), b.to("tpu"))
    want = f(x, w, b)
    for g, r in zip(got, want):
        assert g.device.type == "tpu"
        torch.testing.assert_close(g.cpu(), r, rtol=1e-5, atol=1e-5)
    assert graphs_built(before) == 1
    assert delta(before, "compile_graphs_eager") == 0
    assert delta(before, "device_ops") == 0  # no eager op ran


@pytest.mark.parametrize("backend", ["tpu", None])
def test_registered_backend_and_device_interface(backend):
    """Either torch.compile call installs the "tpu" device interface."""
    torch.compile(lambda x: x, **({"backend": backend} if backend else {}))
    from torch._dynamo import list_backends
    from torch._dynamo.device_interface import get_interface_for_device
    assert "tpu" in list_backends(exclude_tags=())
    assert get_interface_for_device("tpu").device_count() == torch.tpu.device_count()
    for mode in ("default", "reduce-overhead", "max-autotune"):
        f = torch.compile(lambda x: x * 3 + 1, backend="tpu", mode=mode)
        assert f(torch.ones(3, device="tpu")).cpu().tolist() == [4.0, 4.0, 4.0]


@pytest.mark.parametrize("backend", ["tpu", "default"])
def test_demo_transformer_trains_20_steps_like_eager(backend):
    """backend="default": torch.compile with no backend argument."""
    from tiny_gpt import train
    before = counters()
    kwargs = dict(batch_size=4, seq_len=32, model_kwargs=dict(dim=32, heads=2, layers=2))
    eager, _ = train("tpu", 20, **kwargs)
    compiled, _ = train("tpu", 20, backend=backend, **kwargs)
    # forward, backward and the optimizer step, each one graph
    assert graphs_built(before) >= 3
    assert delta(before, "compile_graphs_eager") == 0
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(eager), rtol=1e-4, atol=1e-4)
    assert compiled[-1] < compiled[0] - 0.3


def test_default_backend_compiles_tpu_graphs_through_torchtpu():
    """torch.compile with no backend argument: a tpu graph compiles through
    torchtpu (Inductor would reach for Google's torch_tpu Pallas stack), a
    CPU graph in the same process still goes to Inductor."""
    def f(x, w):
        return torch.tanh(x @ w).softmax(-1) * 2, torch.ones(2, device=x.device) + 1

    x, w = torch.randn(5, 4), torch.randn(4, 3)
    before = counters()
    got = torch.compile(f)(x.to("tpu"), w.to("tpu"))
    assert graphs_built(before) == 1
    assert delta(before, "device_ops") == 0
    want = f(x, w)
    for g, r in zip(got, want):
        assert g.device.type == "tpu"
        torch.testing.assert_close(g.cpu(), r, rtol=1e-5, atol=1e-5)
    before = counters()
    on_cpu = torch.compile(lambda x: torch.tanh(x) * 2)(x)
    torch.testing.assert_close(on_cpu, torch.tanh(x) * 2)
    assert graphs_built(before) == 0  # Inductor's


def test_default_backend_graph_that_only_creates_tpu_tensors():
    got = torch.compile(lambda: torch.arange(6, device="tpu").reshape(2, 3) * 2)()
    assert got.device.type == "tpu" and got.cpu().tolist() == [[0, 2, 4], [6, 8, 10]]


def test_default_backend_reports_inductor_modes_once():
    torchtpu._default_backend._reported.clear()
    x = torch.randn(4)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch._dynamo.reset()
            got = torch.compile(lambda x: x * 3 + 1, mode="max-autotune")(x.to("tpu"))
        torch.testing.assert_close(got.cpu(), x * 3 + 1)
        warned = sum("mode='max-autotune'" in str(w.message) for w in caught)
        assert warned == (1 if _ == 0 else 0)
    # an option Inductor does not know fails as it does for cuda
    with pytest.raises(RuntimeError, match="Unexpected optimization option"):
        torch.compile(lambda x: x, options={"no_such_option": 1})


class NanoStyleGPT(nn.Module):
    """A GPT with what nanoGPT's model.py does (written here, not copied):
    LayerNorm without bias through F.layer_norm, one fused qkv Linear,
    causal SDPA with dropout in training, tanh-free GELU MLP, a head tied
    to the token embedding, and logits of the last position only when no
    targets are given."""

    def __init__(self, vocab=96, block=32, layers=2, heads=4, dim=48, dropout=0.0):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(block, dim)
        self.ln_w = nn.ParameterList([nn.Parameter(torch.ones(dim)) for _ in range(2 * layers + 1)])
        self.attn = nn.ModuleList([nn.Linear(dim, 3 * dim, bias=False) for _ in range(layers)])
        self.proj = nn.ModuleList([nn.Linear(dim, dim, bias=False) for _ in range(layers)])
        self.fc = nn.ModuleList([nn.Linear(dim, 4 * dim, bias=False) for _ in range(layers)])
        self.out = nn.ModuleList([nn.Linear(4 * dim, dim, bias=False) for _ in range(layers)])
        self.head = nn.Linear(dim, vocab, bias=False)
        self.wte.weight = self.head.weight
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets=None):
        b, t = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        d = x.shape[-1]
        for i in range(len(self.attn)):
            h = F.layer_norm(x, (d,), self.ln_w[2 * i], None, 1e-5)
            q, k, v = self.attn[i](h).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0,
                                               is_causal=True)
            x = x + self.proj[i](y.transpose(1, 2).contiguous().view(b, t, d))
            h = F.layer_norm(x, (d,), self.ln_w[2 * i + 1], None, 1e-5)
            x = x + self.out[i](F.gelu(self.fc[i](h)))
        x = F.layer_norm(x, (d,), self.ln_w[-1], None, 1e-5)
        if targets is None:
            return self.head(x[:, [-1], :]), None
        logits = self.head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                       ignore_index=-1)


def _train_nano(device, compiled, steps=6):
    torch.manual_seed(0)
    model = NanoStyleGPT().to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.95))
    run = torch.compile(model) if compiled else model
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randint(0, 96, (4, 32), generator=g)
        _, loss = run(x.to(device), torch.roll(x, -1, 1).to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits, _ = run(torch.arange(8).view(1, 8).to(device))
    return losses, logits.cpu()


def test_nanogpt_style_model_trains_under_default_torch_compile_like_eager():
    before = counters()
    eager, eager_logits = _train_nano("tpu", False)
    compiled, compiled_logits = _train_nano("tpu", True)
    cpu, cpu_logits = _train_nano("cpu", False)
    assert delta(before, "compile_graphs_eager") == 0
    assert graphs_built(before) >= 3  # forward, backward, inference
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(eager), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(cpu), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(compiled_logits, cpu_logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_compiled_sdpa_is_the_fused_op_compiled_whole_as_cpu(causal):
    """Under AOTAutograd, SDPA of tpu tensors traces to the fused op and its
    backward (the device's backend choice), and backend="tpu" compiles both
    graphs whole (their SymInt results max_q / max_k are constants of the
    static graph): output and gradients as CPU's."""
    from torch._functorch.aot_autograd import aot_function

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal) * 2

    seen = []

    def record(gm, _):
        seen.extend(str(n.target) for n in gm.graph.nodes)
        return gm

    g = torch.Generator().manual_seed(0)
    cpu = [torch.randn(2, 3, 6, 8, generator=g).requires_grad_() for _ in range(3)]
    dev = [t.detach().to("tpu").requires_grad_() for t in cpu]
    aot_function(f, record, record)(*dev).sum().backward()
    assert "aten._scaled_dot_product_fused_attention_overrideable.default" in seen
    assert "aten._scaled_dot_product_fused_attention_overrideable_backward.default" in seen
    for t in dev:
        t.grad = None
    before = counters()
    want = f(*cpu)
    want.backward(torch.ones_like(want))
    got = torch.compile(f, backend="tpu")(*dev)
    got.backward(torch.ones_like(got))
    assert delta(before, "compile_graphs_eager") == 0
    assert graphs_built(before) >= 2
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-5, atol=1e-5)


class ConvNet(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(p)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        h = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(h.flatten(1)))


def _train_convnet(device, backend, p, steps=6):
    torch.manual_seed(0)
    model = ConvNet(p).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(1)
    # one batch, learnt over the steps: the loss must fall
    data = [(torch.randn(8, 3, 8, 8), torch.randint(0, 5, (8,)))] * steps
    run = torch.compile(model, backend=backend) if backend else model
    losses = []
    for x, y in data:
        loss = F.cross_entropy(run(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def test_batchnorm_model_compiles_and_matches_cpu():
    before = counters()
    got, m_tpu = _train_convnet("tpu", "tpu", p=0.0)
    want, m_cpu = _train_convnet("cpu", None, p=0.0)
    assert delta(before, "compile_graphs_eager") == 0
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-4)
    # running statistics: AOTAutograd's input mutations reached the buffers
    torch.testing.assert_close(m_tpu.bn.running_mean.cpu(), m_cpu.bn.running_mean, rtol=1e-4,
                               atol=1e-5)
    torch.testing.assert_close(m_tpu.bn.running_var.cpu(), m_cpu.bn.running_var, rtol=1e-4,
                               atol=1e-5)
    assert m_tpu.bn.num_batches_tracked.item() == 6


def test_dropout_model_compiles_trains_and_is_seeded():
    before = counters()
    a, _ = _train_convnet("tpu", "tpu", p=0.5, steps=8)
    assert delta(before, "compile_graphs_eager") == 0
    b, _ = _train_convnet("tpu", "tpu", p=0.5, steps=8)
    assert a == b  # the device generator drives the compiled dropout
    no_drop, _ = _train_convnet("tpu", "tpu", p=0.0, steps=8)
    assert a != no_drop
    assert min(a[-3:]) < a[0]

    drop = torch.compile(nn.Dropout(0.25).train(), backend="tpu")
    out = drop(torch.ones(20000, device="tpu")).cpu()
    kept = (out != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.02
    assert torch.all((out == 0) | ((out - 1 / 0.75).abs() < 1e-5))


def test_transformer_block_fullgraph_forward_and_backward():
    from tiny_gpt import Block
    torch.manual_seed(0)
    block = Block(32, 4)
    x = torch.randn(2, 16, 32, requires_grad=True)
    ref = block(x)
    ref.square().mean().backward()
    tblock = Block(32, 4).to("tpu")
    tblock.load_state_dict(block.state_dict())
    tx = x.detach().to("tpu").requires_grad_()
    out = torch.compile(tblock, backend="tpu", fullgraph=True)(tx)
    out.square().mean().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(tx.grad.cpu(), x.grad, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(tblock.named_parameters(), block.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("buckets", [True, False])
def test_new_shapes_recompile_and_dynamic_is_bucketed_or_specialised(buckets, monkeypatch):
    monkeypatch.setenv("TORCHTPU_DYNAMIC_BUCKETS", "1" if buckets else "0")
    f = torch.compile(lambda x: (x * x).sum(-1), backend="tpu")
    before = counters()
    for n in (3, 5, 7):
        x = torch.randn(4, n)
        torch.testing.assert_close(f(x.to("tpu")).cpu(), (x * x).sum(-1))
    # a static graph first; Dynamo then marks the dim dynamic: 5 and 7 share
    # the bucket of 8, or each size is specialised (compiled once each)
    assert graphs_built(before) == (2 if buckets else 3)
    again = counters()
    f(torch.randn(4, 5).to("tpu"))
    assert delta(again, "compiled_graphs") == 0

    g = torch.compile(lambda x: x.cumsum(0) + 1, backend="tpu", dynamic=True)
    before = counters()
    for n in (2, 6, 2):
        x = torch.randn(n)
        torch.testing.assert_close(g(x.to("tpu")).cpu(), x.cumsum(0) + 1)
    if buckets:
        assert delta(before, "bucket_compiles") == 2 and delta(before, "compile_specializations") == 0
    else:
        assert delta(before, "compile_specializations") == 2


_INPUT_VIEWS = {
    "t": lambda a: a.t(),
    "unflatten_mT": lambda a: a.unflatten(1, (a.shape[1],)).mT,
    "t_unflatten": lambda a: a.t().unflatten(-2, (2, a.shape[1] // 2)),
    "select": lambda a: a.select(0, -1),
    "slice_t": lambda a: a[1:, 1::2].t(),
    "view_and_value": lambda a: (a.t()[1:], a.sum()),
}


def _assert_like_eager(got, want, base_tpu, base_cpu):
    assert got.device.type == "tpu"
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.stride() == want.stride()
    assert got.storage_offset() == want.storage_offset()
    assert torch.equal(got.cpu(), want)
    # eager's result is a view of the input: so is ours, and it sees writes
    assert want.untyped_storage().data_ptr() == base_cpu.untyped_storage().data_ptr()
    assert got.untyped_storage().data_ptr() == base_tpu.untyped_storage().data_ptr()


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("name", sorted(_INPUT_VIEWS))
def test_returned_views_of_inputs_are_eager_views(name, dynamic):
    # fuzz seeds 20172, 30155, 20069: with symbolic sizes (dynamic=True, or
    # Dynamo's automatic dynamic after a shape change) AOTAutograd cannot
    # replay the views and rebuilt them by as_strided with the compiled
    # result's contiguous layout: the input read in the wrong order.
    fn = _INPUT_VIEWS[name]
    f = torch.compile(fn, backend="tpu", dynamic=dynamic)
    for shape in ((3, 4), (5, 6)):  # a second shape: the specialised path
        a = torch.arange(shape[0] * shape[1], dtype=torch.float32).reshape(shape) - 7
        at = a.to("tpu")
        want, got = fn(a), f(at)
        if name == "view_and_value":
            assert torch.equal(got[1].cpu(), want[1])
            want, got = want[0], got[0]
        _assert_like_eager(got, want, at, a)
        at.mul_(2)
        a.mul_(2)
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dynamic", [False, True])
def test_returned_view_of_a_view_input(dynamic):
    # The input is itself a strided view with an offset; the output's offset
    # is relative to it, and a new input layout of the same shape retraces.
    fn = lambda a: a.t()[1:]  # noqa: E731
    f = torch.compile(fn, backend="tpu", dynamic=dynamic)
    base = torch.arange(40, dtype=torch.float32).reshape(5, 8)
    bt = base.to("tpu")
    for view in (lambda b: b[1:4, 2:7], lambda b: b[2:5, 1:6], lambda b: b.t()[2:7, 1:4].t()):
        want, got = fn(view(base)), f(view(bt))
        _assert_like_eager(got, want, bt, base)


@pytest.mark.parametrize("dynamic", [False, True])
def test_returned_view_of_a_mutated_input(dynamic):
    # fuzz seed 30155: the output views the input after the mutation; in
    # the functional graph it views the value written into the input.
    def fn(a):
        v = a.t().unflatten(-2, (2, a.shape[1] // 2))
        v.mul_(2)
        v[1:1:3] = 0  # an empty write, as the fuzzer's
        return v[:, 1:]

    f = torch.compile(fn, backend="tpu", dynamic=dynamic)
    for shape in ((3, 4), (5, 6)):
        a = torch.arange(shape[0] * shape[1], dtype=torch.float32).reshape(shape) - 3
        at = a.to("tpu")
        want, got = fn(a), f(at)
        _assert_like_eager(got, want, at, a)
        assert torch.equal(at.cpu(), a)


@pytest.mark.parametrize("dynamic", [False, True])
def test_view_of_a_value_copied_into_an_input_is_not_the_input(dynamic):
    # b is copied into a, but b.t() views b, not a: writes to a later must
    # not show through it.
    def fn(a):
        b = a * 2 + 1
        a.copy_(b)
        return b.t()

    f = torch.compile(fn, backend="tpu", dynamic=dynamic)
    for shape in ((3, 4), (5, 6)):
        a = torch.arange(shape[0] * shape[1], dtype=torch.float32).reshape(shape)
        at = a.to("tpu")
        want, got = fn(a), f(at)
        assert got.shape == want.shape and torch.equal(got.cpu(), want)
        assert torch.equal(at.cpu(), a)
        assert got.untyped_storage().data_ptr() != at.untyped_storage().data_ptr()
        at.zero_()
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dynamic", [False, True])
def test_returned_view_of_an_input_that_requires_grad(dynamic):
    def fn(x):
        return x.unflatten(1, (x.shape[1],)).mT, (x * x).sum()

    f = torch.compile(fn, backend="tpu", dynamic=dynamic)
    for shape in ((3, 4), (5, 6)):
        x = torch.arange(shape[0] * shape[1], dtype=torch.float32).reshape(shape).requires_grad_()
        xt = x.detach().to("tpu").requires_grad_()
        (wv, ws), (gv, gs) = fn(x), f(xt)
        _assert_like_eager(gv.detach(), wv.detach(), xt, x)
        assert torch.equal(gs.detach().cpu(), ws.detach())
        (wv * torch.arange(wv.numel()).reshape(wv.shape)).sum().backward()
        (gv * torch.arange(gv.numel()).reshape(gv.shape).to("tpu")).sum().backward()
        assert torch.equal(xt.grad.cpu(), x.grad)


def test_fill_of_an_input_slice_then_a_view():
    # fuzz seed 20064: the graph's slice_scatter of a slice at an offset
    # (run eagerly) failed to make its result ("setStorage: out of bounds").
    def fn(a):
        a[2:, 3:4].fill_(0.5)
        return a.unfold(0, 3, 2) * 1

    a = torch.arange(20, dtype=torch.float32).reshape(5, 4)
    at = a.to("tpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the graph may run eagerly
        got = torch.compile(fn, backend="tpu")(at)
    want = fn(a)
    assert got.shape == want.shape and torch.equal(got.cpu(), want)
    assert torch.equal(at.cpu(), a)


def test_graph_breaks_and_unlowered_ops_still_give_cpu_results():
    def f(x):
        y = x.sin() * 2
        if y.sum() > 0:  # data-dependent: a graph break
            y = y + 1
        print("", end="")  # another break
        return torch.special.bessel_j0(y.abs() + 2) + y  # still on the CPU fallback

    x = torch.randn(5)
    before = counters()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(f, backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x), rtol=1e-5, atol=1e-5)
    assert graphs_built(before) >= 1
    assert delta(before, "compile_graphs_eager") >= 1
    assert any("special_bessel_j0" in str(w.message) for w in caught)


def test_optimizer_step_writes_state_in_place():
    torch.manual_seed(0)
    params = [torch.randn(4, 3, device="tpu", requires_grad=True) for _ in range(2)]
    ref = [p.detach().cpu().clone().requires_grad_() for p in params]
    opt = torch.optim.Adam(params, lr=0.1, foreach=True, capturable=True)
    ropt = torch.optim.Adam(ref, lr=0.1, foreach=True)
    step = torch.compile(opt.step, backend="tpu")
    view = params[0].detach()[1]  # a view: must see the in-place update
    for _ in range(3):
        for p, r in zip(params, ref):
            g = torch.randn(4, 3)
            p.grad, r.grad = g.to("tpu"), g.clone()
        step()
        ropt.step()
    for p, r in zip(params, ref):
        torch.testing.assert_close(p.detach().cpu(), r.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(view.cpu(), ref[0].detach()[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(opt.state[params[1]]["exp_avg"].cpu(),
                               ropt.state[ref[1]]["exp_avg"], rtol=1e-5, atol=1e-5)


RECOMPILES = r"""
import torch, torchtpu
a = torch.ones(4, 5, device="tpu")
a + 1
torch.ones(4, 7, device="tpu") + 1
f = torch.compile(lambda x: x * 2, backend="tpu", dynamic=False)
f(torch.ones(3, device="tpu"))
f(torch.ones(6, device="tpu"))
print("recompiles", torchtpu.metrics.metrics()["recompiles"])
"""


def test_recompile_log_names_what_changed():
    import subprocess
    env = dict(os.environ, TORCHTPU_LOG="recompiles")
    out = subprocess.run([sys.executable, "-c", RECOMPILES], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert ("recompile aten::add.Tensor: arg 0: float32[4,5] strides [5,1] offset 0 of 20 -> "
            "float32[4,7] strides [7,1] offset 0 of 28") in out.stderr
    # Dynamo's reason for the compiled function: the size guard
    assert "Recompiling function" in out.stderr and "size mismatch" in out.stderr
    assert int(out.stdout.split("recompiles")[1]) >= 2


def test_as_strided_and_cpu_constants_inside_graphs():
    def f(x):
        window = torch.as_strided(x * 1, (3, 2), (2, 3), 1)  # overlapping windows
        bias = torch.tensor(-1.5)  # a 0-dim CPU constant lifted into the graph
        return window + bias, torch.ones(2) * 3  # the second output stays on CPU

    x = torch.arange(12.0)
    before = counters()
    got, cpu_out = torch.compile(f, backend="tpu", fullgraph=True)(x.to("tpu"))
    want, want_cpu = f(x)
    assert got.device.type == "tpu" and cpu_out.device.type == "cpu"
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(cpu_out, want_cpu)
    assert graphs_built(before) == 1
    assert delta(before, "compile_graphs_eager") == 0


def test_compiled_graph_follows_the_default_dtype():
    """Dynamo guards on the default dtype: a graph traced under float32 is
    not reused under float64 (integer true division, float scalars)."""
    fn = torch.compile(lambda a, b: a / b * 2.5, backend="tpu")
    a = torch.tensor([7, -3, 10, 4])
    b = torch.tensor([2, 2, 3, 8])
    previous = torch.get_default_dtype()
    try:
        for dtype in (torch.float32, torch.float64):
            torch.set_default_dtype(dtype)
            got = fn(a.to("tpu"), b.to("tpu"))
            want = a / b * 2.5
            assert got.dtype == want.dtype == dtype
            torch.testing.assert_close(got.cpu(), want)
    finally:
        torch.set_default_dtype(previous)


def _compiled_vs_cpu(module, x):
    """Forward + backward of a compiled tpu copy of `module` vs eager CPU."""
    tmod = copy.deepcopy(module).to("tpu")
    tx = x.detach().to("tpu").requires_grad_()
    out = torch.compile(tmod, backend="tpu", fullgraph=True)(tx)
    out = out[0] if isinstance(out, tuple) else out
    out.square().sum().backward()
    cx = x.detach().requires_grad_()
    ref = module(cx)
    ref = ref[0] if isinstance(ref, tuple) else ref
    ref.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(tx.grad.cpu(), cx.grad, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(tmod.named_parameters(), module.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("cell", ["lstm", "lstm_nobias", "gru"])
def test_rnn_cells_compile_forward_and_backward(cell):
    # The graphs hold _thnn_fused_lstm_cell / _thnn_fused_gru_cell (what
    # PyTorch's RNN code calls for a tpu input) and their backward ops;
    # bias=False needs our meta kernel (PyTorch's Python one fails on it).
    torch.manual_seed(0)
    module = {"lstm": lambda: nn.LSTMCell(3, 5), "lstm_nobias": lambda: nn.LSTMCell(3, 5, bias=False),
              "gru": lambda: nn.GRUCell(3, 5)}[cell]()
    before = counters()
    _compiled_vs_cpu(module, torch.randn(2, 3))
    assert graphs_built(before) >= 2
    assert delta(before, "compile_graphs_eager") == 0


def test_lstm_module_compiles_with_allow_rnn():
    torch.manual_seed(0)
    with torch._dynamo.config.patch(allow_rnn=True):
        _compiled_vs_cpu(nn.LSTM(3, 4, batch_first=True), torch.randn(2, 4, 3))


# --- Found by the random-program fuzzer (tests/fuzz_programs.py); xfail
# until fixed, then the entry leaves KNOWN_MISMATCH_TAGS there.

@pytest.mark.parametrize("case", ["negative", "too_large", "dim1", "dim2", "last_of_4d", "embedding",
                                  "ok"])
def test_fuzz_compiled_index_select_out_of_range_raises(case):
    # fuzz index.index_select@negative: CPU (and the eager modes) raise for
    # an index outside [0, size); so does a compiled graph (its program
    # computes whether one is).
    fs = {
        "negative": (lambda a, i: (a * 2).index_select(0, i), torch.tensor([-1, 1])),
        "too_large": (lambda a, i: (a + 1).index_select(0, i), torch.tensor([0, 2])),
        "dim1": (lambda a, i: (a * 2)[None].expand(3, 2).index_select(1, i), torch.tensor([2])),
        # CPU's RuntimeError is for dim 1 only (fuzz seed 500663)
        "dim2": (lambda a, i: (a * 2)[None, None].expand(2, 3, 2).index_select(2, i),
                 torch.tensor([2])),
        "last_of_4d": (lambda a, i: (a * 2)[:1].reshape(1, 1, 1, 1).index_select(-1, i),
                       torch.tensor([0, -2])),
        "embedding": (lambda a, i: F.embedding(i, (a * 2)[:, None]), torch.tensor([[0, 5]])),
        "ok": (lambda a, i: (a * 2).index_select(0, i), torch.tensor([1, 0, 1])),
    }
    f, i = fs[case]
    a = torch.tensor([1.0, 2.0])
    try:
        want, want_exc = f(a, i), None
    except Exception as e:  # noqa: BLE001
        want, want_exc = None, e
    cf = torch.compile(f, backend="tpu")
    if want_exc is None:
        assert torch.equal(cf(a.to("tpu"), i.to("tpu")).cpu(), want)
        return
    with pytest.raises(type(want_exc)):
        cf(a.to("tpu"), i.to("tpu"))
        torch.tpu.synchronize()


@pytest.mark.parametrize("case", ["frac", "logaddexp", "heaviside", "frac_float"])
def test_fuzz_compiled_ops_cpu_has_no_kernel_for_raise(case):
    # fuzz @cpu_rejects_dtype: decomposed (frac = x - trunc(x)) these
    # computed where CPU has no kernel; kept whole, their lowering declines
    # those dtypes and the graph raises CPU's error, as eager does.
    fs = {
        "frac": (lambda a: torch.frac(a + 1), torch.tensor([1, 2])),
        "logaddexp": (lambda a: torch.logaddexp(a, a + 1), torch.tensor([1, 2])),
        "heaviside": (lambda a: torch.heaviside(a, a * 0.5), torch.tensor([1, 0])),
        "frac_float": (lambda a: torch.frac(a * 1.5), torch.tensor([1.0, -3.0])),
    }
    f, a = fs[case]
    try:
        want, want_exc = f(a), None
    except Exception as e:  # noqa: BLE001
        want, want_exc = None, e
    cf = torch.compile(f, backend="tpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if want_exc is None:
            assert torch.equal(cf(a.to("tpu")).cpu(), want)
            return
        with pytest.raises(type(want_exc)):
            cf(a.to("tpu"))


def test_fuzz_compiled_output_strides_match_eager():
    def f(a):
        return (a.to(torch.float32).permute(1, 0)).reshape(1, 5, 5)

    a = torch.rand(5, 5) > 0.5
    assert torch.compile(f, backend="tpu")(a.to("tpu")).stride() == f(a).stride()


def _geometry(ts):
    """Each tensor's strides, offset, and the first tensor sharing its storage."""
    ptrs = [t.untyped_storage().data_ptr() for t in ts]
    return [(t.stride(), t.storage_offset(), ptrs.index(p)) for t, p in zip(ts, ptrs)]


def test_compiled_views_of_intermediates_and_layouts_as_eager():
    # Views of an intermediate share its storage at eager's offsets and
    # strides, whether or not the intermediate itself is returned; a result
    # computed with a permuted layout keeps it; a write through a returned
    # view reach the others, as in eager.
    def f(a, b):
        v = a @ b
        s = (a.mT + 1)                     # eager: the transposed layout
        return v, v.t(), v[1:], v.unsqueeze(0)[:, :, 1], s, s[0]

    def g(a, b):
        v = torch.exp(a @ b)
        return v.t(), v.narrow(1, 1, 2)   # v itself is not returned

    def h(a, b):
        # copysign's meta is a decomposition (where(signbit(b), ...)) whose
        # layout is b's; eager's TensorIterator takes a's
        t = a.mT
        return torch.copysign(t, b), torch.copysign(b, t), t * b

    def k(a, b):
        # float floor_divide's meta picks a contiguous layout, eager's the
        # transposed operand's; the views of it follow eager's (fuzzer
        # seed 200046)
        q = a.mT.abs() // b[0]
        return q, q.unsqueeze(-1), q[1:].t()

    a, b = torch.randn(4, 3), torch.randn(3, 4)
    for fn in (f, g, h, k):
        want = fn(a, b)
        got = torch.compile(fn, backend="tpu")(a.to("tpu"), b.to("tpu"))
        for x, y in zip(got, want):
            torch.testing.assert_close(x.cpu(), y)
        assert _geometry(got) == _geometry(want)
    got = torch.compile(g, backend="tpu")(a.to("tpu"), b.to("tpu"))
    got[0].fill_(5)
    assert torch.equal(got[1].cpu(), torch.full((4, 2), 5.0))


def test_fuzz_compiled_layouts_follow_eager_through_writes_and_operands():
    # fuzz seeds 500237 and 500947: a pointwise result takes its operands'
    # eager layouts (a view of a transposed, filled tensor), keeps it
    # through an in-place write, and passes it on to the next pointwise op
    def f(a, s):
        v = a.unfold(0, 1, 1)
        w = torch.logical_and(a, v)
        w.narrow(1, 0, 1).zero_()
        return v, w

    def g(b, s):
        v0 = b ^ b
        v1 = v0.transpose(1, -1).fill_(-1.25)
        v2 = v1.view(2, 1, 2, 2, 2, 5)
        v3 = torch.logical_and(s, v2)
        return v0, v1, v2, v3, torch.atan(v3), v1.long()

    a, b, s = torch.rand(1, 3, 1, 1), torch.rand(2, 5, 4, 2) > 0.5, torch.tensor(0.3)
    for fn, x in ((f, a), (g, b)):
        want = fn(x.clone(), s)
        got = torch.compile(fn, backend="tpu")(x.to("tpu"), s.to("tpu"))
        for y, w in zip(got, want):
            assert torch.equal(y.cpu(), w)
        assert _geometry(got) == _geometry(want)


def test_compiled_training_user_outputs_layout_grads_match():
    # Training graphs: the user's outputs get eager's layout (the saved
    # activations stay internal); grads and values as on CPU.
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    mt = copy.deepcopy(m).to("tpu")

    def f(mod, x):
        y = mod(x)
        return y, y.t(), y[1:]

    x = torch.randn(6, 4)
    cf = torch.compile(f, backend="tpu")
    for _ in range(2):
        got, want = cf(mt, x.to("tpu")), f(m, x)
        sum(t.sum() * (i + 1) for i, t in enumerate(got)).backward()
        sum(t.sum() * (i + 1) for i, t in enumerate(want)).backward()
        assert _geometry(got) == _geometry(want)
        for t, c in zip(got, want):
            torch.testing.assert_close(t.detach().cpu(), c.detach(), rtol=1e-5, atol=1e-5)
    for p, q in zip(mt.parameters(), m.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["floordiv", "mod", "fmod", "trunc", "floor_mode", "literal",
                                  "scalar_mod"])
def test_compiled_integer_division_by_zero_raises_as_cpu(case):
    # CPU raises RuntimeError("ZeroDivisionError") for an integer divisor
    # of 0 (so does Inductor); the compiled program checks its divisors.
    fs = {
        "floordiv": lambda a, b: a // b,
        "mod": lambda a, b: (a + 1) % b,
        "fmod": lambda a, b: torch.fmod(a, b),
        "trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        "floor_mode": lambda a, b: torch.div(a * 2, b, rounding_mode="floor"),
        "literal": lambda a, b: (a + b) // 0,
        "scalar_mod": lambda a, b: torch.remainder(a - b, 0),
    }
    f = fs[case]
    a, b = torch.tensor([5, -6, 7]), torch.tensor([2, 0, -3])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(a, b)
    cf = torch.compile(f, backend="tpu")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        cf(a.to("tpu"), b.to("tpu")).cpu()  # (raised at the next host read)
    # nonzero divisors: CPU's values, no error; float division is not checked
    nz = torch.tensor([2, -4, -3])
    if case not in ("literal", "scalar_mod"):
        assert torch.equal(cf(a.to("tpu"), nz.to("tpu")).cpu(), f(a, nz))
        g = torch.compile(lambda x, y: f(x.double(), y.double()), backend="tpu")
        torch.testing.assert_close(g(a.to("tpu"), b.to("tpu")).cpu(), f(a.double(), b.double()),
                                   equal_nan=True)


@pytest.mark.parametrize("case", ["literal_256", "zero_dim_256", "rem_512", "pow_negative"])
def test_compiled_wrapped_divisors_and_negative_powers_raise_as_cpu(case):
    # CPU reads a divisor as the result dtype (uint8: 256 is 0) and refuses
    # an integer to a negative integer power; nonzero wrapped divisors
    # compute as on CPU.
    fs = {
        "literal_256": (lambda a: a // 256, "ZeroDivisionError"),
        "zero_dim_256": (lambda a: a // torch.tensor(256, device=a.device), "ZeroDivisionError"),
        "rem_512": (lambda a: a % 512, "ZeroDivisionError"),
        "pow_negative": (lambda a: a.long() ** -1, "negative integer powers"),
    }
    f, msg = fs[case]
    a = torch.tensor([5, 7, 255], dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=msg):
        f(a)
    with pytest.raises(RuntimeError, match=msg):
        torch.compile(f, backend="tpu")(a.to("tpu")).cpu()  # (at the next host read)
    g = lambda a: (a // 257, a // torch.tensor([3, 1, 2], device=a.device), a.long() ** 2)  # noqa: E731
    for x, y in zip(torch.compile(g, backend="tpu")(a.to("tpu")), g(a)):
        assert torch.equal(x.cpu(), y)


@pytest.mark.parametrize("case", ["too_large", "negative", "ignored", "bad_after_ignored", "spatial",
                                  "valid"])
def test_compiled_nll_loss_target_out_of_bounds_raises(case):
    # CPU raises IndexError for a class index outside [0, C) other than
    # ignore_index; the graph keeps nll_loss whole and checks its targets
    x2, x4 = torch.randn(2, 3), torch.randn(1, 3, 2, 2)
    x, t, kw = {"too_large": (x2, [0, 3], {}), "negative": (x2, [-1, 0], {}),
                "ignored": (x2, [5, 1], {"ignore_index": 5}),
                "bad_after_ignored": (x2, [5, -100], {"ignore_index": 5}),
                "spatial": (x4, [[[0, 3], [1, 2]]], {}), "valid": (x2, [2, -100], {})}[case]
    f = lambda a, b: F.cross_entropy(a * 2, b, **kw)  # noqa: E731
    t = torch.tensor(t)
    cf = torch.compile(f, backend="tpu")
    try:
        want = f(x, t)
    except IndexError:
        with pytest.raises(IndexError):
            cf(x.to("tpu"), t.to("tpu")).cpu()  # (raised at the next host read)
        return
    torch.testing.assert_close(cf(x.to("tpu"), t.to("tpu")).cpu(), want)


@pytest.mark.parametrize("case", ["masked_fill", "fill", "masked_fill_ok", "fill_float", "index_fill_wraps",
                                  "fill_empty_slice", "masked_fill_empty", "setitem_slice", "clamp_min",
                                  "add_alpha", "where_scalar", "full", "full_float", "linspace",
                                  "masked_fill_constant", "threshold", "new_full_wraps"])
def test_compiled_fill_values_the_dtype_cannot_hold_raise_as_cpu(case):
    # fuzz seed 701287: uint8.masked_fill_(m, -1.25) raises CPU's overflow
    # error (so does eager); the graph keeps the fills whole and checks them
    f, x = {
        "masked_fill": (lambda a: a.reshape(3, 1).masked_fill_(a.reshape(3, 1) > 1, -1.25),
                        torch.tensor([[1, 2, 3]], dtype=torch.uint8)),
        "fill": (lambda a: (a * 2).fill_(300), torch.tensor([1, 2], dtype=torch.uint8)),
        "masked_fill_ok": (lambda a: a.masked_fill(a > 1, 7) * 2, torch.tensor([[1, 2, 3]], dtype=torch.uint8)),
        "fill_float": (lambda a: (a * 2).fill_(-1.5), torch.tensor([1.0, 2.0])),
        "index_fill_wraps": (lambda a: (a + 1).index_fill_(0, torch.tensor([0], device=a.device), -3),
                             torch.tensor([1, 2], dtype=torch.uint8)),
        # CPU checks the value before the elements: an empty fill raises too
        "fill_empty_slice": (lambda a: a[2:2].fill_(300) + 1, torch.tensor([1, 2, 3], dtype=torch.uint8)),
        "masked_fill_empty": (lambda a: (a * 2)[:0].masked_fill(a[:0] > 1, 300),
                              torch.tensor([1, 2, 3], dtype=torch.uint8)),
        # eager's rule for every op's literal numbers (the dispatcher's
        # check_scalars_fit), on the traced nodes
        "setitem_slice": (lambda a: a.__setitem__(slice(1, 2), 300) or a + 1, torch.tensor([1, 2], dtype=torch.uint8)),
        "clamp_min": (lambda a: a.clamp(min=300), torch.tensor([1, 2], dtype=torch.uint8)),
        "add_alpha": (lambda a: a.add(1, alpha=300), torch.tensor([1, 2], dtype=torch.uint8)),
        "where_scalar": (lambda a: torch.where(a > 1, a, 300), torch.tensor([1, 2], dtype=torch.uint8)),
        "full": (lambda a: a + torch.full((2,), 300, dtype=torch.uint8, device=a.device),
                 torch.tensor([1, 2], dtype=torch.uint8)),
        "full_float": (lambda a: a + torch.full((2,), 1e40, device=a.device), torch.tensor([1.0, 2.0])),
        "linspace": (lambda a: a + torch.linspace(0, 300, 2, dtype=torch.uint8, device=a.device),
                     torch.tensor([1, 2], dtype=torch.uint8)),
        "masked_fill_constant": (lambda a: (a * 1).masked_fill_(a > 1, torch.tensor(300)),
                                 torch.tensor([1, 2], dtype=torch.uint8)),
        "threshold": (lambda a: torch.threshold(a, 1, 300), torch.tensor([1, 2], dtype=torch.uint8)),
        "new_full_wraps": (lambda a: a + a.new_full((2,), -1), torch.tensor([1, 2], dtype=torch.uint8)),
    }[case]
    cf = torch.compile(f, backend="tpu")
    try:
        want = f(x.clone())
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match="cannot be converted"):
            cf(x.to("tpu"))
        assert "cannot be converted" in str(e)
        return
    assert torch.equal(cf(x.to("tpu")).cpu(), want)


def test_compiled_unfold_is_lowered_forward_and_backward():
    # unfold (overlapping and gapped windows, a 2-D input) compiles into the
    # program instead of sending the graph to eager; grads as on CPU.
    def f(x):
        return (x.unfold(1, 3, 2) ** 2).sum(-1) + x.unfold(0, 2, 1).mean(), x.unfold(-1, 2, 3)

    x = torch.randn(4, 9)
    xt = x.clone().to("tpu").requires_grad_()
    xc = x.clone().requires_grad_()
    before = counters()
    got = torch.compile(f, backend="tpu")(xt)
    want = f(xc)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.detach().cpu(), w.detach(), rtol=1e-5, atol=1e-5)
        assert g.stride() == w.stride()
    (got[0].sum() + got[1].sum()).backward()
    (want[0].sum() + want[1].sum()).backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
    assert delta(before, "compile_graphs_eager") == 0
    # windows of an empty tensor (fuzz seed 70051: failed to compile)
    e = torch.compile(lambda x: (x.narrow(-1, 1, 0) * 2).unfold(0, 1, 2), backend="tpu")(
        x.to("tpu"))
    assert e.shape == (x.narrow(-1, 1, 0) * 2).unfold(0, 1, 2).shape


def test_compiled_comparisons_of_folded_negative_integers():
    # fuzz seed 100656: a comparison XLA folds (both sides constants after
    # x * 0 - 1) compared si64 unsigned: -1 <= 0 was False. The comparison
    # type is now spelled out.
    x = torch.tensor([3, 0, 2])
    fs = [lambda t: (t * 0 - 1) <= 0, lambda t: torch.full_like(t, -1.25) <= False,
          lambda t: t.clone().fill_(-2) < (t * 0 + 1), lambda t: (t * 0 - 3).to(torch.int32) > -4,
          lambda t: (t * 0 - 1).to(torch.int8).lt(0)]
    for f in fs:
        assert torch.equal(torch.compile(f, backend="tpu")(x.to("tpu")).cpu(), f(x))


def test_compiled_value_returned_twice_is_one_tensor_as_in_eager():
    # copy_ returns self: eager gives one object for v1 and v4. Two aliasing
    # objects would reach the graph after the nonzero break as two inputs,
    # and AOTAutograd's synthetic base then fails to replay the permute
    # (fuzz seed 700239; aot_eager on CPU fails that way for such inputs).
    def prog(a1):
        v0 = torch.atan2(a1, a1)
        v1 = v0.narrow(0, 1, 1).expand(1, -1)
        v4 = v1.copy_(torch.msort(v1))
        v5 = torch.nonzero(v1)
        v6 = torch.sub(v1, v1, alpha=1)
        v7 = v4.permute(1, 0)
        v7.neg_()
        return v1, v4, v5, v6, v7

    a = torch.tensor([6, 0], dtype=torch.uint8)
    want = prog(a.clone())
    got = torch.compile(prog, backend="tpu")(a.to("tpu"))
    assert got[0] is got[1]
    for w, g in zip(want, got):
        assert g.device.type == "tpu"
        assert (w.shape, w.stride(), w.dtype) == (g.shape, g.stride(), g.dtype)
        torch.testing.assert_close(g.cpu(), w, equal_nan=True)


def test_compiled_copy_of_a_pointwise_result_keeps_its_eager_layout():
    # fuzz seed 950601: copysign of a transposed operand and a 0-dim one is
    # laid out like the operand in eager (strides (1, 2)); the traced meta
    # says (2, 1), and .to(bool) (preserve_format) followed the meta
    def prog(a0):
        v1 = torch.add(a0.t(), a0.t(), alpha=3.5)
        v4 = torch.copysign(v1, torch.min(v1))
        return v4, v4.to(torch.bool), v4.clone(), v4.to(torch.bool, memory_format=torch.contiguous_format)

    a = torch.tensor([[0.25, -0.25], [-1.75, 0.5]])
    want = prog(a)
    got = torch.compile(prog, backend="tpu")(a.to("tpu"))
    for w, g in zip(want, got):
        assert g.stride() == w.stride()
        assert torch.equal(g.cpu(), w)


@pytest.mark.parametrize("op", ["lerp", "addcdiv"])
@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int64])
def test_compiled_op_of_a_dtype_cpu_has_no_kernel_for_raises(op, dtype):
    # fuzz seed 950544: lerp decomposed into a + w * (b - a) computed bools
    # that CPU's lerp refuses ("lerp_kernel_scalar" not implemented); the
    # OpInfo sweep of unsupported dtypes found addcdiv of bools
    def f(a):
        return torch.lerp(a, a, 0.25) if op == "lerp" else torch.addcdiv(a, a, a)

    a = torch.ones(3, dtype=dtype)
    with pytest.raises((NotImplementedError, RuntimeError)) as want:
        f(a)
    with pytest.raises(want.type):
        torch.compile(f, backend="tpu")(a.to("tpu"))


@pytest.mark.parametrize("case", ["mul_gaps", "fill_overlapping", "view_of_unfold", "setitem", "out"])
def test_compiled_writes_through_unfold_reach_the_base_as_in_eager(case):
    # fuzz seed 950507: functionalization replays a write into an unfold()
    # view as unfold_backward of the windows, which zeroes the elements no
    # window covers (aot_eager loses them on the CPU too); such a graph
    # runs eagerly, where unfold is a view
    def prog(x, w):
        if case == "mul_gaps":
            x.unfold(-1, 1, 2).mul_(w)
        elif case == "fill_overlapping":
            x.unfold(0, 3, 1).fill_(7)
        elif case == "view_of_unfold":
            x.unfold(0, 2, 3)[:, 1].add_(w)
        elif case == "setitem":
            x.unfold(0, 2, 2)[0] = 5
        else:
            torch.mul(x.unfold(0, 2, 4), 3, out=x.unfold(0, 2, 4))
        return x * 2

    want_x = torch.arange(9.0) - 4
    want = prog(want_x, torch.tensor(0.5))
    x = (torch.arange(9.0) - 4).to("tpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(prog, backend="tpu")(x, torch.tensor(0.5, device="tpu"))
    assert torch.equal(got.cpu(), want)
    assert torch.equal(x.cpu(), want_x)


@pytest.mark.parametrize("op", ["hardswish", "glu", "celu", "hardswish_float"])
@pytest.mark.parametrize("dtype", [torch.bool, torch.int64])
def test_compiled_decomposed_op_raises_where_cpu_has_no_kernel(op, dtype):
    # a decomposition computes hardswish of ints where CPU (and eager)
    # raise NotImplementedError; the graph runs eagerly and raises it
    f = {"hardswish": F.hardswish, "glu": F.glu, "celu": F.celu,
         "hardswish_float": lambda a: F.hardswish(a.float())}[op]
    a = torch.ones(4, dtype=dtype)
    try:
        want = f(a)
    except NotImplementedError:
        with pytest.raises(NotImplementedError):
            torch.compile(f, backend="tpu")(a.to("tpu"))
        return
    assert torch.equal(torch.compile(f, backend="tpu")(a.to("tpu")).cpu(), want)


@pytest.mark.parametrize("dynamic_dims", [(), (1,), (0, 1, 2)])
def test_compiled_view_of_an_input_written_through_another_view_under_dynamic_shapes(dynamic_dims):
    """Fuzz seed 1102386 (after a few hundred programs, Dynamo's automatic
    dynamic shapes had marked a dim dynamic): a1.mT.masked_fill_(...) then
    an output viewing a1. The written value's traced strides differed from
    the input's only at a size-1 dim, so the output was not recognised as a
    view of the input; its contiguous fallback reached AOTAutograd, which
    under dynamic shapes rebuilds the alias with those strides: a view of
    the wrong elements ([-1.25, -2.0] for [-1.25, 3.5])."""
    import warnings

    def prog(a1):
        v0 = a1.mT.masked_fill_(a1.mT > 0, 3.5)
        v1 = (a1.unflatten(0, (2,)))[:, 0::2]
        return v0, v1

    a1 = torch.tensor([[[-1.25], [-2.0]], [[2.0], [-1.25]]])
    cpu_in = a1.clone()
    want = prog(cpu_in)
    torch._dynamo.reset()
    x = a1.clone().to("tpu")
    for d in dynamic_dims:
        torch._dynamo.maybe_mark_dynamic(x, d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(prog, backend="tpu")(x)
    for g, w in zip(got, want):
        assert torch.equal(g.cpu(), w)
        assert g.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # views of a1
    assert torch.equal(x.cpu(), cpu_in)


@pytest.mark.parametrize("case", ["permuted_middle", "fuzz_1104669", "non_adjacent", "expanded"])
def test_compiled_advanced_index_result_has_cpu_strides(case):
    """As in eager: x[..., idx] results get CPU index's layout (its iterator
    over the restrided self), not the meta kernel's (fuzz seed 1104669)."""
    import warnings

    def prog(x, i):
        if case == "permuted_middle":
            return (x > 0).permute(2, 1, 0).transpose(2, 1)[:, i[:3]]
        if case == "fuzz_1104669":  # the index a constant of the graph
            y = x[:2, :1, :2]
            v2 = y.permute(1, 2, 0)
            return v2[:, torch.tensor([-1, 1], device=x.device)]
        if case == "non_adjacent":
            return x.permute(0, 2, 1)[i[:2], :, i[1:3]]
        return x[:1].expand(4, 3, 4)[:, i[:3]]

    x = torch.arange(48).reshape(4, 3, 4)
    i = torch.tensor([0, 2, 1, 0])
    want = prog(x, i)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(prog, backend="tpu")(x.to("tpu"), i.to("tpu"))
    assert (got.shape, got.stride()) == (want.shape, want.stride())
    assert torch.equal(got.cpu(), want)


def test_sampling_ops_compile_into_the_graph():
    """searchsorted, bucketize and multinomial (a sampling step) lower inside
    a compiled graph: one graph, no eager op, searchsorted as CPU, samples
    from the nonzero categories only."""
    def f(s, v, logits):
        probs = torch.softmax(logits, -1) * (logits > 0)
        return torch.searchsorted(s, v), torch.bucketize(v, s, right=True), torch.multinomial(probs, 2)

    s, v = torch.tensor([1.0, 3.0, 3.0, 5.0, 7.0]), torch.tensor([[0.0, 3.0, 4.0], [9.0, 7.0, -1.0]])
    logits = torch.tensor([[1.0, -1.0, 2.0, -3.0], [-1.0, 0.5, -2.0, 3.0]])
    before = counters()
    got = torch.compile(f, backend="tpu", fullgraph=True)(s.to("tpu"), v.to("tpu"), logits.to("tpu"))
    want = f(s, v, logits)
    assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    samples = got[2].cpu().tolist()
    assert sorted(samples[0]) == [0, 2] and sorted(samples[1]) == [1, 3]
    assert graphs_built(before) == 1
    assert delta(before, "device_ops") == 0


@pytest.mark.parametrize("case", ["gather", "take", "index", "scatter_add"])
def test_compiled_out_of_range_indices_raise_like_cpu(case):
    """A compiled graph computes the same out-of-range flag as eager for
    gather, scatter*, take, index / index_put_ and index_add / copy / fill
    (XLA clamps the indices), and raises CPU's exception type."""
    fs = {"gather": lambda x, i: torch.gather(x, 1, i),
          "take": lambda x, i: torch.take(x, i.flatten()),
          "index": lambda x, i: x[i.flatten()],
          "scatter_add": lambda x, i: x.scatter_add(0, i, torch.ones_like(i, dtype=x.dtype))}
    f = fs[case]
    x = torch.randn(3, 2)
    cf = torch.compile(f, backend="tpu")
    good, bad = torch.tensor([[0, 1]]), torch.tensor([[0, 7]])
    torch.testing.assert_close(cf(x.to("tpu"), good.to("tpu")).cpu(), f(x, good))
    with pytest.raises(Exception) as cpu_err:
        f(x, bad)
    with pytest.raises(cpu_err.type):
        cf(x.to("tpu"), bad.to("tpu")).cpu()


def test_compiled_masked_scatter_refuses_a_short_source():
    """masked_scatter with fewer source elements than the mask's ones raises
    CPU's RuntimeError in a compiled graph too (XLA reused the last one)."""
    f = lambda x, m, s: x.masked_scatter(m, s)  # noqa: E731
    cf = torch.compile(f, backend="tpu")
    x, s = torch.zeros(3), torch.arange(2.0)
    m = torch.tensor([True, False, True])
    torch.testing.assert_close(cf(x.to("tpu"), m.to("tpu"), s.to("tpu")).cpu(), f(x, m, s))
    with pytest.raises(RuntimeError, match="Number of elements of source"):
        cf(x.to("tpu"), torch.ones(3, dtype=torch.bool, device="tpu"), s.to("tpu")).cpu()


@pytest.mark.parametrize("dynamic", [False, True])
def test_graph_returning_python_ints_compiles_as_one_program(dynamic):
    def f(x):
        return x * 2, x.shape[0] + 1, x.shape[0] * x.shape[1]

    fn = torch.compile(f, backend="tpu", dynamic=dynamic)
    before = counters()
    for n in (3, 5, 6):
        x = torch.randn(n, 4)
        got = fn(x.to("tpu"))
        want = f(x)
        torch.testing.assert_close(got[0].cpu(), want[0])
        assert got[1:] == want[1:] and all(type(v) is int for v in got[1:])
    assert delta(before, "compile_graphs_eager") == 0
    assert graphs_built(before) >= 1


@pytest.mark.parametrize("dynamic", [False, True])
def test_empty_permuted_in_graphs_compiles_with_eager_layout(dynamic):
    def f(x):
        e = torch.empty_permuted(x.shape, (0, 2, 3, 1), device=x.device, dtype=x.dtype)
        e.copy_(x * 2)
        return e, e + 1

    x = torch.randn(2, 3, 4, 5)
    before = counters()
    got = torch.compile(f, backend="tpu", dynamic=dynamic)(x.to("tpu"))
    assert delta(before, "compile_graphs_eager") == 0
    for g, w in zip(got, f(x)):
        assert g.stride() == w.stride()
        assert torch.equal(g.cpu(), w)


class _ConvGroupNormNet(nn.Module):
    """The diffusers/efficientnet pattern: conv, GroupNorm, depthwise conv,
    BatchNorm, SiLU, nearest upsampling."""

    def __init__(self):
        super().__init__()
        self.c1, self.gn = nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8)
        self.c2, self.bn = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8)

    def forward(self, x):
        h = F.silu(self.bn(self.c2(F.silu(self.gn(self.c1(x))))))
        return F.interpolate(h, scale_factor=2.0, mode="nearest").mean((2, 3))


@pytest.mark.parametrize("channels_last", [False, True])
def test_conv_groupnorm_net_compiles_whole_under_dynamic_shapes(channels_last):
    torch.manual_seed(0)
    net, ref = _ConvGroupNormNet(), _ConvGroupNormNet()
    ref.load_state_dict(net.state_dict())
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    net, ref = net.to("tpu", memory_format=fmt), ref.to(memory_format=fmt)
    fn = torch.compile(net, backend="tpu", dynamic=True)
    before = counters()
    for n in (2, 3):
        x = torch.randn(n, 3, 8, 8).to(memory_format=fmt)
        out = fn(x.to("tpu"))
        out.sum().backward()
        want = ref(x)
        want.sum().backward()
        torch.testing.assert_close(out.cpu(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(net.c1.weight.grad.cpu(), ref.c1.weight.grad, rtol=1e-4, atol=1e-4)
    assert delta(before, "compile_graphs_eager") == 0
    assert graphs_built(before) >= 2


def test_demo_transformer_under_dynamic_shapes_matches_eager():
    """Dynamic shapes with graph constants (the causal mask's scalars, which
    AOTAutograd folds into real tensors when it bundles its cache) retrace
    per new length, forward and backward equal to eager."""
    from tiny_gpt import TinyGPT
    torch.manual_seed(0)
    model = TinyGPT(14, dim=32, heads=2, layers=1)
    ref = copy.deepcopy(model)
    model.to("tpu")
    fn = torch.compile(model, backend="tpu", dynamic=True)
    before = counters()
    for t in (9, 13):
        x = torch.randint(0, 14, (2, t))
        loss = fn(x.to("tpu"), x.to("tpu"))
        loss.backward()
        want = ref(x, x)
        want.backward()
        torch.testing.assert_close(loss.cpu(), want, rtol=1e-5, atol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
    assert delta(before, "compile_graphs_eager") == 0


def test_complex_rotary_embedding_compiles_whole_and_matches_cpu():
    """Llama-style rotary embeddings (torchtitan's llama3): view_as_complex,
    a complex product and view_as_real inside one graph, forward and
    backward; they used to send the whole graph to eager."""
    def rope(x, freqs):
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return (torch.view_as_real(xc * freqs).flatten(-2) * x).sum()

    x = torch.randn(2, 5, 3, 8)
    freqs = torch.polar(torch.ones(5, 1, 4), torch.randn(5, 1, 4))
    xr = x.clone().requires_grad_()
    rope(xr, freqs).backward()
    xt = x.to("tpu").requires_grad_()
    before = counters()
    loss = torch.compile(rope, backend="tpu", fullgraph=True)(xt, freqs.to("tpu"))
    loss.backward()
    torch.testing.assert_close(loss.cpu(), rope(x, freqs), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xt.grad.cpu(), xr.grad, rtol=1e-5, atol=1e-5)
    assert delta(before, "compile_graphs_eager") == 0
    assert graphs_built(before) >= 1


_W10 = torch.rand(10, generator=torch.Generator().manual_seed(3))
_TARGETS = torch.tensor([1, 0, 4, 3, 2, 9])
_BACKWARD_CASES = {  # name: (fn, inputs); the backward ops kept whole (_KEEP_WHOLE)
    "softmax": (lambda x: torch.softmax(x * 2, -1), [(6, 10)]),
    "log_softmax_dim0": (lambda x: torch.log_softmax(x, 0), [(6, 10)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (10,), w, b), [(6, 10), (10,), (10,)]),
    "layer_norm_no_affine": (lambda x: F.layer_norm(x, (10,)), [(6, 10)]),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), [(3, 4, 5), (4,), (4,)]),
    "gelu": (lambda x: F.gelu(x), [(6, 10)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [(6, 10)]),
    "embedding_padding_idx": (lambda w, i: F.embedding(i, w, padding_idx=2),
                              [(7, 4), torch.tensor([[0, 2, 3], [2, 6, 0]])]),
    "embedding_grad_by_freq": (lambda w, i: F.embedding(i, w, scale_grad_by_freq=True),
                               [(7, 4), torch.tensor([[0, 2, 3], [0, 6, 0]])]),
    "nll_ignore_index": (lambda x, t: F.nll_loss(torch.log_softmax(x, -1), t, ignore_index=4),
                         [(6, 10), _TARGETS]),
    "nll_weight_sum": (lambda x, t: F.nll_loss(torch.log_softmax(x, -1), t,
                                               weight=_W10.to(x.device), reduction="sum"),
                       [(6, 10), _TARGETS]),
    "nll_none": (lambda x, t: F.nll_loss(x, t, reduction="none"), [(6, 10), _TARGETS]),
    "cross_entropy_smoothing": (lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
                                [(6, 10), _TARGETS]),
    "cross_entropy_2d": (lambda x, t: F.cross_entropy(x, t),
                         [(2, 5, 3, 4), torch.tensor([[[0, 1, 4, 2]] * 3, [[3, 3, 1, 0]] * 3])]),
    "dropout_p0": (lambda x: F.dropout(x, 0.0, training=True), [(6, 10)]),
}


@pytest.mark.parametrize("case", sorted(_BACKWARD_CASES))
def test_backward_ops_kept_whole_match_cpu(case):
    """Training's backward ops compiled whole (our lowerings, not the
    decompositions): values and every gradient as CPU's."""
    fn, specs = _BACKWARD_CASES[case]
    g = torch.Generator().manual_seed(0)
    base = [torch.randn(s, generator=g) if isinstance(s, tuple) else s for s in specs]
    cpu = [a.clone().requires_grad_(a.is_floating_point()) for a in base]
    dev = [a.to("tpu").requires_grad_(a.is_floating_point()) for a in base]
    torch._dynamo.reset()
    out_cpu, out_dev = fn(*cpu), torch.compile(fn, backend="tpu", fullgraph=True)(*dev)
    grad = torch.randn(out_cpu.shape, generator=g)
    out_cpu.backward(grad)
    out_dev.backward(grad.to("tpu"))
    torch.testing.assert_close(out_dev.cpu(), out_cpu.detach(), atol=1e-5, rtol=1e-4)
    for a, b in zip(cpu, dev):
        if a.is_floating_point():
            torch.testing.assert_close(b.grad.cpu(), a.grad, atol=1e-5, rtol=1e-4)


# --- compiled graphs joining one run (TORCHTPU_GRAPH_FUSION) -----------------

def _tiny_step_losses(device, steps=3, fused=True):
    """Losses and final weights of a compiled TinyGPT training step (forward,
    backward and AdamW step each a compiled graph), or of CPU eager."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    from tiny_gpt import TinyGPT
    torch.manual_seed(0)
    model = TinyGPT(16, dim=32, heads=2, layers=1, max_len=16).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True,
                            capturable=device == "tpu")
    run, step = model, opt.step
    if device == "tpu":
        run, step = torch.compile(model, backend="tpu"), torch.compile(opt.step, backend="tpu")
    g = torch.Generator().manual_seed(1)
    losses, flushes = [], []
    was = torchtpu._C._set_graph_fusion(fused)
    try:
        for _ in range(steps):
            x = torch.randint(0, 16, (4, 16), generator=g).to(device)
            y = torch.randint(0, 16, (4, 16), generator=g).to(device)
            before = counters()
            loss = run(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            step()
            losses.append(loss.item())
            flushes.append(delta(before, "defer_flushes"))
    finally:
        torchtpu._C._set_graph_fusion(was)
    return losses, [p.detach().cpu() for p in model.parameters()], flushes


def test_compiled_training_step_runs_as_one_program_with_cpu_values():
    """The step's forward, backward and optimizer graphs join one run,
    flushed once, at loss.item(); losses and weights equal CPU eager's and
    the unfused graphs'."""
    want_losses, want_params, _ = _tiny_step_losses("cpu")
    for fused in (True, False):
        # strict for the whole process: autograd's thread runs the backward
        # (the suite may run in another mode)
        was = torchtpu.get_eager_mode()
        torchtpu.set_eager_mode("strict")
        try:
            losses, params, flushes = _tiny_step_losses("tpu", fused=fused)
        finally:
            torchtpu.set_eager_mode(was)
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(want_losses),
                                   rtol=1e-4, atol=1e-5)
        for p, q in zip(params, want_params):
            torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)
        # after the first step (compiles; graph breaks settle), one flush a step
        assert flushes[1:] == ([1] * 2 if fused else [0] * 2), (fused, flushes)


def test_graph_fusion_keeps_eager_order_around_pending_graphs():
    """Eager ops between graphs of one run (strict: they run at once) see and
    leave the values program order gives: a write to a graph's input, a
    read and a write of a pending graph's output, CPU's values throughout."""
    f = torch.compile(lambda a, b: a * b + 1, backend="tpu")
    g = torch.compile(lambda a, b: (a - b).sum(0), backend="tpu")

    def program(x, y, f, g):
        a = f(x, y)
        x.add_(1)            # overwrites an input of the pending graph
        s = a.sum()          # reads its pending output
        a.mul_(2)            # writes it
        return g(a, x), s, a

    x, y = torch.randn(5, 3), torch.randn(5, 3)
    want = program(x.clone(), y, lambda a, b: a * b + 1, lambda a, b: (a - b).sum(0))
    for mode in ("strict", "defer_and_fuse"):
        with torchtpu.eager_mode(mode):
            got = program(x.to("tpu"), y.to("tpu"), f, g)
            for u, v in zip(got, want):
                torch.testing.assert_close(u.cpu(), v)


def test_graph_called_again_starts_the_next_run():
    """A loop of graph calls with no host read holds one call at a time (a
    graph the run already holds flushes it) rather than fusing every call."""
    f = torch.compile(lambda a: torch.tanh(a) * 1.5 + 0.1, backend="tpu")
    x = torch.randn(8, 8)
    y = x.to("tpu")
    f(y).cpu()  # compiled
    pending = []
    for _ in range(5):
        y = f(y)
        pending.append(torchtpu.modes.pending_ops())
        x = torch.tanh(x) * 1.5 + 0.1
    assert pending == [1] * 5
    torch.testing.assert_close(y.cpu(), x)


@pytest.mark.parametrize("mode", ["strict", "debug"])
def test_compiled_index_check_of_a_fused_graph_raises_at_the_next_read(mode):
    """A graph that joins a run reads its checks before the next host read,
    like eager's index checks (and CUDA's device asserts): CPU's IndexError
    at that read; Debug mode runs the graph at once and raises at the call."""
    emb = torch.randn(6, 4)
    f = lambda w, i: F.embedding(i, w) * 2  # noqa: E731
    cf = torch.compile(f, backend="tpu")
    good, bad = torch.tensor([0, 5, 2]), torch.tensor([0, 6, 2])
    with pytest.raises(IndexError):
        f(emb, bad)
    w = emb.to("tpu")
    with torchtpu.eager_mode(mode):
        torch.testing.assert_close(cf(w, good.to("tpu")).cpu(), f(emb, good))
        if mode == "debug":
            with pytest.raises(IndexError):
                cf(w, bad.to("tpu"))
        else:
            out = cf(w, bad.to("tpu"))  # no error yet: the run is pending
            with pytest.raises(IndexError):
                out.cpu()
        # the next call is clean
        torch.testing.assert_close(cf(w, good.to("tpu")).cpu(), f(emb, good))


@pytest.mark.parametrize("form", ["2d3d", "2d2d", "3d2d", "3d3d"])
def test_grouped_mm_compiles_for_float32_like_cpu(form):
    """torch.nn.functional.grouped_mm (transformers' MoE experts on "tpu")
    under torch.compile: PyTorch's meta kernel took only bfloat16 off the
    CPU, so float32 Mixtral failed in Dynamo. All four forms, an empty
    group, and an inf in one group's operand that must not reach the other
    groups (CPU multiplies each group alone); forward and both gradients."""
    torch.manual_seed(0)
    offs = torch.tensor([4, 4, 12, 16], dtype=torch.int32)
    a, b = {"2d3d": (torch.randn(16, 16), torch.randn(4, 16, 8)),
            "2d2d": (torch.randn(8, 16), torch.randn(16, 8)),
            "3d2d": (torch.randn(4, 8, 16), torch.randn(16, 16)),
            "3d3d": (torch.randn(4, 8, 16), torch.randn(4, 16, 8))}[form]
    if form == "3d3d":
        offs = None
    elif form == "2d3d":
        b[2, 3, 1] = float("inf")  # group 2's weight: rows 4..11 only
    elif form == "2d2d":
        b[13, 2] = float("inf")  # the contraction's group 3 (k 12..15)
    else:
        a[1, 2, 5] = float("inf")  # group 1 (columns 4..3: empty) must not leak
    f = lambda x, y, o: F.grouped_mm(x, y, offs=o)  # noqa: E731
    a.requires_grad_()
    b.requires_grad_()
    want = f(a, b, offs)
    ta = a.detach().to("tpu").requires_grad_()
    tb = b.detach().to("tpu").requires_grad_()
    got = torch.compile(f, backend="tpu", fullgraph=True)(
        ta, tb, None if offs is None else offs.to("tpu"))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    # a loss of the finite outputs only: their gradients are finite on CPU
    finite = want.isfinite()
    (want * finite).nan_to_num(0).sum().backward()
    (got * finite.to("tpu")).nan_to_num(0).sum().backward()
    torch.testing.assert_close(ta.grad.cpu(), a.grad, rtol=1e-5, atol=1e-5, equal_nan=True)
    torch.testing.assert_close(tb.grad.cpu(), b.grad, rtol=1e-5, atol=1e-5, equal_nan=True)
