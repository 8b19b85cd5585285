"""Eager modes: selection (process-wide, per thread, environment), Debug's
synchronous execution with host-checked indices and errors naming the op
and the user's line, the CPU shadow check, and identical training losses in
strict and debug."""
import os
import sys
import threading

import pytest
import torch

import torchtpu
from op_testing import no_fallback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples"))
from tiny_gpt import train  # noqa: E402

THIS_FILE = os.path.basename(__file__)


@pytest.fixture(autouse=True)
def restore_mode():
    before = torchtpu.get_eager_mode()
    yield
    torchtpu.set_eager_mode(before)
    torchtpu.debug.set_shadow(False)


def test_default_is_strict_and_set_get():
    assert torchtpu.get_eager_mode() == "strict"
    torchtpu.set_eager_mode("debug")
    assert torchtpu.get_eager_mode() == "debug"
    torchtpu.set_eager_mode("strict")
    assert torchtpu.get_eager_mode() == "strict"


def test_bad_modes_raise():
    with pytest.raises(ValueError, match="unknown eager mode 'fast'"):
        torchtpu.set_eager_mode("fast")
    with pytest.raises(TypeError):
        torchtpu.set_eager_mode(1)
    with pytest.raises(NotImplementedError, match="defer_and_fuse"):
        torchtpu.set_eager_mode("defer_and_fuse")
    assert torchtpu.get_eager_mode() == "strict"


def test_context_manager_is_per_thread():
    seen = {}
    entered = threading.Event()
    done = threading.Event()

    def other():
        entered.wait()
        seen["other"] = torchtpu.get_eager_mode()
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with torchtpu.eager_mode("debug"):
        assert torchtpu.get_eager_mode() == "debug"
        entered.set()
        done.wait()
    t.join()
    assert seen["other"] == "strict"
    assert torchtpu.get_eager_mode() == "strict"


def test_environment_selects_the_mode(py):
    r = py("import torch, torchtpu; print(torchtpu.get_eager_mode(), "
           "torchtpu.debug.shadow_enabled())",
           {"TORCHTPU_EAGER_MODE": "debug", "TORCHTPU_DEBUG_SHADOW": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["debug", "True"]
    r = py("import torch, torchtpu; print(torchtpu.get_eager_mode())",
           {"TORCHTPU_EAGER_MODE": "bogus"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["strict"] and "TORCHTPU_EAGER_MODE=bogus" in r.stderr


def test_debug_results_match_cpu():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 5, generator=g), torch.randn(5, 3, generator=g)
    with torchtpu.eager_mode("debug"), no_fallback():
        ta, tb = a.to("tpu"), b.to("tpu")
        out = torch.relu(ta @ tb).sum(0)
        ta.t()[1:3].mul_(2)  # in place through a view
        got, got_a = out.cpu(), ta.cpu()
    expect = torch.relu(a @ b).sum(0)
    a.t()[1:3].mul_(2)
    torch.testing.assert_close(got, expect)
    torch.testing.assert_close(got_a, a)


def test_debug_raises_out_of_range_index_select_at_the_op():
    x = torch.randn(4, 3).to("tpu")
    bad = torch.tensor([0, 7]).to("tpu")
    # Strict does not check: the program clamps, and nothing is raised.
    torch.index_select(x, 0, bad).cpu()
    with torchtpu.eager_mode("debug"):
        with pytest.raises(IndexError) as info:
            torch.index_select(x, 0, bad)  # the line the error must name
    message = str(info.value)
    assert "aten::index_select" in message
    assert f"{THIS_FILE}:" in message
    line = int(message.split(f"{THIS_FILE}:")[1].split()[0].strip(".,)"))
    assert "torch.index_select(x, 0, bad)  # the line" in open(__file__).read().splitlines()[line - 1]


@pytest.mark.parametrize("case", ["gather", "embedding", "index", "scatter"])
def test_debug_checks_indices_like_cpu(case):
    x = torch.randn(4, 3)
    idx = torch.tensor([[0, 5, 1]])

    def run(t, i):
        if case == "gather":
            return torch.gather(t, 0, i)
        if case == "embedding":
            return torch.nn.functional.embedding(i, t)
        if case == "index":
            return t[i[0]]
        return t.scatter(0, i, torch.ones_like(t[:1]))

    with pytest.raises((IndexError, RuntimeError)) as cpu_error:
        run(x, idx)
    with torchtpu.eager_mode("debug"):
        with pytest.raises(type(cpu_error.value)) as tpu_error:
            run(x.to("tpu"), idx.to("tpu"))
    assert "torchtpu debug mode: raised by aten::" in str(tpu_error.value)


def test_shadow_passes_correct_ops_and_counts_them():
    before = torchtpu.metrics.metrics().get("shadow_checked_ops", 0)
    a = torch.randn(6, 4)
    with torchtpu.eager_mode("debug"), torchtpu.debug.shadow():
        t = a.to("tpu")
        y = torch.nn.functional.gelu(t * 3 + 1).softmax(-1)
        y.add_(1)
        y.cpu()
    assert torchtpu.metrics.metrics()["shadow_checked_ops"] >= before + 4


def test_shadow_names_exactly_the_wrong_lowering():
    torchtpu._C._override_lowering_for_testing("aten::mul", "aten::add")
    try:
        a, b = torch.randn(4, 4), torch.randn(4, 4)
        ta, tb = a.to("tpu"), b.to("tpu")
        with torchtpu.eager_mode("debug"), torchtpu.debug.shadow():
            s = ta + tb  # correct ops before and after pass
            with pytest.raises(RuntimeError) as info:
                s * tb
        message = str(info.value)
        assert "shadow check: aten::mul.Tensor output 0 differs from the CPU" in message
        assert "max abs error" in message and "Float[4, 4]" in message
        # Strict runs the wrong lowering silently: that is what shadow finds.
        torch.testing.assert_close((ta * tb).cpu(), a + b)
    finally:
        torchtpu._C._override_lowering_for_testing(None, "")
    torch.testing.assert_close((ta * tb).cpu(), a * b)


def test_training_losses_identical_in_strict_and_debug():
    strict, _ = train("tpu", 5, batch_size=4, seq_len=16)
    with torchtpu.eager_mode("debug"):
        torchtpu.set_eager_mode("debug")  # also the autograd thread
        debug, _ = train("tpu", 5, batch_size=4, seq_len=16)
    assert debug == strict
