"""The runtime under the device: plugin selection and its failures, info,
metrics, the CPU fallback policy."""
import os

import pytest
import torch

import torchtpu
from conftest import run_python


def test_plugin_info_reports_identity():
    info = torchtpu.plugin_info()
    assert info["path"].endswith(".so") and os.path.exists(info["path"])
    assert info["platform_name"] == "cpu"
    assert info["attributes"]["xla_version"]
    major, minor = map(int, info["api_version"].split("."))
    assert major == 0 and minor > 0
    devices = torchtpu.devices_info()
    assert len(devices) == torch.tpu.device_count()
    assert devices[0]["kind"] == "cpu"


def test_missing_plugin_raises_then_recovers_in_same_process():
    code = r"""
import os, torch, torchtpu
os.environ["TORCHTPU_PJRT_PLUGIN"] = "/no/such/plugin.so"
assert not torch.tpu.is_available()
try:
    torch.zeros(2, device="tpu")
except RuntimeError as e:
    msg = str(e)
else:
    raise SystemExit("no error")
assert "/no/such/plugin.so" in msg and "cannot be opened" in msg, msg
del os.environ["TORCHTPU_PJRT_PLUGIN"]
assert torch.tpu.is_available()
print(torch.ones(2, device="tpu").cpu().tolist())
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[1.0, 1.0]"


def test_file_that_is_not_a_plugin_raises(tmp_path):
    bogus = tmp_path / "libbogus.so"
    bogus.write_text("not an ELF file")
    for path in (str(bogus), "/bin/ls"):
        r = run_python("import torch, torchtpu\n"
                       "try:\n    torchtpu.runtime.init()\n"
                       "except RuntimeError as e:\n    print('ERR', e)\n",
                       {"TORCHTPU_PJRT_PLUGIN": path})
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("ERR") and path in r.stdout, r.stdout


def test_bad_device_count_env_raises():
    r = run_python("import torch, torchtpu\n"
                   "try:\n    torchtpu.runtime.init()\n"
                   "except RuntimeError as e:\n    print('ERR', e)\n",
                   {"TORCHTPU_NUM_DEVICES": "zero"})
    assert r.returncode == 0, r.stderr
    assert "TORCHTPU_NUM_DEVICES" in r.stdout


def test_info_command_prints_plugin_and_env():
    r = run_python("import runpy; runpy.run_module('torchtpu.info', run_name='__main__')")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "xla_version" in out and "PJRT API" in out and "tpu:0" in out
    for name, *_ in torchtpu.runtime.env_vars():
        assert name in out
    assert "absl" not in r.stderr  # plugin logging stays quiet


def test_info_names_the_plugin_when_its_client_cannot_start():
    """A plugin that loads but whose client cannot be made (here: a device
    count the runtime refuses) still has its PJRT API version and attributes
    printed, with the reason, and info exits 1 at once; a plugin that does
    not load says so."""
    info = "import runpy, sys; sys.exit(runpy.run_module('torchtpu.info', run_name='__main__'))"
    r = run_python(info, {"TORCHTPU_NUM_DEVICES": "0"}, timeout=60)
    assert r.returncode == 1, r.stderr
    out = r.stdout
    assert "the runtime cannot start" in out and "TORCHTPU_NUM_DEVICES" in out
    api = torchtpu._C._plugin_info()["api_version"]
    assert f"PJRT API:      plugin {api}" in out
    assert "stablehlo_current_version = " in out and "xla_cpu_pjrt" in out
    r = run_python(info, {"TORCHTPU_PJRT_PLUGIN": "/nonexistent/libtpu.so"}, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "cannot be opened" in r.stdout and "the plugin does not load either" in r.stdout


# An op the lowering table has no row for: it stays on the CPU fallback.
# (Functional bessel_j0 reaches the backend as its out= overload.)
UNLOWERED = "aten::special_bessel_j0.out"


def test_fallback_is_counted():
    torchtpu.metrics.reset()
    x = torch.tensor([0.0, 1.0, 2.0]).to("tpu")
    before = torchtpu.metrics.fallback_counts().get(UNLOWERED, 0)
    y = torch.special.bessel_j0(x)
    assert torch.equal(y.cpu(), torch.special.bessel_j0(x.cpu()))
    assert torchtpu.metrics.fallback_counts()[UNLOWERED] == before + 1
    assert "fallback::" + UNLOWERED in torchtpu.metrics.report()


def test_fallback_error_policy_names_the_op():
    code = r"""
