// Status codes shared by every layer. The numbers equal the C ABI's cohort_status values
// (capi/include/cohort/cohort.h); the list is append-only.
#pragma once

namespace cohort {

enum class Status : int {
  kOk = 0,
  kInvalidArgument = 1,  // a bad value from the caller; nothing changed
  kInvalidHandle = 2,    // NULL, destroyed or wrong-type handle; nothing changed
  kShapeMismatch = 3,    // shapes or dtypes do not agree; nothing changed
  kNotFound = 4,         // unknown operator, name or key; nothing changed
  kIo = 5,               // the file system failed; nothing changed in memory
  kCorrupt = 6,          // a file or message failed verification; nothing was loaded
  kOutOfMemory = 7,      // an allocation failed; the object is unchanged
  kUnsupported = 8,      // valid but not implemented for this dtype/device/configuration
  kInternal = 9,         // a broken invariant in cohort itself; destroy the object
  kPeerFailed = 10,      // a peer died or left; abort the communicator
  kTimeout = 11,         // a wait ran past its deadline; abort the communicator
  kInvalidPlan = 12,     // a parallel plan does not fit the model or the world; rebuild the plan
  kInvalidState = 13,    // a call made in the wrong state (e.g. before a required step)
  kNonFinite = 14,       // a training step met NaN or Inf in its loss or gradients; its update was
                         // skipped: the trainer is as before the step (see Trainer::step)
};

const char* status_name(Status s);

}  // namespace cohort
