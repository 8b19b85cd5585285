"""Hugging Face transformers on "tpu", each architecture against CPU:
forward (eager and torch.compile), one training step, greedy generate()
for causal LMs (dynamic and static KV cache), save_pretrained /
from_pretrained(device_map="tpu"). Models are tiny and built offline."""
import copy
import os
import warnings

import pytest
import torch

import torchtpu

from . import conftest
from .hf_specs import FAST, SPECS, build, first_output, loss_of

NAMES = list(SPECS) if os.environ.get("TORCHTPU_HF_ALL") == "1" else FAST
CAUSAL = [n for n in NAMES if SPECS[n][0] == "causal"]
TOL = dict(rtol=1e-4, atol=1e-4)


def to_tpu(inputs):
    return {k: v.to("tpu") for k, v in inputs.items()}


def moved(model):
    """A copy on tpu. Module.to gives PrivateUse1 parameters new tensors (as
    for XLA), which unties shared weights: tie them again, as
    from_pretrained(device_map=...) does."""
    m = copy.deepcopy(model).to("tpu")
    if hasattr(m, "tie_weights"):
        m.tie_weights()
    return m


@pytest.fixture(autouse=True)
def quiet():
    import transformers
    transformers.logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("name", NAMES)
def test_eager_forward(name):
    model, inputs, _ = build(name)
    model.eval()
    with torch.no_grad():
        want = first_output(model(**inputs))
    tmodel = moved(model)
    before = torchtpu.metrics.fallback_counts()
    with torch.no_grad():
        got = first_output(tmodel(**to_tpu(inputs)))
    after = torchtpu.metrics.fallback_counts()
    met = {op: c - before.get(op, 0) for op, c in after.items() if c != before.get(op, 0)}
    if met:
        conftest.FALLBACKS[name] = met
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), want, **TOL)
    assert not met, f"forward used the CPU fallback: {met}"


@pytest.mark.parametrize("name", NAMES)
def test_train_step(name):
    model, inputs, _ = build(name)
    tmodel = moved(model)
    results = []
    for m, inp in ((model, inputs), (tmodel, to_tpu(inputs))):
        m.train()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loss = loss_of(m(**inp))
        opt.zero_grad()
        loss.backward()
        opt.step()
        results.append((loss.item(), {k: v.detach().cpu() for k, v in m.named_parameters()}))
    (want_loss, want), (got_loss, got) = results
    assert abs(got_loss - want_loss) <= 1e-4 * max(1.0, abs(want_loss))
    for k in want:
        torch.testing.assert_close(got[k], want[k], **TOL, msg=k)


@pytest.mark.parametrize("name", NAMES)
def test_compiled_forward(name):
    model, inputs, _ = build(name)
    model.eval()
    with torch.no_grad():
        want = first_output(model(**inputs))
    torch._dynamo.reset()
    tmodel = torch.compile(moved(model), backend="tpu")
    def graphs():
        m = torchtpu.metrics.metrics()
        return m.get("compiled_graphs", 0) + m.get("compiled_graph_loads", 0)
    before = graphs()
    with torch.no_grad():
        got = first_output(tmodel(**to_tpu(inputs)))
    torch.testing.assert_close(got.cpu(), want, **TOL)
    assert graphs() > before


@pytest.mark.parametrize("name", CAUSAL)
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generate(name, cache):
    model, inputs, _ = build(name)
    model.eval()
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    want = model.generate(inputs["input_ids"], **kw)
    tmodel = moved(model)
    got = tmodel.generate(inputs["input_ids"].to("tpu"), **kw)
    assert got.cpu().tolist() == want.tolist()


@pytest.mark.parametrize("name", NAMES)
def test_save_and_load_to_tpu(name, tmp_path):
    model, inputs, _ = build(name)
    model.eval()
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path, device_map="tpu")
    assert all(p.device.type == "tpu" for p in loaded.parameters())
    with torch.no_grad():
        torch.testing.assert_close(first_output(loaded(**to_tpu(inputs))).cpu(),
                                   first_output(model(**inputs)), **TOL)
