"""One OpInfo sample on tpu and on CPU: run, compare, classify.

Outcomes (one per sample):
  pass        outputs (or gradients) match CPU within tolerance
  mismatch    they differ (values, shape or dtype)
  error       tpu raised (CPU did not)
  skip        not comparable: CPU itself raised, or (backward) the sample
              has no differentiable output
  unverified  the op's output is nondeterministic or upstream calls it
              undefined: shape/dtype checked, values not counted as a pass
Whether the tpu run used the CPU fallback is recorded beside the outcome.
"""
import itertools

import torch
import torchtpu

DEVICE = "tpu"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
          "int64": torch.int64, "bool": torch.bool}

# float32 uses torch.testing.assert_close's defaults; bfloat16 is relaxed
# the way upstream's toleranceOverride entries for bfloat16 are (2-3 ulp),
# since XLA may keep intermediates in float32 where CPU rounds each step.
TOLERANCES = {torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


def _map(obj, fn):
    """Applies fn to every leaf of nested lists/tuples/dicts."""
    if isinstance(obj, list):
        return [_map(o, fn) for o in obj]
    if isinstance(obj, tuple):
        items = [_map(o, fn) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, dict):
        return {k: _map(v, fn) for k, v in obj.items()}
    return fn(obj)


def leaves(obj):
    """The leaves of nested lists/tuples/dicts, in _map's order."""
    if isinstance(obj, (list, tuple)):
        return [x for o in obj for x in leaves(o)]
    if isinstance(obj, dict):
        return [x for o in obj.values() for x in leaves(o)]
    return [obj]


def to_device(obj, device, pinned=frozenset()):
    """Tensors copied to `device` as new leaves keeping requires_grad, except
    the leaves at positions `pinned`, which stay on the CPU; device
    arguments ("cpu", torch.device("cpu")) retargeted."""
    position = itertools.count()

    def move(x):
        here = next(position)
        if isinstance(x, torch.Tensor):
            target = "cpu" if here in pinned else device
            return x.detach().to(target).requires_grad_(x.requires_grad)
        if device == DEVICE and (x == "cpu" if isinstance(x, str) else
                                 isinstance(x, torch.device) and x.type == "cpu"):
            return torch.device(DEVICE) if isinstance(x, torch.device) else DEVICE
        return x
    return _map(obj, move)


def _cpu(obj):
    return _map(obj, lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x)


def format_error(exc):
    text = str(exc).strip().splitlines()
    first = next((ln for ln in text if ln.strip()), "")
    return f"{type(exc).__name__}: {first}"[:300]


def _tolerance(dtype, inexact):
    """Tolerances for a value of a sample of `dtype`; exact values use
    assert_close's own (zero for integers and bool)."""
    return TOLERANCES.get(dtype, {}) if inexact else {}


def compare(got, want, dtype, shape_only=False):
    """None when got (moved to CPU) matches want, else a one-line reason."""
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return f"structure differs: {type(got).__name__} vs {type(want).__name__}"
        for i, (g, w) in enumerate(zip(got, want)):
            why = compare(g, w, dtype, shape_only)
            if why:
                return f"[{i}] {why}"
        return None
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"got {type(got).__name__}, want Tensor"
        if got.dtype != want.dtype or got.shape != want.shape:
            return f"got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
        if shape_only:
            return None
        try:
            torch.testing.assert_close(got, want, equal_nan=True, check_device=False,
                                       check_stride=False, check_layout=False,
                                       **_tolerance(dtype, want.is_floating_point()
                                                    or want.is_complex()))
        except AssertionError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            detail = "; ".join(ln for ln in lines if ln.startswith(("Mismatched", "Greatest")))
            return (detail or (lines[0] if lines else "values differ"))[:300]
        return None
    if isinstance(want, (bool, int, float, complex)) and not shape_only:
        try:
            torch.testing.assert_close(got, want, equal_nan=True,
                                       **_tolerance(dtype, isinstance(want, (float, complex))))
        except (AssertionError, TypeError, ValueError) as e:
            return f"scalar {got!r} vs {want!r}: {str(e).splitlines()[0][:100]}"
        return None
    if shape_only or want is None or isinstance(want, (str, torch.dtype, torch.device)):
        return None if (shape_only or got == want) else f"{got!r} vs {want!r}"
    return None if got == want else f"{type(got).__name__} {got!r} vs {want!r}"[:300]


def _fallback_delta(before):
    after = torchtpu.metrics.fallback_counts()
    return sorted(k for k, v in after.items() if v != before.get(k, 0))


def _call(op, sample):
    out = op(sample.input, *sample.args, **sample.kwargs)
    return sample.output_process_fn_grad(out)


def _as_sample(sample, parts):
    inp, args, kwargs = parts
    return type(sample)(inp, args=tuple(args), kwargs=dict(kwargs),
                        output_process_fn_grad=sample.output_process_fn_grad)


def _split(sample, device, pinned=frozenset()):
    parts = (sample.input, list(sample.args), sample.kwargs)
    return _as_sample(sample, to_device(parts, device, pinned))


_UNVERIFIED = {"undefined": "undefined per upstream: ",
               "expected_to_differ": "upstream expects devices to differ from CPU here: "}


def _outcome(why, kind):
    if why is None:
        return ("unverified", "values not compared (nondeterministic op)") \
            if kind == "nondeterministic" else ("pass", "")
    if kind in _UNVERIFIED:
        return "unverified", _UNVERIFIED[kind] + why
    return "mismatch", why


def _error(e, kind):
    if kind == "expected_to_differ":
        return "unverified", _UNVERIFIED[kind] + format_error(e)
    return "error", format_error(e)


def run_forward(op, sample, dtype, kind, pinned=frozenset()):
    """(outcome, message, fallback ops) for one forward sample; `pinned`:
    leaf positions that stay on the CPU (see ops.cpu_pinned)."""
    tpu_sample = _split(sample, DEVICE, pinned)   # copied before CPU may mutate inputs
    cpu_sample = _split(sample, "cpu")
    try:
        want = _cpu(_call(op, cpu_sample))
    except Exception as e:  # noqa: BLE001  (CPU rejects the sample)
        return "skip", "cpu error: " + format_error(e), []
    before = torchtpu.metrics.fallback_counts()
    try:
        got = _cpu(_call(op, tpu_sample))
    except Exception as e:  # noqa: BLE001
        return (*_error(e, kind), _fallback_delta(before))
    used = _fallback_delta(before)
    return (*_outcome(compare(got, want, dtype, kind == "nondeterministic"), kind), used)


def _grads(op, sample, device, seed):
    """Gradients of <outputs, fixed random cotangents> with respect to every
    input that requires grad; None entries where an input is unused."""
    out = _call(op, sample)
    outs = [o for o in leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    ins = [t for t in leaves((sample.input, list(sample.args), sample.kwargs))
           if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs or not ins:
        return None
    g = torch.Generator().manual_seed(seed)
    cots = [torch.randn(o.shape, generator=g, dtype=o.dtype).to(device) for o in outs]
    return list(torch.autograd.grad(outs, ins, cots, allow_unused=True))


def run_backward(op, sample, dtype, kind, pinned=frozenset(), seed=0):
    """(outcome, message, fallback ops) for one gradient sample."""
    tpu_sample = _split(sample, DEVICE, pinned)
    cpu_sample = _split(sample, "cpu")
    try:
        want = _grads(op, cpu_sample, "cpu", seed)
    except Exception as e:  # noqa: BLE001
        return "skip", "cpu error: " + format_error(e), []
    if want is None:
        return "skip", "no differentiable output", []
    before = torchtpu.metrics.fallback_counts()
    try:
        got = _cpu(_grads(op, tpu_sample, DEVICE, seed))
    except Exception as e:  # noqa: BLE001
        return (*_error(e, kind), _fallback_delta(before))
    used = _fallback_delta(before)
    if got is None:
        return "mismatch", "tpu output does not require grad", used
    return (*_outcome(compare(got, want, dtype, kind == "nondeterministic"), kind), used)

