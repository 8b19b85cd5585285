"""Meta-kernel fixes for ops our device reaches and CUDA-only PyTorch code
paths never stress.

aten::_thnn_fused_lstm_cell (every LSTM step of a tpu input, see
csrc/torch/rnn_meta.cpp) has a Python meta kernel in
torch/_meta_registrations.py that reads `.device` of its optional biases
without checking for None, so any bias=False LSTM fails in it. The C++ glue
registers a correct Meta kernel with the dispatcher (what eager uses); this
drops the Python one from the tables FakeTensor and the Python dispatcher
consult first, so torch.compile reaches the same C++ kernel.

aten::_grouped_mm's Python meta kernel repeats CUDA's checks (bfloat16
inputs only) for every device but the CPU. transformers routes a MoE's
experts on "tpu" to torch.nn.functional.grouped_mm under torch.compile
for every dtype (its integrations/moe.py), as eager here runs it (the
composite kernel, a product per group), so Dynamo's fake pass failed
float32 Mixtral and Qwen3-MoE. For tpu tensors the meta kernel keeps the
shape rules and takes any floating dtype both operands share; the
compiled graph decomposes the op (torchtpu._compile._grouped_mm)."""
import torch
from torch._decomp import meta_table

_BROKEN_PYTHON_METAS = (torch.ops.aten._thnn_fused_lstm_cell.default,)


def _drop_python_metas():
    for op in _BROKEN_PYTHON_METAS:
        meta_table.pop(op, None)
        op.py_kernels.pop(torch._C.DispatchKey.Meta, None)
        op._dispatch_cache.clear()


_drop_python_metas()

_GROUPED_MM = torch.ops.aten._grouped_mm.default


def _grouped_mm_meta(base):
    from torch._meta_registrations import _create_grouped_mm_output_tensor

    def meta(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
        # FakeTensor runs meta kernels with its tensors reporting "meta";
        # the device they stand for is their fake_device.
        if getattr(mat_a, "fake_device", mat_a.device).type != "tpu":
            return base(mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)
        torch._check(mat_a.dtype == mat_b.dtype and mat_a.dtype.is_floating_point,
                     lambda: f"grouped_mm: expected floating inputs of one dtype, got "
                             f"mat_a.dtype={mat_a.dtype} and mat_b.dtype={mat_b.dtype}")
        torch._check(mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3),
                     lambda: f"Multiplicands must be 2D or 3D but got mat_a.dim()={mat_a.dim()} "
                             f"and mat_b.dim()={mat_b.dim()}")
        torch._check(mat_a.size(-1) == mat_b.size(-2),
                     lambda: "contraction dimension of mat_a and mat_b must match")
        ragged = mat_a.dim() == 2 or mat_b.dim() == 2
        torch._check(ragged == (offs is not None),
                     lambda: "offsets are required for a 2D operand and not allowed otherwise")
        if offs is not None:
            torch._check(offs.dim() == 1 and offs.dtype == torch.int32,
                         lambda: "offsets must be a 1D int32 tensor")
        torch._check(bias is None, lambda: "grouped_mm: bias is not supported")
        return _create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)

    return meta


def _register_grouped_mm_meta():
    base = meta_table.get(_GROUPED_MM)
    if base is None:
        return
    meta = _grouped_mm_meta(base)
    meta_table[_GROUPED_MM] = meta
    _GROUPED_MM.py_kernels.pop(torch._C.DispatchKey.Meta, None)
    _GROUPED_MM.py_impl(torch._C.DispatchKey.Meta)(meta)
    _GROUPED_MM._dispatch_cache.clear()


_register_grouped_mm_meta()
