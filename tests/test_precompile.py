"""Compiled tpu graphs across processes (torchtpu._precompile): PyTorch's
AOTAutograd cache holding our graphs (transparent), torchtpu.compiler.precompile
and torch.compiler's own save/load. Each scenario runs in fresh interpreters
sharing one cache directory; results are checked against eager CPU."""
import json
import os
import textwrap

import pytest

from conftest import run_python

# A model and a training step in a module of their own, so a test can change
# the source between processes.
MODEL = '''
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 16), nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x))) * SCALE


SCALE = 1.0


def loss_fn(model, x, y):
    return nn.functional.cross_entropy(model(x), y)


def data(step, n=8):
    g = torch.Generator().manual_seed(step)
    return torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


def train(device, step_fn=None, opt_step=None, steps=4, n=8):
    torch.manual_seed(0)
    model = Net().to(device)
    # capturable: the step counts on the device, the update one program
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=device != "cpu")
    step_fn = step_fn or loss_fn
    opt_step = opt_step(opt) if opt_step else opt.step
    losses = []
    for i in range(steps):
        x, y = data(i, n)
        loss = step_fn(model, x.to(device), y.to(device))
        loss.backward()
        opt_step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses
'''

RUN = '''
import json, sys, torch, torchtpu, torchtpu.compiler
sys.path.insert(0, {folder!r})
import tpmodel
{prelude}
m0 = dict(torchtpu.metrics.metrics())
{body}
m = torchtpu.metrics.metrics()
d = {{k: m.get(k, 0) - m0.get(k, 0) for k in set(m) | set(m0)}}
from torch._dynamo.utils import counters
d.update({{"aot_" + k: v for k, v in counters["aot_autograd"].items()}})
print("RESULT", json.dumps({{"out": out, "metrics": d}}))
'''


@pytest.fixture
def env(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "tpmodel.py").write_text(MODEL)
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
             "TORCHTPU_CACHE_DIR": str(tmp_path / "programs")}

    def run(body, prelude=""):
        code = RUN.format(folder=str(folder), prelude=prelude, body=textwrap.dedent(body))
        r = run_python(code, cache, timeout=600)
        assert r.returncode == 0, r.stderr[-4000:]
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
        result = json.loads(line[len("RESULT "):])
        result["stderr"] = r.stderr
        return result

    run.folder, run.tmp = folder, tmp_path
    return run


def _cpu_losses(env, steps=4):
    return env("out = tpmodel.train('cpu', steps=%d)" % steps)["out"]


def _close(a, b, tol=1e-5):
    assert len(a) == len(b)
    assert all(abs(x - y) <= tol * max(1.0, abs(y)) for x, y in zip(a, b)), (a, b)


TRANSPARENT = '''
torch.manual_seed(0)
model = tpmodel.Net().to("tpu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
run = torch.compile(model, backend="tpu")
step = torch.compile(opt.step, backend="tpu")
losses = []
for i in range(4):
    x, y = tpmodel.data(i)
    loss = torch.nn.functional.cross_entropy(run(x.to("tpu")), y.to("tpu"))
    loss.backward(); step(); opt.zero_grad()
    losses.append(loss.item())
out = losses
'''


def test_torch_compile_graphs_load_from_the_aot_autograd_cache_in_a_new_process(env):
    """Transparent: the second process finds forward, backward and the
    optimizer step in PyTorch's AOTAutograd cache and builds no graph."""
    cpu = _cpu_losses(env)
    first = env(TRANSPARENT)
    _close(first["out"], cpu)
    assert first["metrics"]["compiled_graphs"] >= 3
    assert first["metrics"].get("aot_autograd_cache_saved", 0) >= 2
    second = env(TRANSPARENT)
    assert second["out"] == first["out"]
    assert second["metrics"].get("compiled_graphs", 0) == 0
    assert second["metrics"]["compiled_graph_loads"] >= 3
    assert second["metrics"].get("aot_autograd_cache_hit", 0) >= 2
    # another torchtpu build: its entries are never looked up (our stamp is
    # in the key), the graphs are compiled afresh
    third = env(TRANSPARENT, prelude="torchtpu.__version__ = '0.0.0+other'")
    assert third["out"] == first["out"]
    assert third["metrics"].get("aot_autograd_cache_hit", 0) == 0
    assert third["metrics"]["compiled_graphs"] >= 3


EXPLICIT = '''
step = torchtpu.compiler.precompile(tpmodel.loss_fn, {path!r})
opt_step = lambda opt: torchtpu.compiler.precompile(opt.step, {opt_path!r})
out = tpmodel.train("tpu", step, opt_step, n={n})
'''


def _explicit(env, n=8, **kw):
    paths = dict(path=str(env.tmp / "loss.tpuc"), opt_path=str(env.tmp / "step.tpuc"), n=n)
    return env(EXPLICIT.format(**paths), **kw)


