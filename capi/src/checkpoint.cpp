// cohort_trainer_*_checkpoint*: saving and restoring a trainer's whole training state, and the
// named int64 values (a data sampler's position, ...) that travel with its checkpoints. The
// values live in the handle's CheckpointExtra; blobs and tensors that C++ layers put there are
// carried through a load and the next save unchanged.
#include "capi/src/handles.h"

using namespace cohort;
using namespace cohort::capi;

namespace {
constexpr const char* kType = "trainer";

cohort_trainer& handle_of(cohort_trainer* t) { return *checked(t, kType, "trainer"); }
const cohort_trainer& handle_of(const cohort_trainer* t) { return *checked(t, kType, "trainer"); }

}  // namespace

extern "C" {

COHORT_API cohort_status cohort_trainer_save_checkpoint(const cohort_trainer* trainer, const char* path) {
  return guard("cohort_trainer_save_checkpoint", [&] {
    const cohort_trainer& h = handle_of(trainer);
    // A data-parallel trainer's outer state (CO2 anchor, momentum, reduction in flight) goes in too.
    checkpoint::save_checkpoint(*h.trainer, checked_path(path), checkpoint_extra_for_save(h));
  });
}

COHORT_API cohort_status cohort_trainer_load_checkpoint(cohort_trainer* trainer, const char* path) {
  return guard("cohort_trainer_load_checkpoint", [&] {
    cohort_trainer& h = handle_of(trainer);
    const std::string p = checked_path(path);
    checkpoint::CheckpointExtra extra;
    checkpoint::load_checkpoint(*h.trainer, p, &extra);
    apply_loaded_checkpoint_extra(h, std::move(extra));
  });
}

COHORT_API cohort_status cohort_trainer_set_checkpoint_value(cohort_trainer* trainer, const char* name,
                                                             int64_t value) {
  return guard("cohort_trainer_set_checkpoint_value", [&] {
    cohort_trainer& h = handle_of(trainer);
    h.checkpoint_extra.ints[checked_name(name, "name")] = value;
  });
}

COHORT_API cohort_status cohort_trainer_get_checkpoint_value(const cohort_trainer* trainer, const char* name,
                                                             int64_t* value_out) {
  return guard("cohort_trainer_get_checkpoint_value", [&] {
    const cohort_trainer& h = handle_of(trainer);
    const std::string n = checked_name(name, "name");
    check_not_null(value_out, "value_out");
    auto it = h.checkpoint_extra.ints.find(n);
    COHORT_CHECK(it != h.checkpoint_extra.ints.end(), Status::kNotFound, "the trainer has no checkpoint value named '",
                 n, "'");
    *value_out = it->second;
  });
}

}  // extern "C"
