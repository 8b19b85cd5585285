"""Eager modes: selection (process-wide, per thread, environment), Debug's
synchronous execution with host-checked indices and errors naming the op
and the user's line, the CPU shadow check, DeferAndFuse's runs (flush
points, dead values, structural caching, compile-flat training, errors at
the flush naming the op), and identical training losses in all modes."""
import copy
import os
import sys
import threading
import warnings

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
    assert torchtpu.get_eager_mode() == "strict"


def test_context_manager_is_per_thread():
    seen = {}
    entered = threading.Event()
    done = threading.Event()

    def other():
        entered.wait(60)
        seen["other"] = torchtpu.get_eager_mode()
        done.set()

    # A daemon with timeouts: a failing assertion must not hang the run.
    t = threading.Thread(target=other, daemon=True)
    t.start()
    with torchtpu.eager_mode("debug"):
        entered.set()
        assert torchtpu.get_eager_mode() == "debug"
        done.wait(60)
    t.join(60)
    assert seen["other"] == "strict"
    assert torchtpu.get_eager_mode() == "strict"
    # Leaving the block returns the thread to the process-wide mode.
    torchtpu.set_eager_mode("defer_and_fuse")
    assert torchtpu.get_eager_mode() == "defer_and_fuse"


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
    # Strict checks on the device: CPU's IndexError at the next host read.
    with pytest.raises(IndexError, match="index out of range in self"):
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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_shadow_accepts_the_meta_kernels_dtype_where_the_cpu_differs(dtype):
    """native_layer_norm's mean and rstd are float32 for bfloat16/float16
    input in PyTorch's meta kernel and on CUDA, and the device follows them;
    the CPU kernel returns the input's dtype. The shadow check compares
    their values instead of failing on the dtype."""
    x = torch.randn(4, 6, 5, dtype=dtype)
    w, b = torch.randn(5, dtype=dtype), torch.randn(5, dtype=dtype)
    ref = torch.ops.aten.native_layer_norm(x, [5], w, b, 1e-5)
    meta = torch.ops.aten.native_layer_norm(x.to("meta"), [5], w.to("meta"), b.to("meta"), 1e-5)
    before = torchtpu.metrics.metrics().get("shadow_checked_ops", 0)
    with torchtpu.eager_mode("debug"), torchtpu.debug.shadow():
        got = torch.ops.aten.native_layer_norm(x.to("tpu"), [5], w.to("tpu"), b.to("tpu"), 1e-5)
    assert torchtpu.metrics.metrics()["shadow_checked_ops"] == before + 1
    assert [t.dtype for t in got] == [t.dtype for t in meta]
    assert ref[1].dtype == dtype and got[1].dtype == torch.float32  # the case checked
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.cpu().float(), r.float(), atol=2e-2, rtol=2e-2)


