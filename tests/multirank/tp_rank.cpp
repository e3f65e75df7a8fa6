// One rank of a tensor-parallel run under cohort-run (core/parallel/tensor_parallel.h), checked
// against the single-process reference computed in the same program on the same global batch
// (tests/unit/core/parallel/tp_reference.h, which derives and prints the fp32 tolerance). Usage:
//   tp_rank gpt | mlp [-xN] [-yN] [-zN] [-nooverlap] [-ckpt]   the tensor grid X x Y x Z (default:
//                        Megatron 1D over the whole world, tensor_y = world); the rest of the world
//                        is the data axis (DDP); each data replica's Z ranks are fed consecutive
//                        rows; -seq / -a2a: Megatron's / all-to-all sequence parallelism over Y (gpt);
//                        -ckpt: with activation checkpointing (gpt), also checked against
//                        the same grid without it: a lower peak of activation bytes, and at 2
//                        tensor ranks the same parameters bit for bit
//                        -pN: N pipeline stages (1F1B, 2N micro-batches, at most the rows) before the tensor axes
//                        -fence: OP-Fence over the measured links (fence.h): the world one pipeline,
//                        uncompressed (equal links here), checked like -pN
//                        Under -pN and -fence only world rank 0 builds the model: the others pass
//                        none and train the stages it sends them (stage_package.h)
//                        -zeroN: ZeRO stage N over the data axis, in 256-byte buckets (several
//                        per rank: stage 3 gathers and releases them one by one); at stage 3 also
//                        the per-rank parameter memory bounded (the shard: 1/data of the rank's
//                        blocks), a resume from per-rank checkpoints matching the uninterrupted run
//                        bit for bit, and rank 0's file loading on one process with the gathered
//                        whole parameters (every stage's under -pN), bit for bit
//   tp_rank gpt-kill | mlp-kill   the last rank dies mid-run: every survivor must fail with
//                        kPeerFailed / kTimeout naming its world rank, within the deadline
// Each rank initialises with a different seed: the tensor axis takes its first rank's seed and
// the data axis broadcasts its first replica's parameters, so any divergence here is a bug.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "core/base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/parallel_trainer.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/workload.h"
#include "tests/multirank/kill_check.h"
#include "tests/unit/core/parallel/tp_reference.h"
#include "transport/bootstrap/env.h"
#include "transport/coll/ucx_communicator.h"

using namespace cohort;
namespace coll = cohort::transport::coll;

