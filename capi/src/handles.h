// The structs behind the opaque C handles, and conversion of caller tensor descriptions.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "capi/src/guard.h"
#include "core/checkpoint/checkpoint.h"
#include "core/exec/trainer.h"
#include "core/graph/graph.h"
#include "core/optim/optimizer.h"
#include "transport/bootstrap/store.h"
#include "transport/coll/communicator.h"

struct cohort_attrs {
  cohort::Attrs attrs;
};
struct cohort_graph {
  cohort::Graph graph;
};
struct cohort_optimizer {
  cohort::optim::OptimizerConfig config;
};
struct cohort_comm {
  std::shared_ptr<cohort::transport::coll::Communicator> comm;
  // Rank 0 serves the rendezvous store; it must outlive every peer's use of it (peers may still
  // be reading addresses when rank 0's create returns), so the world communicator holds it.
  std::shared_ptr<cohort::transport::Store> store;
};
struct cohort_trainer {
  std::unique_ptr<cohort::Trainer> trainer;
  cohort::checkpoint::CheckpointExtra checkpoint_extra;  // saved with checkpoints (capi/src/checkpoint.cpp)
  // The pipeline stages chosen, as world rank 0 described them at cohort_trainer_create_parallel
  // (empty on other ranks and without pipeline stages): cohort_trainer_pipeline_stages.
  std::string pipeline_stages;
};

namespace cohort::capi {

// A caller's dtype, checked (read as its integer: an unknown value is the caller's mistake).
DType checked_dtype(const cohort_dtype& dtype, const char* arg);
Shape checked_shape(const int64_t* shape, int32_t rank, const char* arg);
// A caller's cohort_device value, checked (kInvalidArgument naming arg for an unknown one).
Device checked_device(int32_t value, const char* arg);
// Validates a caller tensor description (name, dtype, shape, data, bytes) and wraps its memory.
Tensor wrap_ref(const cohort_tensor_ref& ref, const char* arg);
// The checks and wrapping of wrap_ref after the name: dtype, shape, data and byte count, with
// `what` naming the tensor in messages.
Tensor wrap_ref_memory(const cohort_tensor_ref& ref, const std::string& what);
// Binds an array of caller tensors by name; duplicates are an error.
std::map<std::string, Tensor> wrap_refs(const cohort_tensor_ref* refs, int32_t count, const char* arg);

// Checkpoint extras of a trainer handle: the caller's values plus, for a data-parallel trainer,
// the outer state (capi/src/parallel.cpp); and the inverse after a load.
checkpoint::CheckpointExtra checkpoint_extra_for_save(const cohort_trainer& t);
void apply_loaded_checkpoint_extra(cohort_trainer& t, checkpoint::CheckpointExtra extra);

// Checks and converts caller trainer options (NULL = defaults).
TrainerOptions trainer_options_from(const cohort_trainer_options* options);
// Registers a new trainer handle owning `trainer`.
cohort_trainer* make_trainer_handle(std::unique_ptr<Trainer> trainer);

// Creates a handle of type T and registers it; destroy() unregisters and deletes.
template <typename T>
T* make_handle(const char* type) {
  auto* h = new T();
  HandleTable::get().add(h, type);
  return h;
}
template <typename T>
void destroy_handle(T* h, const char* type, const char* arg) {
  if (h == nullptr) return;
  HandleTable::get().check(h, type, arg);
  HandleTable::get().remove(h);
  delete h;
}

}  // namespace cohort::capi
