// Checks of a verified checkpoint manifest (the FlatBuffers verifier checks structure only):
// field ranges and extents (kCorrupt), and whether it belongs to a trainer's model and
// optimizer (kInvalidArgument). Messages start with `what` ("checkpoint '<path>'").
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint/checkpoint_generated.h"
#include "core/exec/trainer.h"

namespace cohort::checkpoint {

struct EntryType {
  DType dtype = DType::kF32;
  Shape shape;
};

// The dtype and shape of a tensor entry whose fields check_fields accepted.
EntryType entry_type(const checkpoint_file::TensorEntry* e, const std::string& what, const char* kind);

// kCorrupt when a field is out of range: unknown dtype or optimizer kind, negative dimension or
// step, an extent beyond data_length or of the wrong length, empty or duplicate names.
void check_fields(const checkpoint_file::Checkpoint* m, uint64_t data_length, const std::string& what);

// kInvalidArgument when the checkpoint is for another model or optimizer kind: names the first
// parameter whose name, dtype or shape differs ("... is for another model: parameter 'fc1.weight'
// has shape [256, 784] there, [128, 784] here"), else reports a different forward graph.
void check_model(const checkpoint_file::Checkpoint* m, const Trainer& trainer, const std::string& what);

// The optimizer state entries of model parameter `name` (model_graph()'s): this rank's, or where
// another pipeline stage holds the parameter, empty tensors of the entries' dtypes (those this
// rank's parameters of its dtype have: the optimizer gives each dtype the same ones).
std::vector<std::pair<std::string, Tensor>> model_state_entries(const Trainer& trainer, optim::Optimizer& opt,
                                                                const std::string& name);

// kInvalidArgument unless the checkpoint's optimizer state names equal `expected` ("<param>/<state>"
// of a fresh optimizer with the trainer's configuration, in order).
void check_state_names(const checkpoint_file::Checkpoint* m,
                       const std::vector<std::pair<std::string, Tensor>>& expected, const std::string& what);

}  // namespace cohort::checkpoint