import torch, torchtpu
x = torch.tensor([0.0, 1.0, 2.0, 3.0]).to("tpu")  # a copy: never a fallback
try:
    torch.special.bessel_j0(x)
except NotImplementedError as e:
    print("ERR", str(e).splitlines()[0])
"""
    r = run_python(code, {"TORCHTPU_FALLBACK": "error"})
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout and "bessel_j0" in r.stdout and "TORCHTPU_FALLBACK" in r.stdout


def test_inline_executions_skip_completion_events_and_stay_exact():
    """A chain of cache-hit tiny ops: the CPU plugin finishes each inside
    Execute, so once the program is trusted its executions skip their
    completion events; results and synchronize are unchanged."""
    x, one = torch.zeros(3), torch.ones(3)
    tx, tone = x.to("tpu"), one.to("tpu")
    before = torchtpu.metrics.metrics().get("executions_without_event", 0)
    with torchtpu.eager_mode("strict"):  # the suite also runs in other modes
        for _ in range(100):
            x = x + one
            tx = tx + tone
        torch.tpu.synchronize()
    assert tx.cpu().tolist() == x.tolist() == [100.0] * 3
    assert torchtpu.metrics.metrics().get("executions_without_event", 0) - before > 50


def test_cache_key_ignores_what_earlier_calls_left_behind():
    """Argument slots are reused between calls: an optional tensor list
    (x[:, idx]) must key the same whatever int list an earlier op passed in
    the same slot, so a cache hit stays a hit and exact. (Engine misses, not
    compiles: the disk cache would serve a spurious miss without one.)"""
    x = torch.randn(3, 4)
    idx = torch.tensor([0, 2])
    tx, tidx = x.to("tpu"), idx.to("tpu")
    with torchtpu.eager_mode("strict"):  # the suite also runs in other modes
        torch.sum(tx, dim=[1, 0])  # compiled before counting
        torch.sum(tx, dim=[0, 1])  # leaves 1 in the second int slot
        tx[:, tidx]  # compiled once here
        torch.tpu.synchronize()  # and the read of its one pending index check
        before = torchtpu.metrics.metrics().get("eager_cache_misses", 0)
        total = torch.sum(tx, dim=[1, 0])  # leaves 0 there instead
        picked = tx[:, tidx]
        torch.tpu.synchronize()
        assert torchtpu.metrics.metrics().get("eager_cache_misses", 0) == before
    torch.testing.assert_close(picked.cpu(), x[:, idx], rtol=0, atol=0)
    torch.testing.assert_close(total.cpu(), x.sum(dim=[1, 0]))


GLOBAL_STATE_CASES = {
    "int true division": lambda a, b: torch.div(a, b),
    "int times float scalar": lambda a, b: a * 2.5,
    "int sqrt": lambda a, b: torch.sqrt(a.abs()),
    "int mean via float": lambda a, b: (a / 3).mean(),
}


@pytest.mark.parametrize("name", sorted(GLOBAL_STATE_CASES))
def test_cached_programs_follow_the_default_dtype(name):
    """The default dtype decides the result type of integer true division
    and of int tensors with float scalars: a program cached under one
    default must never serve the other (it is part of the eager key)."""
    fn = GLOBAL_STATE_CASES[name]
    a = torch.tensor([7, -3, 10, 4])
    b = torch.tensor([2, 2, 3, 8])
    ta, tb = a.to("tpu"), b.to("tpu")
    previous = torch.get_default_dtype()
    try:
        for dtype in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(dtype)
            want, got = fn(a, b), fn(ta, tb)
            assert got.dtype == want.dtype == dtype
            torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    finally:
        torch.set_default_dtype(previous)


def test_cached_programs_follow_deterministic_mode():
    """Deterministic mode is part of the key too (kernels may choose an
    algorithm by it); results match CPU in both settings."""
    x = torch.zeros(5)
    idx = torch.tensor([0, 2, 2, 4])
    v = torch.tensor([1.0, 2.0, 3.0, 4.0])
    previous = torch.are_deterministic_algorithms_enabled()
    try:
        for on in (False, True, False):
            torch.use_deterministic_algorithms(on)
            want = x.clone().index_put_((idx,), v, accumulate=True)
            got = x.to("tpu").index_put_((idx.to("tpu"),), v.to("tpu"), accumulate=True)
            torch.testing.assert_close(got.cpu(), want)
    finally:
        torch.use_deterministic_algorithms(previous)


def test_back_to_back_ops_go_through_the_launch_queue_and_stay_exact():
    """Strict ops arriving back to back run on the launch queue's thread
    (csrc/core/launcher.c): results are handed out pending and filled in
    order. Views, in-place writes through them and a read in mid-stream
    (which waits for that value only) match CPU exactly."""
    from torchtpu import _C
    was = _C._launcher_enabled()
    _C._launcher_set_enabled(True)  # also on a one-CPU host, to test it
    try:
        x, w = torch.randn(64), torch.randn(64)
        tx, tw = x.to("tpu"), w.to("tpu")
        with torchtpu.eager_mode("strict"):  # the suite also runs in other modes
            for _ in range(3):  # compiled (and trusted to run inline) first
                tx * 0.5 + tw
                tx[::3].add_(1.0)
            torch.tpu.synchronize()
            queued = _C._launcher_queued()
            for i in range(300):
                x = x * 0.5 + w
                tx = tx * 0.5 + tw
                if i % 50 == 0:
                    x[::3].add_(1.0)
                    tx[::3].add_(1.0)
                if i == 150:
                    torch.testing.assert_close(tx.cpu(), x, rtol=0, atol=0)
            torch.tpu.synchronize()
            assert _C._launcher_queued() - queued > 300
        torch.testing.assert_close(tx.cpu(), x, rtol=0, atol=0)
    finally:
        _C._launcher_set_enabled(was)


def test_launch_queue_off_runs_every_op_directly():
    code = r"""