namespace {
constexpr int64_t kSteps = 4;
constexpr int64_t kRows = 4;  // rows per rank (of each data replica's Z ranks) and step

struct Mode {
  std::string model;
  int x = 1, y = 0, z = 1;  // y 0: the world / (x z p)
  int pipe = 1;             // pipeline stages (1F1B, 2 micro-batches per stage)
  bool overlap = true;
  bool kill = false;
  bool checkpointing = false;
  bool fence = false;
  int zero = 0;             // ZeRO stage over the data axis
  parallel::SequenceParallel sequence = parallel::SequenceParallel::kNone;  // over Y
};

Mode parse(const std::string& s) {
  Mode m;
  size_t dash = s.find('-');
  m.model = s.substr(0, dash);
  COHORT_CHECK(m.model == "gpt" || m.model == "mlp", Status::kInvalidArgument, "unknown model '", m.model, "'");
  while (dash != std::string::npos) {
    const size_t next = s.find('-', dash + 1);
    const std::string part = s.substr(dash + 1, next == std::string::npos ? std::string::npos : next - dash - 1);
    if (part == "nooverlap") m.overlap = false;
    else if (part == "kill") m.kill = true;
    else if (part == "ckpt") m.checkpointing = true;
    else if (part == "fence") m.fence = true;
    else if (part == "seq") m.sequence = parallel::SequenceParallel::kMegatron;
    else if (part == "a2a") m.sequence = parallel::SequenceParallel::kAllToAll;
    else if (part.size() > 4 && part.compare(0, 4, "zero") == 0) m.zero = std::stoi(part.substr(4));
    else if (part.size() > 1 && part[0] == 'x') m.x = std::stoi(part.substr(1));
    else if (part.size() > 1 && part[0] == 'y') m.y = std::stoi(part.substr(1));
    else if (part.size() > 1 && part[0] == 'z') m.z = std::stoi(part.substr(1));
    else if (part.size() > 1 && part[0] == 'p') m.pipe = std::stoi(part.substr(1));
    else COHORT_CHECK(false, Status::kInvalidArgument, "unknown mode part '", part, "'");
    dash = next;
  }
  return m;
}

parallel::TensorGrid grid_of(const Mode& m, int world) {
  parallel::TensorGrid g;
  g.x = m.x;
  g.z = m.z;
  g.y = m.y == 0 ? world / (m.x * m.z * m.pipe) : m.y;
  return g;
}

std::unique_ptr<Trainer> make(const Mode& m, const std::shared_ptr<coll::Communicator>& comm) {
  parallel::PlanConfig plan = parallel::preset(parallel::Preset::kDdp, 1);
  plan.tensor = grid_of(m, comm->size());
  plan.overlap_collectives = m.overlap;
  plan.activation_checkpointing = m.checkpointing;
  plan.sequence_parallel = m.sequence;
  plan.pipeline.stages = m.pipe;
  plan.pipeline.micro_batches = m.pipe > 1 ? static_cast<int>(std::min<int64_t>(2 * m.pipe, kRows)) : 1;
  if (m.pipe > 1 && !m.fence) {
    // Cut where the stages' FLOPs balance, the same on every machine: the estimator's timed balance
    // once left a stage of the small MLP with the loss alone on a loaded fresh machine (no
    // parameter of it for the tensor axis to split), which these checks are not about.
    const Graph model = test::tp_model(m.model, kRows);
    std::vector<double> flops;
    for (const parallel::NodeWork& w : parallel::count_node_work(model)) flops.push_back(w.flops);
    const parallel::PipelineStages cut = parallel::cut_pipeline_stages(model, m.pipe, flops);
    for (size_t k = 1; k < cut.begin.size(); ++k) plan.pipeline.cuts.push_back(model.nodes()[cut.begin[k]].name);
  }
  plan.fence.enabled = m.fence;
  plan.fence.compression = false;
  plan.zero_stage = m.zero;
  if (m.zero > 0) plan.bucket_bytes = 256;
  TrainerOptions o;
  o.seed = 1 + static_cast<uint64_t>(comm->rank());
  o.num_threads = 1;
  // A pipeline's stages come from world rank 0: the other ranks have no model to give.
  const bool receives = m.pipe > 1 && comm->rank() != 0;
  return parallel::make_parallel_trainer(receives ? Graph() : test::tp_model(m.model, kRows), test::tp_optimizer(), o,
                                         plan, comm, nullptr, [&](const std::string& text) {
                                           if (m.fence) std::printf("%s", text.c_str());
                                         });
}

// The same grid and batches without activation checkpointing: the checkpointed run `with` must
// hold fewer activation bytes at its peak and, at 2 tensor ranks (whose all-reduce adds two
// partial sums: one order), end with the same parameters bit for bit; at more ranks the
// recomputed all-reduce may sum in another order, so only the reference bound above holds.
bool compare_without_checkpointing(Mode m, const std::shared_ptr<coll::Communicator>& comm, int slice, Trainer& with) {
  m.checkpointing = false;
  const int tensor = grid_of(m, comm->size()).degree();
  auto plain = make(m, comm);
  for (int64_t s = 0; s < kSteps; ++s) plain->step(test::tp_batch(m.model, s, slice * kRows, kRows));
  double max_diff = 0;
  for (size_t i = 0; i < plain->parameters().size(); ++i) {
    const Tensor& a = plain->parameters()[i];
    const Tensor& b = with.parameters()[i];
    for (int64_t k = 0; k < a.numel(); ++k)
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(a.data<float>()[k] - b.data<float>()[k])));
  }
  const size_t peak_with = with.stats().peak_activation_bytes, peak_without = plain->stats().peak_activation_bytes;
  const bool ok = peak_with < peak_without && (tensor != 2 || max_diff == 0);
  std::printf("rank %d: activation checkpointing: peak activation bytes %zu, without %zu (%.2f); max |param - "
              "unchecked run's| %.3g -> %s\n",
              comm->rank(), peak_with, peak_without,
              static_cast<double>(peak_with) / static_cast<double>(peak_without), max_diff, ok ? "ok" : "MISMATCH");
  return ok;
}

