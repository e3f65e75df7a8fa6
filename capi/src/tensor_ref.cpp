// Validation of caller-described memory (cohort_tensor_ref) at the boundary.
#include <set>

#include "capi/src/handles.h"

namespace cohort::capi {

DType checked_dtype(const cohort_dtype& value, const char* arg) {
  const int dtype = enum_int(value);
  DType t;
  COHORT_CHECK(dtype_from_int(dtype, &t), Status::kInvalidArgument, arg, " has unknown dtype ", dtype);
  return t;
}

Shape checked_shape(const int64_t* shape, int32_t rank, const char* arg) {
  COHORT_CHECK(rank >= 0 && rank <= 8, Status::kInvalidArgument, arg, ": rank must be 0..8, got ", rank);
  COHORT_CHECK(rank == 0 || shape != nullptr, Status::kInvalidArgument, arg, ": shape is NULL with rank ", rank);
  Shape s(shape, shape + rank);
  for (int64_t d : s)
    COHORT_CHECK(d >= 1 && d <= (int64_t{1} << 40), Status::kInvalidArgument, arg, ": shape ", shape_str(s),
                 " has an extent outside 1..2^40");
  return s;
}

Tensor wrap_ref(const cohort_tensor_ref& ref, const char* arg) {
  std::string name = checked_name(ref.name, str_cat(arg, ".name").c_str());
  return wrap_ref_memory(ref, str_cat(arg, " '", name, "'"));
}

Tensor wrap_ref_memory(const cohort_tensor_ref& ref, const std::string& what) {
  DType t = checked_dtype(ref.dtype, what.c_str());
  Shape s = checked_shape(ref.shape, ref.rank, what.c_str());
  COHORT_CHECK(ref.data != nullptr, Status::kInvalidArgument, what, ": data is NULL");
  size_t need = static_cast<size_t>(shape_numel(s)) * dtype_size(t);
  COHORT_CHECK(ref.bytes == need, Status::kInvalidArgument, what, ": buffer has ", ref.bytes,
               " bytes, but shape ", shape_str(s), " of ", dtype_name(t), " needs ", need);
  return Tensor::wrap(ref.data, s, t);
}

std::map<std::string, Tensor> wrap_refs(const cohort_tensor_ref* refs, int32_t count, const char* arg) {
  COHORT_CHECK(count >= 0 && count <= 4096, Status::kInvalidArgument, "number of ", arg, " must be 0..4096, got ",
               count);
  COHORT_CHECK(count == 0 || refs != nullptr, Status::kInvalidArgument, arg, " is NULL with count ", count);
  std::map<std::string, Tensor> out;
  for (int32_t i = 0; i < count; ++i) {
    std::string a = str_cat(arg, "[", i, "]");
    Tensor t = wrap_ref(refs[i], a.c_str());
    std::string name(refs[i].name);
    COHORT_CHECK(out.count(name) == 0, Status::kInvalidArgument, a, ": '", name, "' is given twice");
    out.emplace(name, t);
  }
  return out;
}

}  // namespace cohort::capi