import torch, torchtpu
from torchtpu import _C
assert not _C._launcher_enabled()
x = torch.zeros(4, device="tpu")
for _ in range(500):
    x = x + 1
print(_C._launcher_queued(), x.cpu().tolist())
"""
    r = run_python(code, {"TORCHTPU_LAUNCHER": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "[500.0,", "500.0,", "500.0,", "500.0]"]


FORK_CHILD = r"""
import json, os, torch, torchtpu, multiprocessing as mp
x = torch.ones(3, device="tpu")
x.cpu()

def uses():
    return {
        "op": lambda: (x + 1).cpu(), "read": lambda: x.cpu(), "item": lambda: x.sum().item(),
        "factory": lambda: torch.zeros(2, device="tpu"), "upload": lambda: torch.ones(2).to("tpu"),
        "inplace": lambda: x.add_(1), "sync": lambda: torch.tpu.synchronize(),
        "compiled": lambda: torch.compile(lambda t: t * 2, backend="tpu")(x),
    }

def child(q):
    out = {"bad_fork": torch.tpu._is_in_bad_fork(), "cpu": torch.arange(4).sum().item()}
    for name, f in uses().items():
        try:
            f()
            out[name] = "no error"
        except RuntimeError as e:
            out[name] = str(e)
    q.put(out)

