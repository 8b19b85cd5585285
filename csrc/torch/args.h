// ATen arguments -> the core's tpu_lower_arg_t, one reading for eager
// dispatch and the graph builder. Tensors and tensor lists stay with each
// caller: eager describes storages and views, the graph names values.
#pragma once

#include <ATen/core/function_schema.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "common.h"

extern "C" {
#include "core/lower/lowering.h"
}

namespace torchtpu {

// How one schema argument is read; decided once per operator from its
// declared type, so a cache hit never walks TypePtrs.
enum class ArgClass : uint8_t {
  kTensor, kNumber, kInt, kFloat, kBool, kDtype, kString,
  kBoolList, kIntList, kTensorList, kOptTensorList, kFloatList, kDevice, kOther,
};

c10::TypePtr unwrap_optional(const c10::TypePtr& t);
ArgClass classify(const c10::Argument& schema_arg);
inline bool is_list(ArgClass c) {
  return c == ArgClass::kBoolList || c == ArgClass::kIntList || c == ArgClass::kTensorList ||
         c == ArgClass::kOptTensorList || c == ArgClass::kFloatList;
}
// A tensor, a tensor list or an optional-tensor list (possibly optional).
inline bool holds_tensors(ArgClass c) {
  return c == ArgClass::kTensor || c == ArgClass::kTensorList || c == ArgClass::kOptTensorList;
}

// What converted arguments point into, kept by the caller until the core
// has read them.
struct ArgStore {
  std::deque<std::vector<double>> scalar_lists;
  std::deque<std::string> strings;
  void clear() {
    scalar_lists.clear();
    strings.clear();
  }
};

// v (not None) of class cls, neither a tensor nor a tensor list, into out,
// whose fields are zero. A SCALAR's value goes to out_scalar (16 bytes, as
// out.type.dtype), a SCALARS's to *out_scalars. Returns why the core cannot
// take v, or nullptr. Inline: eager calls it per argument of every op.
inline const char* to_lower_arg(ArgClass cls, const c10::IValue& v, ArgStore& store,
                                tpu_lower_arg_t& out, uint8_t* out_scalar,
                                const double** out_scalars) {
  auto put = [&](tpu_dtype_t dtype, auto value) {
    out.type.dtype = dtype;  // rank 0: zero already
    std::memcpy(out_scalar, &value, sizeof value);
  };
  switch (cls) {
    case ArgClass::kNumber: {
      // A Python number: wrapped, so it does not promote as a tensor does.
      out.kind = TPU_ARG_SCALAR;
      out.wrapped_number = true;
      const c10::Scalar s = v.toScalar();
      if (s.isBoolean()) put(TPU_DTYPE_BOOL, s.toBool());
      else if (s.isIntegral(false)) put(TPU_DTYPE_INT64, s.toLong());
      else if (s.isComplex()) put(TPU_DTYPE_COMPLEX128, s.toComplexDouble());  // lowerings narrow
      else put(TPU_DTYPE_FLOAT64, s.toDouble());
      return nullptr;
    }
    case ArgClass::kInt:
      out.kind = TPU_ARG_INT;
      out.i = v.isSymInt() ? v.toSymInt().expect_int() : v.toInt();
      return nullptr;
    case ArgClass::kFloat:
      out.kind = TPU_ARG_FLOAT;
      out.f = v.toDouble();
      return nullptr;
    case ArgClass::kBool:
      out.kind = TPU_ARG_BOOL;
      out.i = v.toBool();
      return nullptr;
    case ArgClass::kDtype: {
      out.kind = TPU_ARG_DTYPE;
      auto st = static_cast<c10::ScalarType>(v.toInt());
      out.dtype = is_supported_dtype(st) ? to_tpu_dtype(st) : TPU_DTYPE_INVALID;
      return nullptr;
    }
    case ArgClass::kString:
      out.kind = TPU_ARG_STRING;
      store.strings.emplace_back(v.toStringRef());
      out.str = store.strings.back().c_str();
      return nullptr;
    case ArgClass::kBoolList:  // (a backward's output_mask) as 0/1 INTS
    case ArgClass::kIntList: {  // int[] or SymInt[]
      const auto elems = v.toListRef();
      if (elems.size() > TPU_LOWER_MAX_INTS) return "int list too long";
      out.kind = TPU_ARG_INTS;
      for (const c10::IValue& e : elems)
        out.ints[out.num_ints++] =
            e.isInt() ? e.toInt() : e.isBool() ? e.toBool() : e.toSymInt().expect_int();
      return nullptr;
    }
    case ArgClass::kFloatList: {
      out.kind = TPU_ARG_SCALARS;
      std::vector<double>& values = store.scalar_lists.emplace_back();
      for (const auto& e : v.toListRef()) values.push_back(e.toScalar().toDouble());
      out.num_tensors = static_cast<int>(values.size());
      int64_t n = out.num_tensors;
      out.type = tpu_hlo_type_make(TPU_DTYPE_FLOAT64, 1, &n);
      *out_scalars = values.data();
      return nullptr;
    }
    default:  // device, layout, memory format, generator...
      out.kind = TPU_ARG_OTHER;
      return nullptr;
  }
}

}  // namespace torchtpu
