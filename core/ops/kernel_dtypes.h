// The dtypes a device kernel takes, declared beside the kernel (OpSchema::kernel_dtypes) so that
// they can be checked without the device: by the kernel's own guard at every call, and by tests
// against the types every graph of the operator infers.
//
// A signature is one letter per input, '>', then one letter per output:
//   T  the call's float type: f32 or bf16, the same for every T of one call
//   F  f32 (statistics a forward saves for its backward, in every storage type)
//   I  i32 (ids, labels, argmax)
//   A  any dtype, moved as bytes; the same for every A of one call
// A letter followed by '*' stands for all remaining slots on its side (variadic inputs or
// outputs, zero or more). Trailing optional inputs a call leaves out are not checked.
// Example: layernorm_grad "TTFFTT>TTT" (x, gamma, mean, rstd, dy[, dx_add]) -> dx, dgamma, dbeta.
#pragma once

#include <string>
#include <vector>

#include "core/tensor/dtype.h"

namespace cohort {

// "" when `inputs` and `outputs` fit `signature`, else the first misfit, e.g. "input 1 has dtype
// i32, expected bf16 like input 0" or "3 outputs, the kernel has 2". A malformed signature is
// reported the same way ("signature 'TX>T': unknown letter 'X'").
std::string kernel_dtype_mismatch(const std::string& signature, const std::vector<DType>& inputs,
                                  const std::vector<DType>& outputs);

}  // namespace cohort