// ZeRO 3's shard memory over the data axis (tp_reference.h), run right after the steps, before
// anything gathers the parameters.
bool check_zero3_memory(Trainer& t, int data, int rank, bool gpt) {
  const test::Zero3Memory m = test::zero3_memory(t, data, gpt);
  std::printf("rank %d: %s\n", rank, m.describe().c_str());
  return m.ok;
}

// Every whole parameter of the model (tp_whole_model), ZeRO 3's shards gathered first (a
// collective: every rank calls it alike).
std::map<std::string, Tensor> whole_parameters(Trainer& t) {
  t.gather_parameters();
  return test::tp_whole_model(t);
}

bool same_bits(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.nbytes() != t.nbytes() || std::memcmp(it->second.raw(), t.raw(), t.nbytes()) != 0)
      return false;
  }
  return true;
}

// ZeRO 3 on the grid: stopped half-way and resumed from per-rank checkpoints (the whole model
// and this rank's optimizer shard), the run must match the uninterrupted one bit for bit; rank
// 0's file loads on one process with the whole parameters the grid gathered at the save.
bool check_zero3_resume(const Mode& m, const std::shared_ptr<coll::Communicator>& comm, int slice) {
  const int64_t stop = kSteps / 2;
  const std::string path = "/tmp/cohort_tp_zero3_" + std::to_string(getppid()) + "_" + std::to_string(comm->rank());
  std::map<std::string, Tensor> at_save, straight;
  {
    auto t = make(m, comm);
    for (int64_t s = 0; s < kSteps; ++s) {
      if (s == stop) {
        checkpoint::CheckpointExtra extra;
        dynamic_cast<parallel::DataParallel&>(*t->step_hook()).save_state(extra);
        checkpoint::save_checkpoint(*t, path, extra);
        at_save = whole_parameters(*t);
      }
      t->step(test::tp_batch(m.model, s, slice * kRows, kRows));
    }
    straight = whole_parameters(*t);
  }
  auto t = make(m, comm);
  checkpoint::CheckpointExtra extra;
  checkpoint::load_checkpoint(*t, path, &extra);
  dynamic_cast<parallel::DataParallel&>(*t->step_hook()).load_state(extra);
  for (int64_t s = stop; s < kSteps; ++s) t->step(test::tp_batch(m.model, s, slice * kRows, kRows));
  const bool resumed = same_bits(whole_parameters(*t), straight);
  bool alone_ok = true;
  if (comm->rank() == 0) {
    TrainerOptions o;
    o.num_threads = 1;
    Trainer alone(test::tp_model(m.model, kRows), test::tp_optimizer(), o);
    checkpoint::load_checkpoint(alone, path, nullptr);
    std::map<std::string, Tensor> loaded;
    for (size_t i = 0; i < alone.parameters().size(); ++i) loaded[alone.parameter_names()[i]] = alone.parameters()[i];
    alone_ok = same_bits(loaded, at_save) && alone.step_count() == stop;
  }
  comm->barrier()->wait();  // every rank has read what it needs before the files go
  std::remove(path.c_str());
  std::printf("rank %d: ZeRO 3 resumed run %s the uninterrupted one%s\n", comm->rank(),
              resumed ? "matches bit for bit" : "DIFFERS from",
              comm->rank() == 0 ? (alone_ok ? "; rank 0's file loads on one process bit for bit" : "; rank 0's file "
                                              "loads on one process DIFFERENTLY") : "");
  return resumed && alone_ok;
}

