#include "unsigned_ops.h"

#include <string.h>

/* Base names (no overload, no trailing in-place '_') CPU computes for
 * uint16/32/64, checked against the 2.13 wheel op by op (tests/test_dtypes.py
 * compares each with CPU). Kept short on purpose: an op missing here is only
 * slower (it runs on the CPU fallback), an op wrongly here would compute
 * where CPU raises. */
static const char* const kAllowed[] = {
    "copy", "_to_copy", "clone", "fill", "zero", "cat", "stack", "where", "index",
    "mul", "div", "eq", "ne", "bitwise_and", "bitwise_or", "bitwise_xor",
    "sum", "nansum", "prod", "cumsum", "cumprod", "any", "all",
    "isnan", "isinf", "isfinite", "signbit",
    /* float results: CPU converts the operand to float first */
    "sqrt", "rsqrt", "exp", "log", "sin", "cos", "tanh", "sigmoid", "reciprocal",
};

bool tpu_unsigned_op_allowed(const char* s, size_t n, const tpu_lower_arg_t* args,
                             int num_args) {
  bool found = false;
  for (size_t i = 0; i < sizeof kAllowed / sizeof kAllowed[0] && !found; i++)
    found = strlen(kAllowed[i]) == n && memcmp(kAllowed[i], s, n) == 0;
  if (!found) return false;
  /* div with rounding_mode 'trunc' / 'floor' raises on CPU. */
  if (n == 3 && memcmp(s, "div", 3) == 0)
    for (int i = 0; i < num_args; i++)
      if (args[i].kind == TPU_ARG_STRING) return false;
  return true;
}
