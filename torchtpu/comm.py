"""Collectives between the tpu devices of this process (``torch.tpu.comm``).

One process drives every local device: ``all_reduce``, ``all_gather`` and
``reduce_scatter`` over one tensor per device (``tpu:0`` .. ``tpu:N-1``, set
``TORCHTPU_NUM_DEVICES`` on the CPU plugin) run as ONE XLA program compiled
for those devices, with the collective inside it: no tensor leaves the
devices. The calls follow ``torch.cuda.nccl`` (a list of tensors, one per
device, in rank order; ``outputs`` defaults to in place for all_reduce) and
take ``torch.distributed.ReduceOp`` values. For one process per device use
the ``tpudist`` process group instead (README: Distributed).
"""

import torch
from torch.distributed import ReduceOp

from . import _C

__all__ = ["all_reduce", "all_gather", "reduce_scatter"]

# tpu_collective_op_t (core/collective.h).
_OPS = {ReduceOp.SUM: 0, ReduceOp.PRODUCT: 1, ReduceOp.MIN: 2, ReduceOp.MAX: 3,
        ReduceOp.AVG: 4}


def _op(op):
    try:
        return _OPS[ReduceOp(op) if not isinstance(op, ReduceOp.RedOpType) else op]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"torch.tpu.comm: unsupported reduce op {op!r} "
                         "(SUM, PRODUCT, MIN, MAX and AVG are)") from None


def _tensors(what, seq):
    if isinstance(seq, torch.Tensor) or not all(isinstance(t, torch.Tensor) for t in seq):
        raise TypeError(f"torch.tpu.comm: {what} should be a sequence of tensors")
    seq = list(seq)
    if not seq:
        raise ValueError(f"torch.tpu.comm: {what} is empty")
    return seq


def _run(kind, op, inputs, outputs, shape):
    """Runs the collective into `outputs` (None: new tensors of `shape`).
    An output that is exactly its storage (and needs no autograd history)
    takes the result buffer itself; any other is written with copy_, so
    views keep their aliasing."""
    n = len(inputs)
    if outputs is not None:
        outputs = _tensors("outputs", outputs)
        if len(outputs) != n:
            raise ValueError(f"torch.tpu.comm.{kind}: {len(outputs)} outputs for {n} inputs")
    results = []
    for i, t in enumerate(inputs):
        o = outputs[i] if outputs is not None else None
        # In place, the inputs' own checks (in the core) name the problem.
        if o is not None and o is not t and (o.device != t.device or o.dtype != t.dtype):
            raise ValueError(f"torch.tpu.comm.{kind}: output {i} is {o.dtype} on {o.device}, "
                             f"input {i} is {t.dtype} on {t.device}")
        if o is not None and o is not t and o.numel() != torch.Size(shape).numel():
            raise ValueError(f"torch.tpu.comm.{kind}: output {i} has {o.numel()} elements, "
                             f"expected {torch.Size(shape).numel()}")
        direct = (o is not None and o.is_contiguous() and o.storage_offset() == 0
                  and o.untyped_storage().nbytes() == o.numel() * o.element_size()
                  and not o.requires_grad)
        results.append(o if direct else torch.empty(shape, dtype=t.dtype, device=t.device))
    _C._collective(kind, op, inputs, results)
    if outputs is None:
        return results
    for o, r in zip(outputs, results):
        if o is r:
            torch.autograd.graph.increment_version(o)  # written behind autograd
        else:
            o.copy_(r.view(o.shape))
    return outputs


def all_reduce(inputs, outputs=None, op=ReduceOp.SUM):
    """Every output becomes the elementwise reduction of all inputs
    (outputs=None: the inputs themselves). Returns the outputs."""
    inputs = _tensors("inputs", inputs)
    return _run("all_reduce", _op(op), inputs, inputs if outputs is None else outputs,
                inputs[0].shape)


def all_gather(inputs, outputs=None):
    """Every output becomes the inputs concatenated along dim 0 in rank
    order (a 0-dim input gathers to [N]); outputs of that many elements may
    have any shape, as NCCL's flat ones. Returns the outputs (new tensors
    when outputs is None)."""
    inputs = _tensors("inputs", inputs)
    s = inputs[0].shape
    shape = (len(inputs) * s[0], *s[1:]) if len(s) else (len(inputs),)
    return _run("all_gather", 0, inputs, outputs, shape)


def reduce_scatter(inputs, outputs=None, op=ReduceOp.SUM):
    """The reduction of all inputs split along dim 0 into N equal blocks:
    output i becomes block i. Returns the outputs (new tensors when outputs
    is None)."""
    inputs = _tensors("inputs", inputs)
    s, n = inputs[0].shape, len(inputs)
    if len(s) == 0 or s[0] % n:
        raise ValueError(f"torch.tpu.comm.reduce_scatter: dim 0 of the inputs "
                         f"({s[0] if len(s) else 'a 0-dim tensor'}) must split into {n} "
                         "equal blocks")
    return _run("reduce_scatter", _op(op), inputs, outputs, (s[0] // n, *s[1:]))