def test_shadow_accepts_the_meta_kernels_shape_where_the_cpu_differs():
    """Eval-mode native_batch_norm: save_mean/save_invstd are [0] on the CPU
    and [C] in the meta kernel and on CUDA (the device's); the output itself
    is still compared."""
    x, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    ref = torch.ops.aten.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
    meta = torch.ops.aten.native_batch_norm(*(t.to("meta") for t in (x, w, b, rm, rv)),
                                            False, 0.1, 1e-5)
    before = torchtpu.metrics.metrics().get("shadow_checked_ops", 0)
    with torchtpu.eager_mode("debug"), torchtpu.debug.shadow():
        got = torch.ops.aten.native_batch_norm(*(t.to("tpu") for t in (x, w, b, rm, rv)),
                                               False, 0.1, 1e-5)
    assert torchtpu.metrics.metrics()["shadow_checked_ops"] == before + 1
    assert [t.shape for t in got] == [t.shape for t in meta] != [t.shape for t in ref]
    torch.testing.assert_close(got[0].cpu(), ref[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_shadow_checks_norm_backwards_fed_float32_statistics(dtype):
    """The backward gets the device forward's float32 mean/rstd; the CPU
    kernel wants them in the data's dtype, so the reference runs with them
    cast, and the gradients are compared."""
    x = torch.randn(4, 6, 5)
    w = torch.randn(5)
    ref_x = x.clone().requires_grad_()
    torch.nn.functional.layer_norm(ref_x, (5,), w).square().sum().backward()
    torchtpu.set_eager_mode("debug")  # process-wide: the backward thread too
    try:
        with torchtpu.debug.shadow():
            before = torchtpu.metrics.metrics().get("shadow_checked_ops", 0)
            tx = x.to(dtype).to("tpu").requires_grad_()
            y = torch.nn.functional.layer_norm(tx, (5,), w.to(dtype).to("tpu"))
            y.float().square().sum().backward()
            checked = torchtpu.metrics.metrics()["shadow_checked_ops"] - before
    finally:
        torchtpu.set_eager_mode("strict")
    assert checked >= 2  # forward and native_layer_norm_backward at least
    torch.testing.assert_close(tx.grad.cpu().float(), ref_x.grad, atol=0.15, rtol=0.05)


def test_shadow_skips_ops_the_cpu_has_no_kernel_for():
    """aten::_thnn_fused_lstm_cell is CUDA's only: the shadow check has no
    reference, counts the op as skipped, and the device's result stands
    (compared here with the CPU's LSTMCell, which does not use it)."""
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(4, 3)
    x, h, c = torch.randn(2, 4), torch.randn(2, 3), torch.randn(2, 3)
    ref = cell(x, (h, c))
    dev_cell = copy.deepcopy(cell).to("tpu")
    before = torchtpu.metrics.metrics().get("shadow_skipped_ops", 0)
    with torchtpu.eager_mode("debug"), torchtpu.debug.shadow():
        got = dev_cell(x.to("tpu"), (h.to("tpu"), c.to("tpu")))
    assert torchtpu.metrics.metrics()["shadow_skipped_ops"] >= before + 1
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.cpu(), r, atol=1e-5, rtol=1e-5)


def _rank_deficient():
    g = torch.Generator().manual_seed(3)
    return torch.randn(5, 2, generator=g) @ torch.randn(2, 4, generator=g)  # rank 2


def _not_all_spd():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 4, 4, generator=g)
    a = x @ x.mT + 4 * torch.eye(4)
    a[1, 2, 2] = -30.0  # the second matrix fails at its third minor
    return a


_DECOMPOSITIONS = {
    # singular vectors of a repeated (zero) singular value: any rotation
    "svd_rank_deficient": lambda d: torch.linalg.svd(_rank_deficient().to(d), full_matrices=False),
    "svd_full_matrices": lambda d: torch.linalg.svd(_rank_deficient().to(d)).S,
    "svd_values_only": lambda d: torch.linalg.svdvals(_rank_deficient().to(d)),
    # a repeated eigenvalue (1 three times)
    "eigh_repeated": lambda d: torch.linalg.eigh(torch.diag(torch.tensor([1., 1., 1., 3.])).to(d)),
    # a batch element that is not positive-definite: its factor is unspecified
    "cholesky_ex_failing": lambda d: torch.linalg.cholesky_ex(_not_all_spd().to(d)),
}