class CpuData(torch.utils.data.Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        return torch.full((2,), float(i))

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    res = q.get(timeout=120)
    p.join(60)
    pid = os.fork()  # os.fork too: the child exits with 0 when it raised
    if pid == 0:
        try:
            (x * 3).cpu()
            os._exit(3)
        except RuntimeError as e:
            os._exit(0 if "forked subprocess" in str(e) else 4)
    _, status = os.waitpid(pid, 0)
    # DataLoader workers (fork on Linux) that build CPU tensors keep working
    batches = [b.to("tpu").sum().item() for b in torch.utils.data.DataLoader(
        CpuData(), batch_size=2, num_workers=2, multiprocessing_context="fork")]
    print(json.dumps({"child": res, "exit": p.exitcode, "os_fork": os.waitstatus_to_exitcode(status),
                      "parent": (x * 2).cpu().tolist(), "parent_bad_fork": torch.tpu._is_in_bad_fork(),
                      "loader": batches}))
"""


def test_forked_child_refuses_the_device_as_cuda_does(tmp_path):
    # CUDA: "Cannot re-initialize CUDA in forked subprocess. To use CUDA
    # with multiprocessing, you must use the 'spawn' start method". The
    # child's inherited client would hang at its first wait; every device
    # use raises at once instead, CPU work and the parent carry on.
    import json
    script = tmp_path / "fork_child.py"
    script.write_text(FORK_CHILD)
    r = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')",
                   timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    want = ("Cannot re-initialize TPU in forked subprocess. To use TPU with multiprocessing, "
            "you must use the 'spawn' start method")
    child = out["child"]
    assert child.pop("bad_fork") is True and child.pop("cpu") == 6
    for name, msg in child.items():
        assert want in msg, (name, msg)
    assert out["exit"] == 0 and out["os_fork"] == 0
    assert out["parent"] == [2.0, 2.0, 2.0] and out["parent_bad_fork"] is False
    assert out["loader"] == [2.0, 10.0]


_OVERWRITES = {
    "fill_": (lambda p: p.fill_(3), [3.0, 3.0, 3.0]),
    "zero_": (lambda p: p.zero_(), [0.0, 0.0, 0.0]),
    "copy_tpu": (lambda p: p.copy_(torch.full((3,), 5.0, device="tpu")), [5.0, 5.0, 5.0]),
    "mul_out": (lambda p: torch.mul(torch.ones(3, device="tpu"), 4, out=p), [4.0, 4.0, 4.0]),
    "copy_cpu": (lambda p: p.copy_(torch.full((3,), 6.0)), [6.0, 6.0, 6.0]),
}


@pytest.mark.parametrize("name", sorted(_OVERWRITES))
def test_a_whole_overwrite_repairs_a_tensor_written_from_a_failed_execution(name):
    """p.add_(v) where v's program failed at run time (out of memory: topk of
    a 2**23 x 2**23 broadcast) leaves p raising; an op that overwrites all
    of p (it does not read p) gives it a clean value, and synchronize does
    not raise again what the read raised."""
    n = 2**23
    x = torch.randn(n, device="tpu")
    p = torch.ones(3, device="tpu")
    with pytest.raises(torch.OutOfMemoryError, match="aten::topk"):
        v = torch.topk(x.expand(n, n), 3, dim=1).values[:3, 0]
        p.add_(v)  # debug mode raised at topk already
        p.cpu()
    overwrite, want = _OVERWRITES[name]
    overwrite(p)
    assert p.cpu().tolist() == want
    torch.tpu.synchronize()
    p.add_(1)  # and it is usable
    assert p.cpu().tolist() == [w + 1 for w in want]
    torch.tpu.synchronize()


@pytest.mark.parametrize("case", ["expand_overlap", "expanded_out", "partial_overlap", "self",
                                  "disjoint_halves", "out_is_input"])
def test_fallback_keeps_aliasing_between_written_and_read_arguments(case):
    """An op on the CPU fallback whose written argument shares memory with
    another argument sees them share it on the host too: CPU's overlap
    error where CPU raises one (fuzz seed 934527 found it with bool add_,
    which now runs on the device: special_bessel_j0's out= has no lowering),
    CPU's values otherwise, the untouched part of the storage kept."""
    import warnings

    def run(dev):
        x = torch.tensor([True, False, True, True, False, False]).to(dev)
        f = torch.tensor([0.5, -1.0, 2.0, 0.25]).to(dev)
        j0 = torch.special.bessel_j0
        if case == "expand_overlap":
            x[0].expand(1).add_(x[0])       # the device's own overlap check
        elif case == "expanded_out":
            j0(f[:2], out=f[0].expand(2))
        elif case == "partial_overlap":
            j0(f[:2], out=f[1:3])
        elif case == "self":
            j0(f, out=f)
        elif case == "disjoint_halves":
            j0(f[::2], out=f[1::2])
        else:
            j0(f[:2], out=f[:2])
        return x.cpu(), f.cpu()

    try:
        want = run("cpu")
    except RuntimeError as e:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RuntimeError, match="single memory location"):
                run("tpu")
        assert "single memory location" in str(e)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run("tpu")
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


