"""Meta-kernel fixes for ops our device reaches and CUDA-only PyTorch code
paths never stress.

aten::_thnn_fused_lstm_cell (every LSTM step of a tpu input, see
csrc/torch/rnn_meta.cpp) has a Python meta kernel in
torch/_meta_registrations.py that reads `.device` of its optional biases
without checking for None, so any bias=False LSTM fails in it. The C++ glue
registers a correct Meta kernel with the dispatcher (what eager uses); this
drops the Python one from the tables FakeTensor and the Python dispatcher
consult first, so torch.compile reaches the same C++ kernel."""
import torch
from torch._decomp import meta_table

_BROKEN_PYTHON_METAS = (torch.ops.aten._thnn_fused_lstm_cell.default,)


def _drop_python_metas():
    for op in _BROKEN_PYTHON_METAS:
        meta_table.pop(op, None)
        op.py_kernels.pop(torch._C.DispatchKey.Meta, None)
        op._dispatch_cache.clear()


_drop_python_metas()
