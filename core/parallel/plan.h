// Parallel plan: how a model is spread over the ranks of a communicator. Today this is data
// parallelism only — synchronous DDP, local SGD (with the SlowMo/DiLoCo outer optimizers) and
// CO2 — with ZeRO stages 1-3 for DDP (zero.cpp) and stage 1 of the outer state for local SGD
// and CO2 (outer_shard.cpp).
//
// The one thing to know: local SGD, SlowMo, DiLoCo and CO2 share ONE outer-optimizer rule
// (core/parallel/outer.h); the presets below only choose its constants and the sync mode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort::parallel {

enum class SyncMode : int {
  kSync = 0,      // DDP: gradients averaged every step, in buckets overlapping backward
  kLocalSgd = 1,  // tau inner steps, then a blocking outer step on the averaged pseudo-gradient
  kCo2 = 2,       // tau inner steps; round k's average is applied at the end of round k+1
};

enum class Preset : int { kDdp = 0, kLocalSgd = 1, kSlowMo = 2, kDiLoCo = 3, kCo2 = 4 };

// The outer optimizer, applied to the averaged pseudo-gradient d = anchor - params (see outer.h).
struct OuterConfig {
  double lr = 1.0;        // alpha
  double momentum = 0.0;  // beta
  bool nesterov = false;
  bool staleness_penalty = false;  // CO2 only: scale the stale pseudo-gradient by the gap
  double penalty_constant = 1.0;   // lambda in the gap penalty (>= 0)
  double clip_threshold = 0.0;     // phi: outer momentum L2-norm clip; 0 = off
};

// The tensor axes of the grid data x X x Y x Z (AxoNN, Singh et al. 2024): a linear layer's
// weight is cut over X along its in-features and over Y along its out-features, and consecutive
// layers swap the two roles. Megatron-LM's 1D tensor parallelism (a column-parallel layer, then a
// row-parallel one) is the grid with only Y > 1. core/parallel/tensor_parallel.h.
struct TensorGrid {
  int x = 1, y = 1, z = 1;
  int degree() const { return x * y * z; }
};

struct PlanConfig {
  int data_parallel = 0;  // ranks in the data-parallel group; 0 = the whole world
  SyncMode mode = SyncMode::kSync;
  int64_t tau = 1;  // inner steps per round (localsgd, co2)
  OuterConfig outer;
  int zero_stage = 0;                // 0..3 with kSync; localsgd, co2: 0 or 1 (outer state sharded)
  // localsgd, co2 with an AdamW inner optimizer: each rank normalises its local steps by the
  // second moment expected of the group's averaged gradient, v~ = m^2 + (v - m^2) / N, instead of
  // its own gradient's, so N ranks stepping alone move about as far as one step on the averaged
  // batch would (optim.cpp has the formula). Off in every preset (they reproduce the published
  // methods); measured in README (convergence row).
  bool inner_noise_scaling = false;
  size_t bucket_bytes = 25u << 20;   // DDP gradient bucket size
  // Tensor parallelism: the grid's tensor axes; the data axis (data_parallel, 0 = the rest of the
  // world) runs the data-parallel mode above over each tensor position. Ranks are laid out
  // row-major over (data, x, y, z): z varies fastest. Collectives overlap compute unless
  // overlap_collectives is false (for comparison).
  TensorGrid tensor;
  bool overlap_collectives = true;
};

// A preset's settings (tau as given). localsgd: alpha 1, beta 0 = plain parameter averaging.
// SlowMo: alpha 1, beta 0.5. DiLoCo: alpha 0.7, beta 0.9 Nesterov. CO2: alpha 1, beta 0 (the
// fork's and SlowMo's value up to 16 ranks), penalty on (lambda 1), clip 1.0.
PlanConfig preset(Preset preset, int64_t tau);
const char* mode_name(SyncMode mode);

// Throws kInvalidPlan naming the first bad field (unknown mode, tau < 1, negative lr, momentum
// or threshold, momentum >= 1, data_parallel < 0, bucket_bytes 0, unknown ZeRO stage) and
// kUnsupported for stages 2-3 outside the sync mode (localsgd and co2 take stage 1: their
// outer state sharded).
void validate(const PlanConfig& plan);
// validate() plus the fit with a world of `world_size` ranks: the tensor degree x*y*z and the
// data-parallel degree must divide it and their product equal it (kInvalidPlan naming the
// fields and numbers; a product below the world size is kUnsupported: no other axis exists).
void validate_for_world(const PlanConfig& plan, int world_size);

}  // namespace cohort::parallel