# An op with a CPU kernel only: on tpu tensors it always takes the fallback
# (every namespace does), whatever the lowering table learns later.
_FB_LIB = torch.library.Library("torchtpu_fallback_test", "DEF")
_FB_LIB.define("scale_add(Tensor x, Tensor y) -> Tensor")
_FB_LIB.impl("scale_add", lambda x, y: x * 3 + y, "CPU")

_STRIDED_FALLBACK = {
    # functional ops: the host arguments keep the device tensors' layout
    "expanded_permuted": lambda x: torch.ops.torchtpu_fallback_test.scale_add(
        x[:, :1].expand(2, 3, 4).permute(2, 0, 1), x[:1, :1, :1]),
    "strided": lambda x: torch.ops.torchtpu_fallback_test.scale_add(
        x.permute(1, 2, 0)[::2], x.permute(1, 2, 0)[1::2]),
    "expanded_both": lambda x: torch.ops.torchtpu_fallback_test.scale_add(
        x[:1].expand(3, 3, 4).transpose(0, 2), x[0, :, :1].t().expand(4, 3).unsqueeze(2)),
    "empty_strided": lambda x: torch.ops.torchtpu_fallback_test.scale_add(
        x[:, :0].expand(2, 0, 4).permute(2, 0, 1), x[:1, :1, :1]),
    # out= resized by the CPU kernel: the device out= takes its layout
    "bessel_j0_resized_out": lambda x: torch.special.bessel_j0(x[0].t(), out=torch.empty(0, device=x.device)),
    "i0_resized_out": lambda x: torch.i0(x[1].permute(1, 0), out=torch.empty(5, device=x.device)),
}


@pytest.mark.parametrize("case", sorted(_STRIDED_FALLBACK))
def test_fallback_results_have_cpu_layout_for_strided_arguments(case):
    """PyTorch's fallback moves an argument to the host with to(cpu), which
    makes an expanded or strided tensor contiguous, so a CPU kernel whose
    result follows its inputs' layout gave other strides than on CPU; an
    out= the kernel resized came back contiguous."""
    import warnings

    def run(dev):
        x = (torch.arange(24.).reshape(2, 3, 4) / 7).to(dev)
        r = _STRIDED_FALLBACK[case](x)
        return r.shape, r.stride(), r.dtype, r.cpu()

    want = run("cpu")
    before = sum(torchtpu.metrics.fallback_counts().values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run("tpu")
    assert sum(torchtpu.metrics.fallback_counts().values()) > before, "no longer on the fallback"
    assert got[:3] == want[:3]
    torch.testing.assert_close(got[3], want[3])
