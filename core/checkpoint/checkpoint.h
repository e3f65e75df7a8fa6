// Checkpoints: the whole training state of a Trainer in one file — every parameter, every
// optimizer state tensor (bf16 master copies included), the optimizer's step count, the
// trainer's step and seed (dropout randomness is counter-based on (seed, step), so these two are
// the RNG state) — plus a caller's extra section of named values, blobs and tensors.
//
// The one thing to know: loading verifies everything (lengths, checksums, structure, the model
// fingerprint, every dtype and shape) into staged copies before it touches the trainer; a
// rejected file changes nothing. Saving is atomic: the previous file survives a crash or error.
// The file layout is described in core/checkpoint/format.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/exec/trainer.h"

namespace cohort::checkpoint {

// The caller's section of a checkpoint. Names are non-empty and unique within each map. Tensors
// are CPU tensors of any dtype (saved contiguous; loaded as new contiguous tensors).
struct CheckpointExtra {
  std::map<std::string, int64_t> ints;                   // e.g. a sampler's position
  std::map<std::string, std::vector<uint8_t>> blobs;     // opaque bytes
  std::map<std::string, Tensor> tensors;                 // e.g. CO2's anchor parameters
};

// Writes trainer's state and extra to path atomically: a temporary file in the same directory
// is written, fsync'ed and renamed over path, then the directory is fsync'ed. Throws kIo naming
// the path, the failing call and strerror (path then holds its previous contents, if any);
// kInvalidArgument for a bad extra entry (empty name, undefined or non-CPU tensor).
void save_checkpoint(const Trainer& trainer, const std::string& path, const CheckpointExtra& extra);

// Restores trainer from path; extra_out (may be null) receives the extra section, replacing its
// contents. Everything is verified before the trainer or extra_out changes. Throws, with
// messages starting "checkpoint '<path>'":
//   kIo              the file cannot be opened or read;
//   kCorrupt         truncated or corrupted: bad magic, length, checksum, structure or field;
//   kUnsupported     written by a newer format version;
//   kInvalidArgument a valid checkpoint for another model (parameter names, dtypes or shapes,
//                    or the forward graph differ) or another optimizer configuration (its state
//                    tensors differ). The file is intact, the trainer is the wrong one.
// After load, stats().grad_norm reads 0 until the next step (it is not part of the state).
void load_checkpoint(Trainer& trainer, const std::string& path, CheckpointExtra* extra_out);

// The model fingerprint stored in checkpoints of this trainer: a 64-bit hash of the serialized
// forward graph and of every parameter's name, dtype and shape.
uint64_t model_fingerprint(const Trainer& trainer);

}  // namespace cohort::checkpoint
