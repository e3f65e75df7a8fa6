// Element types and reduction operators the collectives understand. The transport knows buffers
// only as (pointer, count, dtype); bf16 and f16 are reduced in fp32.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::transport::coll {

enum class DataType : int { kF32 = 0, kBF16 = 1, kF16 = 2, kI32 = 3, kI64 = 4, kU8 = 5 };
enum class ReduceOp : int { kSum = 0, kAvg = 1, kMax = 2 };

constexpr size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kF32: return 4;
    case DataType::kBF16: return 2;
    case DataType::kF16: return 2;
    case DataType::kI32: return 4;
    case DataType::kI64: return 8;
    case DataType::kU8: return 1;
  }
  return 0;
}

const char* dtype_name(DataType t);
const char* reduce_op_name(ReduceOp op);
// Whether `op` is defined for `t` (avg needs a floating type; u8 is for data movement only).
bool reduce_supported(DataType t, ReduceOp op);

// Registered memory (Communicator::allocate) is read and written in place by collectives moving
// at least this many bytes; smaller ones copy it like any buffer (algo_shared.cpp says why).
constexpr size_t kRegisteredInPlaceBytes = size_t{256} << 10;

}  // namespace cohort::transport::coll
