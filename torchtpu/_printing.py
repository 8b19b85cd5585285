"""Printing a tpu tensor runs a few ops on the device (abs, masked_select,
isfinite ...). Those still without a lowering run on the CPU; their fallback
warnings would be noise in a print, so they are muted there."""
import functools

import torch._tensor_str as _tensor_str

from . import _C

_original_str = _tensor_str._str


@functools.wraps(_original_str)
def _str(self, *, tensor_contents=None):
    if self.device.type != "tpu":
        return _original_str(self, tensor_contents=tensor_contents)
    _C._set_fallback_quiet(True)
    try:
        return _original_str(self, tensor_contents=tensor_contents)
    finally:
        _C._set_fallback_quiet(False)


_tensor_str._str = _str