def test_precompiled_training_step_runs_without_tracing_in_a_new_process(env):
    cpu = _cpu_losses(env)
    first = _explicit(env)
    _close(first["out"], cpu)
    assert first["metrics"]["precompile_misses"] == 2  # loss and optimizer update
    second = _explicit(env)
    assert second["out"] == first["out"]
    m = second["metrics"]
    assert m.get("precompile_misses", 0) == 0 and m["precompile_hits"] == 8
    # nothing traced or built: no Dynamo frame, no graph
    assert m.get("compiled_graphs", 0) == 0 and m.get("aot_total", 0) == 0


def test_precompiled_function_with_new_shapes_misses_and_compiles(env):
    first = _explicit(env)
    other = _explicit(env, n=5)  # another batch size: the guards fail
    assert other["metrics"]["precompile_misses"] >= 1
    _close(other["out"], env("out = tpmodel.train('cpu', n=5)")["out"])
    # both entries are kept: either shape now loads
    again = _explicit(env)
    assert again["out"] == first["out"] and again["metrics"].get("precompile_misses", 0) == 0


def test_precompiled_function_of_another_torchtpu_is_not_loaded(env):
    _explicit(env)
    other = _explicit(env, prelude="torchtpu.__version__ = '0.0.0+other'")
    assert other["metrics"]["precompile_stale"] >= 1
    assert other["metrics"]["precompile_misses"] == 2
    assert "does not match this process" in other["stderr"]
    _close(other["out"], _cpu_losses(env))


def test_precompiled_function_of_changed_model_code_is_not_loaded(env):
    _explicit(env)
    src = env.folder / "tpmodel.py"
    src.write_text(src.read_text().replace("SCALE = 1.0", "SCALE = 2.0"))
    changed = _explicit(env)
    # a global the graph reads changed, and so did the module's source
    assert changed["metrics"]["precompile_stale"] >= 1
    assert changed["metrics"]["precompile_misses"] >= 1
    _close(changed["out"], _cpu_losses(env))
    src.write_text(src.read_text().replace("* SCALE", "* SCALE * 0.5"))
    changed2 = _explicit(env)
    assert "source of tpmodel" in changed2["stderr"]
    _close(changed2["out"], _cpu_losses(env))


TORCH_API = '''
torch.manual_seed(0)
model = tpmodel.Net().to("tpu")
x, y = tpmodel.data(0)
x, y = x.to("tpu"), y.to("tpu")
if {save}:
    fn = torch.compile(tpmodel.loss_fn, backend="tpu", fullgraph=True).aot_compile(((model, x, y), {{}}))
    fn.save_compiled_function({path!r})
else:
    with open({path!r}, "rb") as f:
        try:
            fn = torch.compiler.load_compiled_function(f)
        except torchtpu.compiler.StaleProgramError as e:
            fn = str(e)
out = fn
if not isinstance(fn, str):
    loss = fn(model, x, y)
    loss.backward()
    out = [loss.item()] + model.fc1.weight.grad.cpu().flatten().tolist()[:5]
'''


def test_torch_compiler_save_and_load_of_a_tpu_function(env):
    path = str(env.tmp / "fn.bin")
    saved = env(TORCH_API.format(save=True, path=path))
    loaded = env(TORCH_API.format(save=False, path=path))
    assert loaded["out"] == saved["out"]
    assert loaded["metrics"].get("compiled_graphs", 0) == 0
    want = env('''
    torch.manual_seed(0)
    model = tpmodel.Net()
    x, y = tpmodel.data(0)
    loss = tpmodel.loss_fn(model, x, y); loss.backward()
    out = [loss.item()] + model.fc1.weight.grad.flatten().tolist()[:5]
    ''')["out"]
    _close(loaded["out"], want)
    stale = env(TORCH_API.format(save=False, path=path),
                prelude="torchtpu.__version__ = '0.0.0+other'")
    assert "does not match this process" in stale["out"] and "0.0.0+other" in stale["out"]


def test_graph_constants_keep_their_devices_through_saving_twice_and_pickling():
    """A graph run eagerly keeps its constants (tpu and CPU) across
    AOTAutograd's cache: moved to the host to pickle (AOTAutograd may do
    it twice), back to their devices on load."""
    import pickle

    import torch

    from torchtpu._precompile import _graph_module_to

    class M(torch.nn.Module):
        def forward(self, x):
            return x + self.c + self.d

    m = M()
    m.c, m.d = torch.ones(2, device="tpu"), torch.tensor(2.0)
    gm = torch.fx.symbolic_trace(m)
    saved = pickle.loads(pickle.dumps(_graph_module_to(_graph_module_to(gm, "cpu"), "cpu")))
    loaded = _graph_module_to(saved)
    assert loaded.c.device.type == "tpu" and loaded.d.device.type == "cpu"
    assert loaded(torch.zeros(2, device="tpu")).cpu().tolist() == [3.0, 3.0]