@pytest.mark.parametrize("case", sorted(_DECOMPOSITIONS))
def test_shadow_compares_decompositions_where_they_are_defined(case):
    """Singular vectors and eigenvectors compare as the matrix they make
    again, and a failed factorization's unspecified factor is left out
    (its info compares); each result is also checked against the CPU
    here."""
    ref = _DECOMPOSITIONS[case]("cpu")
    before = torchtpu.metrics.metrics().get("shadow_checked_ops", 0)
    with torchtpu.eager_mode("debug"), torchtpu.debug.shadow():
        got = _DECOMPOSITIONS[case]("tpu")
    assert torchtpu.metrics.metrics()["shadow_checked_ops"] > before
    if case.startswith("svd_rank"):
        torch.testing.assert_close(got.S.cpu(), ref.S, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close((got.U * got.S.unsqueeze(-2) @ got.Vh).cpu(), _rank_deficient(),
                                   atol=1e-5, rtol=1e-5)
    elif case == "eigh_repeated":
        torch.testing.assert_close(got.eigenvalues.cpu(), ref.eigenvalues)
        torch.testing.assert_close((got.eigenvectors * got.eigenvalues.unsqueeze(-2)
                                    @ got.eigenvectors.mT).cpu(), torch.diag(ref.eigenvalues))
    elif case == "cholesky_ex_failing":
        assert got.info.tolist() == ref.info.tolist() == [0, 3, 0]
        ok = ref.info == 0
        torch.testing.assert_close(got.L.cpu()[ok], ref.L[ok], atol=1e-5, rtol=1e-5)
    else:
        torch.testing.assert_close(got.cpu(), ref, atol=1e-5, rtol=1e-5)


def test_shadow_writes_into_expanded_self_like_the_device():
    """masked_fill_ into an expanded tensor writes every alias of an
    element; the shadow's host copy keeps the aliasing (a dense copy wrote
    each alias apart and disagreed)."""
    base = torch.arange(3.0)
    mask = torch.tensor([[True, False, False]] * 4)
    ref = base.clone().expand(4, 3).masked_fill_(mask, 7.0)
    with torchtpu.eager_mode("debug"), torchtpu.debug.shadow():
        got = base.to("tpu").expand(4, 3).masked_fill_(mask.to("tpu"), 7.0)
    torch.testing.assert_close(got.cpu(), ref)


@pytest.mark.parametrize("op", ["median", "nanmedian", "mode", "kthvalue"])
def test_shadow_accepts_any_index_of_a_tie(op):
    """With ties the index these return is implementation-defined: the
    shadow check compares the input at the device's indices with the CPU's
    values."""
    x = torch.tensor([[2., 1., 2., 2., 3.], [5., 5., 4., 4., float("nan")]])
    fn = {"median": lambda t: t.median(1), "nanmedian": lambda t: t.nanmedian(1),
          "mode": lambda t: t.mode(1), "kthvalue": lambda t: t.kthvalue(3, 1)}[op]
    ref = fn(x)
    with torchtpu.eager_mode("debug"), torchtpu.debug.shadow():
        got = fn(x.to("tpu"))
    torch.testing.assert_close(got.values.cpu(), ref.values, equal_nan=True)
    torch.testing.assert_close(x.gather(1, got.indices.cpu()[:, None])[:, 0], ref.values,
                               equal_nan=True)


def test_shadow_reference_run_warns_nothing_more():
    """An op that warns (an out= tensor resized) warns once, as on the CPU,
    not again from the shadow's CPU run."""
    def run(device):
        out = torch.empty(3, device=device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.arange(0, 5, out=out)
        return [str(w.message).split(" (Triggered internally")[0] for w in caught]
    want = run("cpu")
    with torchtpu.eager_mode("debug"), torchtpu.debug.shadow():
        got = run("tpu")
    assert got == want and len(want) == 1


_CONJ_CASES = {
    "conj_index_select": lambda z, i: torch.index_select(z.conj(), 0, i),
    "neg_index_select": lambda z, i: torch.index_select(z.conj().imag, 0, i),
    "conj_gather": lambda z, i: torch.gather(z.conj(), 0, i[:, None].expand(3, 5)),
    "conj_mul": lambda z, i: z.conj() * 2,
    "hfft": lambda z, i: torch.fft.hfft(z),
}


@pytest.mark.parametrize("shadow", [False, True])
@pytest.mark.parametrize("case", sorted(_CONJ_CASES))
def test_debug_host_copies_of_conjugate_and_negative_views(case, shadow):
    """Debug mode's host copies (index checks, the shadow check) of a view
    with the conjugate or negative bit: copying the view resolved it with a
    clone that debug mode copied again, recursing until the stack ran out
    (a segfault in hfft's shadow check). The bit is now set again on the
    host copy."""
    torch.manual_seed(0)
    z, idx = torch.randn(4, 5, dtype=torch.complex64), torch.tensor([3, 0, 2])
    ref = _CONJ_CASES[case](z, idx)
    with torchtpu.eager_mode("debug"), torchtpu.debug.shadow(shadow):
        got = _CONJ_CASES[case](z.to("tpu"), idx.to("tpu"))
    torch.testing.assert_close(got.cpu().resolve_conj().resolve_neg(),
                               ref.resolve_conj().resolve_neg(), atol=1e-5, rtol=1e-5)


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


def test_training_losses_identical_in_all_modes():
    """Debug runs strict's programs: identical losses. defer_and_fuse hands
    XLA whole runs, and a reduction fused with its producer may sum in
    another order (the bias gradients' sums differed by an ulp on an
    AVX-512 host, identical on others), so its losses agree to float32
    rounding, not bit for bit."""
    torchtpu.set_eager_mode("strict")
    strict, _ = train("tpu", 5, batch_size=4, seq_len=16)
    assert len(set(strict)) == 5  # the loss moves: a real comparison
    for mode in ("debug", "defer_and_fuse"):
        torchtpu.set_eager_mode(mode)  # process-wide: also the autograd thread
        losses, _ = train("tpu", 5, batch_size=4, seq_len=16)
        if mode == "debug":
            assert losses == strict, mode
        else:
            torch.testing.assert_close(torch.tensor(losses), torch.tensor(strict),
                                       rtol=2e-6, atol=0, msg=mode)


# ---- defer_and_fuse ---------------------------------------------------------

def metric(name):
    return torchtpu.metrics.metrics().get(name, 0)


@pytest.fixture
def defer():
    torchtpu.flush()
    torchtpu.set_eager_mode("defer_and_fuse")
    yield
    torchtpu.flush()


def test_defer_records_and_a_host_read_runs_one_program(defer):
    a = torch.randn(3, 5)
    x = a.to("tpu")
    torchtpu.flush()
    execs, syncs = metric("executions"), metric("defer_flush::sync")
    with no_fallback():
        y = (x * 2 + 1).relu()
        z = y.sum(1)
    assert torchtpu.modes.pending_ops() == 4  # mul, add, relu, sum
    assert metric("executions") == execs  # recorded, not run
    torch.testing.assert_close(z.cpu(), ((a * 2 + 1).relu()).sum(1))
    assert torchtpu.modes.pending_ops() == 0
    assert metric("executions") == execs + 1
    assert metric("defer_flush::sync") == syncs + 1
    torch.testing.assert_close(y.cpu(), (a * 2 + 1).relu())  # kept: y is alive


def test_defer_dead_values_are_not_returned(defer):
    x = torch.ones(4, device="tpu")
    torchtpu.flush()
    elided = metric("defer_values_elided")
    t = x + 1
    u = t * 3
    del t  # dies inside the run
    assert u.cpu().tolist() == [6.0] * 4
    assert metric("defer_values_elided") == elided + 1


def test_defer_views_and_in_place_writes(defer):
    a = torch.arange(12.0).reshape(3, 4)
    x = a.to("tpu")
    x[1] += 100
    x.t()[0].mul_(-1)
    v = x[:, 1:3]
    v.add_(0.5)
    a[1] += 100
    a.t()[0].mul_(-1)
    a[:, 1:3].add_(0.5)
    torch.testing.assert_close(x.cpu(), a)
    torch.testing.assert_close(v.cpu(), a[:, 1:3])


def test_defer_same_structure_reuses_the_fused_program(defer):
    def step(x, w):
        return ((x @ w).tanh() * 0.5 + x).sum()

    w = torch.randn(8, 8, device="tpu")
    torchtpu.flush()
    step(torch.randn(4, 8).to("tpu"), w).item()  # the one compile
    compiles = metric("compiles")
    for i in range(3):
        a = torch.randn(4, 8)
        got = step(a.to("tpu"), w).item()
        want = step(a, w.cpu()).item()
        assert abs(got - want) < 1e-4
    assert metric("compiles") == compiles


def test_defer_fallback_op_is_a_barrier(defer):
    a = torch.rand(5) + 0.5
    x = a.to("tpu")
    torchtpu.flush()
    barriers = metric("defer_flush::barrier")
    y = x * 2
    z = torch.special.bessel_j0(y)  # no lowering: runs on the CPU
    torch.testing.assert_close(z.cpu(), torch.special.bessel_j0(a * 2))
    assert metric("defer_flush::barrier") == barriers + 1


def test_defer_data_dependent_op_is_a_barrier(defer):
    a = torch.tensor([0.0, 1.5, 0.0, -2.0])
    x = a.to("tpu")
    torchtpu.flush()
    barriers = metric("defer_flush::barrier")
    with no_fallback():
        idx = torch.nonzero(x * 3)
    assert metric("defer_flush::barrier") == barriers + 1
    assert idx.cpu().tolist() == torch.nonzero(a * 3).tolist()


def test_defer_random_ops_follow_the_seed(defer):
    torch.tpu.manual_seed(7)
    first = torch.rand(6, device="tpu") + torch.randn(6, device="tpu")
    torch.tpu.manual_seed(7)
    torchtpu.set_eager_mode("strict")
    again = torch.rand(6, device="tpu") + torch.randn(6, device="tpu")
    assert first.cpu().tolist() == again.cpu().tolist()


def test_defer_compile_error_is_raised_at_the_flush_naming_the_op(defer):
    x = torch.ones(3, 3, device="tpu")
    torchtpu.flush()
    assert torchtpu._C._override_lowering_for_testing("aten::neg", "!invalid_program")
    try:
        y = x + 1
        z = torch.neg(y)  # recorded without complaint
        w = z * 2
        with pytest.raises(RuntimeError) as info:
            w.cpu()
        assert "deferred op aten::neg" in str(info.value)
        # The op before the failing one took effect, as in Strict mode;
        # what depended on the failure says why it is gone.
        assert y.cpu().tolist() == [[2.0] * 3] * 3
        with pytest.raises(RuntimeError, match="lost.*aten::neg"):
            z.cpu()
    finally:
        torchtpu._C._override_lowering_for_testing(None, "")
        torchtpu._C._eager_cache_clear()
    assert (-(x + 1)).cpu().tolist() == [[-2.0] * 3] * 3


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_lost_contents_read_by_an_op_raise(defer, mode):
    """A tensor whose deferred run failed has no contents: an op reading it
    raises naming why, in either mode, rather than reading zeros."""
    x = torch.ones(3, 3, device="tpu")
    torchtpu.flush()
    assert torchtpu._C._override_lowering_for_testing("aten::neg", "!invalid_program")
    try:
        z = torch.neg(x + 1)
        with pytest.raises(RuntimeError, match="deferred op aten::neg"):
            (z * 2).cpu()
    finally:
        torchtpu._C._override_lowering_for_testing(None, "")
        torchtpu._C._eager_cache_clear()
    torchtpu.set_eager_mode(mode)
    with pytest.raises(RuntimeError, match="lost.*aten::neg"):
        (z + 1).cpu()
    z.fill_(4.0)  # a whole overwrite makes it usable again
    assert (z + 1).cpu().tolist() == [[5.0] * 3] * 3


def test_defer_never_written_storages_are_zeros_made_in_the_run(defer):
    """torch.ones / full / arange / out= write into storages nothing wrote
    yet (empty): the run makes their zeros itself instead of a zero fill
    program per storage, with the results CPU gives; a read of an empty
    storage sees what Strict gives."""
    a = torch.randn(64)
    x = a.to("tpu")
    torchtpu.flush()
    execs = metric("executions")
    with no_fallback():
        ones = torch.ones(64, device="tpu")
        full = torch.full((8, 8), 2.5, dtype=torch.bfloat16, device="tpu")
        rng = torch.arange(5, 69, device="tpu")
        mask = torch.ones(4096, dtype=torch.bool, device="tpu")
        cz = torch.full((4,), 1 + 2j, dtype=torch.complex64, device="tpu")
        half = torch.full((3,), -1.5, dtype=torch.float16, device="tpu")
        none = torch.ones(0, device="tpu")
        out = torch.empty(64, device="tpu")
        torch.mul(x, 3, out=out)
        unset = torch.empty(64, device="tpu") + 1  # reads never-written contents
        y = (x + ones) * rng + out + full.float().sum() + mask.sum()
    assert metric("executions") == execs  # recorded, not run
    torch.testing.assert_close(y.cpu(), (a + 1) * torch.arange(5, 69) + a * 3 + 160.0 + 4096)
    assert metric("executions") == execs + 1  # one program, no zero fills
    assert rng.cpu().tolist() == list(range(5, 69))
    assert cz.cpu().tolist() == [1 + 2j] * 4
    assert half.cpu().tolist() == [-1.5] * 3
    assert none.cpu().shape == (0,)
    torchtpu.set_eager_mode("strict")
    assert unset.cpu().tolist() == (torch.empty(64, device="tpu") + 1).cpu().tolist()
    torchtpu.set_eager_mode("defer_and_fuse")
    # One op alone in a run, its operand made in the run.
    lone = torch.full((5,), 7, dtype=torch.int32, device="tpu")
    assert lone.cpu().tolist() == [7] * 5


def test_defer_failed_op_loses_only_what_depends_on_it(defer):
    """An op of a run that fails at run time (out of memory: topk of a 2**23
    x 2**23 broadcast) raises at the flush naming it; a parameter updated in
    place earlier in the run and an independent value keep their results."""
    n = 2**23
    x = torch.randn(n, device="tpu")
    p = torch.ones(3, device="tpu")
    torchtpu.flush()
    p.add_(1)                                              # before the failure
    bad = torch.topk(x.expand(n, n), 3, dim=1).values      # fails when run
    w = bad.sum() * 2                                      # depends on it
    z = torch.arange(4.0, device="tpu") * 3                # does not
    with pytest.raises(torch.OutOfMemoryError, match="aten::topk"):
        w.item()
    assert p.cpu().tolist() == [2.0, 2.0, 2.0]
    assert z.cpu().tolist() == [0.0, 3.0, 6.0, 9.0]
    with pytest.raises(RuntimeError, match="lost"):
        w.cpu()
    p.add_(1)                                              # the device goes on
    assert p.cpu().tolist() == [3.0, 3.0, 3.0]


@pytest.mark.parametrize("sync", [True, False], ids=["item_each_step", "no_host_sync"])
def test_defer_training_compiles_nothing_after_warmup(defer, sync):
    """50 steps after warm-up: the compile counter stays flat and each step
    runs a small fixed number of programs (with no host sync, the loop
    heuristic finds the step boundary)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    data = [(torch.randn(8, 16).to("tpu"), torch.randint(0, 4, (8,)).to("tpu"))
            for _ in range(4)]
    warmup, steps = 16, 50
    losses, seen = [], []
    for i in range(warmup + steps):
        x, y = data[i % len(data)]
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item() if sync else loss)
        seen.append((metric("compiles"), metric("defer_programs")))
    (c0, p0), (c1, p1) = seen[warmup - 1], seen[-1]
    assert c1 == c0, [c for c, _ in seen]
    per_step = (p1 - p0) / steps
    assert 0 < per_step <= 2, per_step
    losses = [float(v) for v in losses]
    assert losses[-1] < losses[0]