int run_compare(const Mode& m, const std::shared_ptr<coll::Communicator>& comm) {
  const parallel::TensorGrid grid = grid_of(m, comm->size());
  const int data = comm->size() / (grid.degree() * m.pipe);
  const int slice = comm->rank() / (grid.degree() * m.pipe) * grid.z + comm->rank() % grid.z;  // z varies fastest
  const test::TpReference ref = test::tp_reference(m.model, kRows * data * grid.z, kSteps, 1);
  auto t = make(m, comm);
  double worst_loss = 0;
  for (int64_t s = 0; s < kSteps; ++s) {
    const float loss = t->step(test::tp_batch(m.model, s, slice * kRows, kRows));
    if (data == 1) {  // a replica's loss is its own rows' mean: comparable only with one replica
      const double want = ref.losses[static_cast<size_t>(s)];
      worst_loss = std::max(worst_loss, std::fabs(loss - want) / std::fabs(want) / static_cast<double>(s + 1));
    }
  }
  const bool memory_ok = m.zero != 3 || check_zero3_memory(*t, data, comm->rank(), m.model == "gpt");  // before any gather
  t->gather_parameters();  // ZeRO 3 keeps only shards between steps (a collective; elsewhere a no-op)
  const test::TpDiff d = test::tp_parameter_diff(*t, ref);
  const bool blocks_ok =
      m.sequence == parallel::SequenceParallel::kAllToAll || grid.degree() == 1 ? d.blocks == 0 : d.blocks > 0;
  bool ok = memory_ok && blocks_ok && d.max_abs <= ref.parameter_bound() && worst_loss <= ref.loss_relative_per_step &&
            t->stats().collectives.started > 0;
  if (m.checkpointing) ok = compare_without_checkpointing(m, comm, slice, *t) && ok;
  if (m.zero == 3) ok = check_zero3_resume(m, comm, slice) && ok;
  std::printf("rank %d (data %d x pipe %d x tensor %d x %d x %d): max |param - reference| %.3g (%s), bound %.3g (control %.3g); loss "
              "rel. diff per step %.3g (bound %.3g); %d blocks, %lld collectives, %lld hidden -> %s\n",
              comm->rank(), data, m.pipe, grid.x, grid.y, grid.z, d.max_abs, d.worst.c_str(), ref.parameter_bound(), ref.control_diff, worst_loss,
              ref.loss_relative_per_step, d.blocks, static_cast<long long>(t->stats().collectives.started),
              static_cast<long long>(t->stats().collectives.complete_when_needed), ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}

int run_kill(const Mode& m, const std::shared_ptr<coll::Communicator>& comm) {
  const int rank = comm->rank(), last = comm->size() - 1;
  auto t = make(m, comm);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < 40; ++s) {
    if (rank == last && s == 3) _exit(0);
    try {
      t->step(test::tp_batch(m.model, s, 0, kRows));
    } catch (const Error& e) {
      return test::check_kill_failure(rank, s, e, "world rank " + std::to_string(last), start);
    }
  }
  std::printf("rank %d: no failure reported after the peer died\n", rank);
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "gpt";
  try {
    Mode m = parse(name);
    transport::JobEnv env = transport::detect_job_env();
    if (m.fence) {
      m.pipe = env.world;
      m.y = 1;
    }
    auto store = transport::connect_job_store(env, std::chrono::milliseconds(30000));
    coll::CommOptions co;
    co.timeout = std::chrono::milliseconds(5000);
    std::shared_ptr<coll::Communicator> comm = coll::UcxCommunicator::create(store, env.rank, env.world, co);
    const int rc = m.kill ? run_kill(m, comm) : run_compare(m, comm);
    if (!m.kill) comm->barrier()->wait();  // rank 0's store outlives every peer's use
    return rc;
  } catch (const Error& e) {
    std::fprintf(stderr, "tp_rank %s: %s\n", name.c_str(), e.what());
    return 1;
  }
}
