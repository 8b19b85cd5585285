"""RNG state on "tpu": seeds, get/set state, reproducible across runs and
across eager modes."""
import subprocess
import sys

import pytest
import torch

import torchtpu


def draw():
    return torch.cat([torch.rand(5, device="tpu"), torch.randn(5, device="tpu"),
                      torch.nn.functional.dropout(torch.ones(8, device="tpu"), 0.5)]).cpu()


def test_seed_state_roundtrip():
    torch.tpu.manual_seed(123)
    assert torch.tpu.initial_seed() == 123
    a = draw()
    torch.tpu.manual_seed(123)
    assert torch.equal(draw(), a)
    state = torch.tpu.get_rng_state()
    b = draw()
    torch.tpu.set_rng_state(state)
    assert torch.equal(draw(), b)
    states = torch.tpu.get_rng_state_all()
    c = draw()
    torch.tpu.set_rng_state_all(states)
    assert torch.equal(draw(), c)
    torch.manual_seed(123)  # torch.manual_seed seeds the device too
    assert torch.equal(draw(), a)
    torch.tpu.seed()
    assert torch.tpu.initial_seed() != 123 or not torch.equal(draw(), a)


def test_same_draws_in_every_eager_mode():
    results = {}
    for mode in ("strict", "debug", "defer_and_fuse"):
        with torchtpu.eager_mode(mode):
            torch.manual_seed(7)
            results[mode] = draw()
    assert torch.equal(results["strict"], results["debug"])
    assert torch.equal(results["strict"], results["defer_and_fuse"])


def test_reproducible_across_processes():
    code = ("import torch, torchtpu; torch.manual_seed(5); "
            "print(torch.randn(4, device='tpu').cpu().tolist())")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, timeout=120).stdout.strip().splitlines()[-1]
            for _ in range(2)]
    assert outs[0] == outs[1]
    torch.manual_seed(5)
    assert outs[0] == str(torch.randn(4, device="tpu").cpu().tolist())


def _counts(samples, categories):
    return torch.bincount(samples.reshape(-1).cpu(), minlength=categories).double()


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_multinomial_on_the_device(replacement, dtype):
    """multinomial (sampling calls it every token) ran on the CPU fallback.
    On the device: CPU's shapes and dtype, zero-probability categories never
    drawn, no repeats without replacement, and frequencies within 5 sigma of
    the probabilities; the same draws after the same seed."""
    from op_testing import no_fallback

    p = torch.tensor([[0.0, 1.0, 0.0, 3.0, 4.0], [2.0, 0.0, 0.0, 0.0, 6.0]], dtype=dtype)
    with no_fallback():
        torch.manual_seed(3)
        first = torch.multinomial(p.to("tpu"), 3, replacement=replacement)
        torch.manual_seed(3)
        again = torch.multinomial(p.to("tpu"), 3, replacement=replacement)
        one = torch.multinomial(p[1].to("tpu"), 1)
    want = torch.multinomial(p, 3, replacement=replacement)
    assert first.device.type == "tpu" and first.dtype == want.dtype and first.shape == want.shape
    assert torch.equal(first.cpu(), again.cpu())
    assert one.shape == (1,) and one.item() in (0, 4)
    if not replacement:
        # Two nonzero categories in row 1: drawn first, then a zero one.
        rows = first.cpu().tolist()
        assert all(len(set(r)) == 3 for r in rows)
        assert set(rows[0]) == {1, 3, 4} and set(rows[1][:2]) == {0, 4}
    # Frequencies: with replacement from one call; without, over many rows
    # of one sample each (the exponential race draws category k first with
    # probability p_k).
    probs = torch.tensor([0.0, 0.1, 0.0, 0.3, 0.6], dtype=dtype)
    n = 20000
    with no_fallback():
        if replacement:
            s = torch.multinomial(probs.to("tpu"), n, replacement=True)
        else:
            s = torch.multinomial(probs.to("tpu").expand(n, 5), 1)
    counts = _counts(s, 5)
    expected = probs.double() / probs.double().sum() * n
    assert counts[0] == 0 and counts[2] == 0
    sigma = (expected * (1 - expected / n)).sqrt()
    assert ((counts - expected).abs() <= 5 * sigma + 1e-9).all(), (counts, expected)


_MULTINOMIAL_ERRORS = {
    "negative": lambda d: torch.multinomial(torch.tensor([0.5, -1.0, 2.0], device=d), 2, True),
    "nan": lambda d: torch.multinomial(torch.tensor([[1.0, 1.0], [float("nan"), 1.0]], device=d), 2, True),
    "inf": lambda d: torch.multinomial(torch.tensor([1.0, float("inf")], device=d), 2, True),
    "zero_row": lambda d: torch.multinomial(torch.tensor([[1.0, 1.0], [0.0, 0.0]], device=d), 2, True),
    "negative_no_replacement": lambda d: torch.multinomial(torch.tensor([0.5, -1.0, 2.0], device=d), 1),
    "inf_no_replacement": lambda d: torch.multinomial(torch.tensor([1.0, float("inf")], device=d), 2),
    "zero_sum_no_replacement": lambda d: torch.multinomial(torch.zeros(2, 3, device=d), 1),
    "too_many_without_replacement": lambda d: torch.multinomial(torch.ones(3, device=d), 4),
    "no_samples": lambda d: torch.multinomial(torch.ones(3, device=d), 0),
    "three_dims": lambda d: torch.multinomial(torch.ones(2, 2, 2, device=d), 1),
    "integer_probs": lambda d: torch.multinomial(torch.ones(3, dtype=torch.long, device=d), 1),
}


@pytest.mark.parametrize("case", sorted(_MULTINOMIAL_ERRORS))
def test_multinomial_refuses_what_cpu_refuses(case):
    """The same exception and message as CPU, for bad values (read back, as
    CPU and CUDA do) and bad shapes or dtypes."""
    from op_testing import same_as_cpu

    err = same_as_cpu(_MULTINOMIAL_ERRORS[case])
    assert isinstance(err, RuntimeError), err
    try:
        _MULTINOMIAL_ERRORS[case]("cpu")
    except RuntimeError as e:
        # (Debug mode appends where the op was called.)
        assert str(err).splitlines()[0].startswith(str(e).splitlines()[0])
