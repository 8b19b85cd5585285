// Device placement checks shared by the device path, Debug mode and the
// CPU fallback (placement.cpp).
#pragma once

#include <ATen/core/stack.h>

namespace c10 {
class OperatorHandle;
}

namespace torchtpu {

// Raises as CUDA does when the op's tensors live on different devices
// (0-dim CPU scalars, CPU indices and device moves are allowed). Returns
// true when an index list holds CPU indices of a tpu tensor, which
// move_cpu_indices then moves to that tensor's device.
bool check_placement(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> inputs);
void move_cpu_indices(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t num_args);

}  // namespace torchtpu
