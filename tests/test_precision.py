"""Float32 matmul precision: torch.set_float32_matmul_precision and
torch.tpu.precision become StableHLO precision_config on every dot_general
and convolution, in eager, deferred and compiled programs, and a precision
change compiles a new program instead of reusing one built under another.
The CPU plugin computes float32 at every precision, so results are compared
with CPU as usual and the attribute is read from the programs' text
(TORCHTPU_LOG=programs)."""
import os
import re
import subprocess
import sys

import pytest
import torch

import torchtpu

ATTR = re.compile(r"precision_config = \[#stablehlo<precision (\w+)>, #stablehlo<precision (\w+)>\]")


@pytest.fixture(autouse=True)
def _restore_precision():
    saved = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(saved)


def _programs(code, mode="strict"):
    """Runs `code` in a fresh interpreter with TORCHTPU_LOG=programs; returns
    (stdout, [(op line, precision) for every dot_general/convolution])."""
    env = dict(os.environ, TORCHTPU_LOG="programs", TORCHTPU_EAGER_MODE=mode)
    env.pop("TORCHTPU_CACHE_DIR", None)
    r = subprocess.run([sys.executable, "-c", "import torch, torchtpu\n" + code], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    found = []
    for line in r.stderr.splitlines():
        if "stablehlo.dot_general" in line or "stablehlo.convolution" in line:
            m = ATTR.search(line)
            found.append(("convolution" if "convolution" in line else "dot_general",
                          m.group(1) if m else None))
            if m:
                assert m.group(1) == m.group(2), line
    return r.stdout, found


# Each block computes on tpu and on CPU and asserts they agree.
EAGER = r"""
import torch.nn.functional as F
torch.manual_seed(0)
x, w = torch.randn(6, 8), torch.randn(8, 5)
img, k = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
a, b = torch.randn(3, 4, 5), torch.randn(3, 5, 2)
def work(d):
    return [x.to(d) @ w.to(d), F.conv2d(img.to(d), k.to(d), padding=1),
            torch.bmm(a.to(d), b.to(d)), torch.einsum("bij,bjk->bik", a.to(d), b.to(d))]
for p in %r:
    torch.set_float32_matmul_precision(p)
    for g, r in zip(work("tpu"), work("cpu")):
        torch.testing.assert_close(g.cpu(), r, rtol=1e-4, atol=1e-4)
    print("ran", p, flush=True)
"""


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_eager_programs_carry_the_precision_of_each_setting(mode):
    _, found = _programs(EAGER % (["highest", "high", "medium"],), mode)
    kinds = {k for k, _ in found}
    assert kinds == {"dot_general", "convolution"}, found
    assert None not in {p for _, p in found}, found
    # every setting produced its own programs (no reuse across settings)
    assert {p for _, p in found} == {"HIGHEST", "HIGH", "DEFAULT"}, found
    for kind in kinds:
        assert {p for k, p in found if k == kind} == {"HIGHEST", "HIGH", "DEFAULT"}, (kind, found)


def test_precision_change_compiles_a_new_eager_program_and_a_return_reuses_it():
    x = torch.randn(16, 16, device="tpu")
    torch.set_float32_matmul_precision("highest")
    want = (x.cpu() @ x.cpu())
    (x @ x).cpu()

    def misses():
        return torchtpu.metrics.metrics().get("eager_cache_misses", 0)

    m0 = misses()
    torch.testing.assert_close((x @ x).cpu(), want)
    assert misses() == m0  # same setting: the cached program
    torch.set_float32_matmul_precision("high")
    torch.testing.assert_close((x @ x).cpu(), want, rtol=1e-4, atol=1e-4)
    assert misses() == m0 + 1  # a new program for the new precision
    torch.set_float32_matmul_precision("medium")
    (x @ x).cpu()
    assert misses() == m0 + 2
    torch.set_float32_matmul_precision("high")
    (x @ x).cpu()
    assert misses() == m0 + 2  # back to "high": its program again


def test_tpu_precision_context_overrides_for_tpu_only_and_nests():
    torch.set_float32_matmul_precision("highest")
    assert torch.tpu.get_precision() == "highest"
    with torch.tpu.precision("medium"):
        assert torch.tpu.get_precision() == "medium"
        assert torch.get_float32_matmul_precision() == "highest"  # CPU's is untouched
        with torch.tpu.precision("high"):
            assert torch.tpu.get_precision() == "high"
            torch.set_float32_matmul_precision("medium")  # the override still wins
            assert torch.tpu.get_precision() == "high"
        assert torch.tpu.get_precision() == "medium"
    assert torch.tpu.get_precision() == "medium"  # PyTorch's setting from inside
    torch.set_float32_matmul_precision("high")
    assert torch.tpu.get_precision() == "high"
    with pytest.raises(ValueError, match="'fast' is not one of"):
        torch.tpu.precision("fast")
    with pytest.raises(RuntimeError):
        with torch.tpu.precision("medium"):
            raise RuntimeError("boom")
    assert torch.tpu.get_precision() == "high"  # restored on an exception


def test_context_precision_reaches_the_program():
    _, found = _programs(r"""
x = torch.randn(4, 4, device="tpu")
torch.set_float32_matmul_precision("highest")
with torch.tpu.precision("medium"):
    (x @ x).cpu()
(x @ x + 1).cpu()
""")
    assert [p for _, p in found] == ["DEFAULT", "HIGHEST"], found


COMPILED = r"""
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))
x = torch.randn(2, 3, 8, 8)
want = m(x)
mt = m.to("tpu")
f = torch.compile(mt, backend="tpu")
torch.set_float32_matmul_precision("high")
torch.testing.assert_close(f(x.to("tpu")).cpu(), want, rtol=1e-4, atol=1e-4)
torch.set_float32_matmul_precision("medium")
torch.testing.assert_close(f(x.to("tpu")).cpu(), want, rtol=1e-4, atol=1e-4)
torch.set_float32_matmul_precision("high")
torch.testing.assert_close(f(x.to("tpu")).cpu(), want, rtol=1e-4, atol=1e-4)
import torchtpu.metrics as M
print("variants", M.metrics().get("compile_precision_variants", 0))
"""


def test_compiled_graph_follows_a_precision_change_dynamo_cannot_see():
    # "high" -> "medium" leaves Dynamo's global-state guard (allow_tf32)
    # unchanged, so the same compiled graph is called: it must switch
    # programs itself.
    out, found = _programs(COMPILED)
    assert "variants 1" in out, out
    assert {k for k, _ in found} == {"dot_general", "convolution"}, found
    precisions = [p for _, p in found]
    assert "HIGH" in precisions and "DEFAULT" in precisions, found
    assert None not in precisions, found


def test_one_deferred_run_keeps_each_ops_precision():
    # A precision change inside a defer_and_fuse run does not flush it: the
    # fused program holds each op's own module, with the precision it was
    # recorded under.
    out, found = _programs(r"""
import torchtpu
torch.manual_seed(0)
x = torch.randn(8, 8)
xt = x.to("tpu")
torch.tpu.synchronize()
n0 = torchtpu.metrics.metrics().get("defer_flushes", 0)
torch.set_float32_matmul_precision("high")
a = xt @ xt
torch.set_float32_matmul_precision("medium")
b = a @ xt
torch.testing.assert_close(b.cpu(), (x @ x) @ x, rtol=1e-4, atol=1e-4)
print("flushes", torchtpu.metrics.metrics().get("defer_flushes", 0) - n0)
""", mode="defer_and_fuse")
    assert "flushes 1" in out, out
    assert [p for _, p in found][-2:] == ["HIGH", "DEFAULT"], found


@pytest.fixture
def _flush_denormal_restored():
    yield
    torch.set_flush_denormal(False)


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_subnormals_compute_as_cpu_with_flush_denormal_and_move_unchanged(
        mode, _flush_denormal_restored):
    """XLA computes with flush-to-zero and denormals-are-zero (TPU
    hardware's float32): the device's arithmetic on subnormals equals
    CPU's under torch.set_flush_denormal(True), whatever the setting, and
    data movement keeps their bits (README, Numerics that differ)."""
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals, so there is no CPU reference")
    inputs = [torch.tensor([1e-39, -1e-40, 0.0, 1e-30, -3.5, 2e-38]),
              torch.tensor([1e-39, -1e-40, 0.0, 1e-30, -3.5, 2e-38], dtype=torch.bfloat16),
              torch.tensor([1e-310, -4e-320, 0.0, 1e-300, -3.5, 2e-308], dtype=torch.float64),
              # float16's subnormals are normal float32 numbers: they survive
              torch.tensor([1e-6, -6e-8, 0.0, 3e-5, -3.5, 1e-7], dtype=torch.float16)]

    def arith(v):
        return [v > 0, v == 0, v.sign(), v * 1, v.double(), (v * 0.5).double(),
                v.nonzero().flatten(), v.abs().max()]

    with torchtpu.eager_mode(mode):
        for x in inputs:
            t = x.to("tpu")
            for flush in (False, True):
                torch.set_flush_denormal(flush)
                got = [r.cpu() for r in arith(t)]
                moved = [t.clone().cpu(), torch.cat([t, t])[:6].cpu(), t[1:3].cpu(),
                         t.view(2, 3).cpu()]
                torch.set_flush_denormal(True)
                want = arith(x)
                torch.set_flush_denormal(False)
                for g, w in zip(got, want):
                    assert g.dtype == w.dtype and torch.equal(g, w), (x.dtype, flush, g, w)
                for g, w in zip(moved, [x, x, x[1:3], x.view(2, 3)]):
                    assert g.dtype == w.dtype and g.shape == w.shape
                    assert g.view(-1).tolist() == w.reshape(-1).tolist()
                    # the same bits, zero's sign included
                    assert torch.equal(g.view(-1).double().sign(), w.reshape(-1).double().sign())
