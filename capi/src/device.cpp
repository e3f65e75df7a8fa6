// cohort_device_usable, and the check of a caller's device value.
#include <algorithm>
#include <cstring>
#include <string>

#include "capi/src/handles.h"
#include "core/device/device.h"

namespace cohort::capi {

Device checked_device(int32_t value, const char* arg) {
  COHORT_CHECK(value == COHORT_DEVICE_CPU || value == COHORT_DEVICE_CUDA, Status::kInvalidArgument, arg,
               " = ", value, " is not a cohort_device (COHORT_DEVICE_CPU or COHORT_DEVICE_CUDA)");
  return value == COHORT_DEVICE_CUDA ? Device::kCuda : Device::kCpu;
}

}  // namespace cohort::capi

using namespace cohort;
using namespace cohort::capi;

extern "C" {

COHORT_API cohort_status cohort_device_usable(cohort_device device, int32_t* usable_out, char* reason_out,
                                              size_t reason_capacity) {
  return guard("cohort_device_usable", [&] {
    const Device d = checked_device(enum_int(device), "device");
    check_not_null(usable_out, "usable_out");
    const std::string why = device_unavailable_reason(d);
    if (reason_out != nullptr && reason_capacity > 0) {
      const size_t n = std::min(why.size(), reason_capacity - 1);
      std::memcpy(reason_out, why.data(), n);
      reason_out[n] = '\0';
    }
    *usable_out = why.empty() ? 1 : 0;
  });
}

}  // extern "C"
