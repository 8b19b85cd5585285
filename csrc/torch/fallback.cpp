// CPU fallback for ops without a tpu lowering: copy inputs to the CPU, run
// PyTorch's CPU kernel, copy results back. Counted per op in the metrics
// ("fallback::aten::<op>"), warned once per op, or refused with
// TORCHTPU_FALLBACK=error.
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <mutex>
#include <string>
#include <unordered_set>

#include "common.h"

extern "C" {
#include "core/env.h"
#include "core/metrics.h"
}

namespace torchtpu {

namespace {
thread_local int t_quiet_depth = 0;
std::mutex g_warned_lock;
std::unordered_set<std::string> g_warned;
}  // namespace

// Printing a tensor runs a handful of ops (abs, masked_select, ...) whose
// fallback warnings would only be noise to the user; Python mutes them there.
void set_fallback_quiet(bool quiet) { t_quiet_depth += quiet ? 1 : -1; }

namespace {

enum class Policy { kWarn, kSilent, kError };

Policy policy() {
  static const Policy value = [] {
    std::string text = tpu_env_get("TORCHTPU_FALLBACK");
    if (text == "error") return Policy::kError;
    if (text == "silent") return Policy::kSilent;
    return Policy::kWarn;
  }();
  return value;
}

}  // namespace

bool try_run_on_device(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Every op without its own kernel lands here: the lowering table first,
// then the CPU.
void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (try_run_on_device(op, stack)) return;
  cpu_fallback(op, stack);
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.schema().operator_name();
  std::string full = name.name;
  if (!name.overload_name.empty()) full += "." + name.overload_name;
  Policy p = policy();
  TORCH_CHECK_NOT_IMPLEMENTED(
      p != Policy::kError, "torchtpu: ", full,
      " has no tpu lowering and TORCHTPU_FALLBACK=error forbids running it on "
      "the CPU");
  tpu_metrics_add(("fallback::" + full).c_str(), 1);
  if (p == Policy::kWarn && t_quiet_depth == 0) {
    bool first;
    {
      std::lock_guard<std::mutex> guard(g_warned_lock);
      first = g_warned.insert(full).second;
    }
    if (first)
      TORCH_WARN("torchtpu: ", full,
                 " has no tpu lowering yet; running it on the CPU (this "
                 "copies its tensors to the host and back)");
  }
  at::native::cpu_fallback(op, stack);
}

namespace {
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}
}  // namespace
}  // namespace torchtpu
