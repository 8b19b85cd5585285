"""Which OpInfo ops the sweep covers and how their outputs compare; no tpu
needed, so the driver can plan without loading the device."""

# Random ops whose OpInfo carries no "non-deterministic" skip for
# test_compare_cpu but whose values differ between generators anyway.
NONDETERMINISTIC = {"randn", "randint", "nn.functional.alpha_dropout",
                    "normal.number_mean", "empty_strided"}


# The out= check (check.run_out): each of an op's first OUT_SAMPLES samples
# into out tensors of every variant.
OUT_VARIANTS = ("contiguous", "strided", "resized", "wrong_dtype")
OUT_SAMPLES = 3


def op_key(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _compare_cpu_decorators(op):
    """Upstream's decorators of test_compare_cpu (its device-vs-CPU test)
    that apply to every device."""
    for info in op.decorators:
        if getattr(info, "test_name", None) != "test_compare_cpu":
            continue
        if getattr(info, "device_type", None) not in (None, "cpu"):
            continue
        decs = info.decorators if isinstance(info.decorators, (list, tuple)) else [info.decorators]
        yield from decs


def comparability(op):
    """How a sample's outputs count, from upstream's own verdicts:
      "exact"             compared; a difference is a mismatch
      "nondeterministic"  skipped upstream as non-deterministic: shape/dtype only
      "undefined"         skipped upstream as undefined behaviour: compared,
                          a mismatch is unverified, not a failure
      "expected_to_differ" an expectedFailure upstream (devices and CPU
                          are known to disagree): a mismatch or error is
                          unverified, not a failure"""
    reasons, expected = [], False
    for dec in _compare_cpu_decorators(op):
        expected |= getattr(dec, "__name__", "") == "expectedFailure"
        # unittest.skip keeps its reason in a closure cell.
        reasons += [c.cell_contents for c in getattr(dec, "__closure__", None) or ()
                    if isinstance(c.cell_contents, str)]
    reasons = " ".join(reasons).lower()
    if op_key(op) in NONDETERMINISTIC or "non-deterministic" in reasons:
        return "nondeterministic"
    if "undefined" in reasons:
        return "undefined"
    if expected:
        return "expected_to_differ"
    return "exact"


def cpu_pinned(op, dtype, requires_grad):
    """Per sample, the leaf positions (in check.leaves order) of tensors the
    OpInfo creates on the CPU whatever the device (tensor_split's indices,
    CPU index tensors): generated on the meta device, they stay on "cpu".
    None when the meta samples cannot be made or do not line up."""
    import torch
    from .check import leaves
    try:
        samples = list(op.sample_inputs("meta", dtype, requires_grad=requires_grad))
    except Exception:  # noqa: BLE001  (generators that compute values)
        return None
    return [frozenset(i for i, x in enumerate(leaves((s.input, list(s.args), s.kwargs)))
                      if isinstance(x, torch.Tensor) and x.device.type == "cpu")
            for s in samples]
