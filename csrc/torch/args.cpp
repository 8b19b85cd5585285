#include "args.h"

namespace torchtpu {

using c10::TypeKind;

c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (t->kind() == TypeKind::OptionalType) return t->castRaw<c10::OptionalType>()->getElementType();
  return t;
}

ArgClass classify(const c10::Argument& schema_arg) {
  // real_type(): the declared type (ScalarType, Layout...), which type()
  // erases to int.
  c10::TypePtr type = unwrap_optional(schema_arg.real_type());
  switch (type->kind()) {
    case TypeKind::TensorType: return ArgClass::kTensor;
    case TypeKind::NumberType: return ArgClass::kNumber;
    case TypeKind::IntType:
    case TypeKind::SymIntType: return ArgClass::kInt;
    case TypeKind::FloatType: return ArgClass::kFloat;
    case TypeKind::BoolType: return ArgClass::kBool;
    case TypeKind::ScalarTypeType: return ArgClass::kDtype;
    case TypeKind::StringType: return ArgClass::kString;
    case TypeKind::DeviceObjType: return ArgClass::kDevice;
    case TypeKind::ListType: {
      c10::TypePtr elem = type->castRaw<c10::ListType>()->getElementType();
      c10::TypePtr inner = unwrap_optional(elem);
      if (elem->kind() == TypeKind::BoolType) return ArgClass::kBoolList;
      if (elem->kind() == TypeKind::IntType || elem->kind() == TypeKind::SymIntType)
        return ArgClass::kIntList;
      if (inner->kind() == TypeKind::TensorType)
        return elem->kind() == TypeKind::OptionalType ? ArgClass::kOptTensorList
                                                      : ArgClass::kTensorList;
      if (elem->kind() == TypeKind::FloatType || elem->kind() == TypeKind::NumberType)
        return ArgClass::kFloatList;
      return ArgClass::kOther;
    }
    default: return ArgClass::kOther;
  }
}

}  // namespace torchtpu
