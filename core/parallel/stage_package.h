// Stage packages: under a pipeline plan, world rank 0 builds every rank's stages (cut, tensor
// rewrite, send/recv nodes, compression) and sends each rank its package; a rank trains from
// what it received and needs no model of its own (FusionLLM's remote autodiff: autodiff runs on
// the rank, over the forward graph it was sent). Schema: stage_package.fbs.
//
// Receiving trusts nothing: the FlatBuffers verifier, then both graph files through
// deserialize_graph (their checksums, shape inference again), then the package against the rank
// and the world that received it and against itself (every parameter of the stage is one of the
// model's, with the same shape; the losses and tied parameters exist): kCorrupt naming what is
// wrong. A package carrying world rank 0's error throws it on every rank, with its status.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/parallel/pipeline.h"
#include "transport/coll/communicator.h"

namespace cohort::parallel {

struct StagePackage {
  std::string error;  // non-empty: world rank 0 failed; the rest is empty
  int status = 0;     // cohort::Status of the error
  int world_size = 0, world_rank = 0;
  std::vector<int64_t> layout;  // layout_fields of the plan made
  std::vector<int> rank_order;
  int pipe_index = 0;
  Graph model;         // the whole model (what checkpoints describe)
  PipelineGraph stage;  // graph, chunk_losses, tied_holders
  std::vector<std::string> recompute;
  std::string stages;  // the partition's description
};

// The package carrying world rank 0's failure to every rank: its message, and its status (an
// Error's; kInternal for any other exception).
StagePackage failed_stage_package(const std::exception& e);

std::vector<uint8_t> encode_stage_package(const StagePackage& package);

// Verifies and rebuilds; world_rank / world_size: the receiver's. Throws as above.
StagePackage decode_stage_package(const uint8_t* data, size_t size, int world_rank, int world_size);

// Collective over world: world rank 0 passes every rank's package (world.size() of them; its
// own is packages[0]) and each rank gets its own, decoded and verified (world rank 0's too: every
// rank trains from bytes that went through the same checks). Throws a package's error.
StagePackage exchange_stage_packages(transport::coll::Communicator& world, const std::vector<StagePackage>* packages);

}  // namespace cohort::parallel
