// One rank of a data-parallel run under cohort-run, checked against a single-process reference
// computed in the same program (tests/unit/core/parallel/dp_reference.h). Usage:
//   dp_rank ddp | localsgd | slowmo | diloco | co2 | co2-plain | co2-heavy | co2-late |
//           co2-penalty | co2-clip | co2-8bit | co2-4bit (low-bit messages: a value whose
//           rounding the float and double anchors put on either side of a half level may land
//           a level apart, so these compare within one level's effect, and every rank must
//           hold the same anchor bit for bit)
//   dp_rank localsgd-zero1 | diloco-zero1 | diloco-clip-zero1   the outer state sharded (ZeRO 1):
//           same reference as unsharded (with "-f<F>": each fragment's state sharded on its own)
//   dp_rank co2-resume   a run stopped mid-round (reduction in flight) and resumed from a
//                        checkpoint matches the uninterrupted run bit for bit
//   dp_rank diloco-zero1-resume   the same with the outer state's blocks in per-rank files
//   dp_rank outer-memory the outer state per rank shrinks under ZeRO 1 (DiLoCo: to ~1/world),
//                        with the same parameters as unsharded
//   dp_rank shard-memory shard groups of 2 against unsharded runs: the model state per rank
//                        shrinks to ~1/2 as each ZeRO stage says (diloco and co2)
//   dp_rank co2-auto     overlap auto: every rank chose the same tau and overlap at every step
//                        and reached the same anchor bit for bit, in range (tau >= max(2, F) x
//                        overlap), and the parameters match the reference given the shapes
//                        chosen (with "-f<F>": over F fragments, each merged before the next
//                        one's round end; "-resume": stopped at step 7 and resumed from a
//                        checkpoint, the shape in force carried over)
//   dp_rank co2-noise-adamw | co2-noise-zero2-g2-adamw | ...   "-noise": inner noise scaling, the
//                        inner steps AdamW ("-adamw"), in the reference too (each simulated rank
//                        normalising for all of them: under shard groups, for the replicas)
//   dp_rank co2-kill | diloco-zero1-kill   the last rank dies mid-round; the others must fail
//                        with kPeerFailed / kTimeout naming it, within the deadline
//   dp_rank ddp-wide | ddp-zero1-wide | co2-wide-resume | ...   any mode with a model wide enough
//                        (139k parameters) for the communicator's registered memory: buckets and
//                        the outer pseudo-gradient go in place where the ranks map each other's
//                        memory (checked: registered chunks > 0 wherever shared memory is used)
//   dp_rank ddp-cuda | co2-cuda | ...   any compare mode with the trainers on the CUDA device
//                        (DDP over NCCL where every rank has its own device, else through host
//                        copies); exits 77 (skipped) without a visible device
//   dp_rank ddp-nan | ddp-zero3-nan | localsgd-nan | co2-nan | ...   any compare mode where
//                        the last rank's batch holds a NaN at one step and an Inf at a step that
//                        ends a round: DDP ranks must all skip both steps (kNonFinite) and stay
//                        identical; under local SGD / co2 only the last rank skips. Each is checked
//                        against the reference given the same batches, skips included
//   dp_rank co2-nanparam | localsgd-zero1-nanparam | ...   the last rank's parameters turn NaN
//                        mid-round: it skips until the round ends, contributes no progress for
//                        that round (ZeRO 1 local SGD: the average is not finite, and no rank
//                        takes that outer step) and goes on from the anchor
//   dp_rank co2-nanmerge   the same, poisoned one step after a round end: co2's merge meets the
//                        NaN and drops the rank's steps since its guess (it goes on from the new
//                        anchor); its round end then sends its finite progress
//   dp_rank diloco-f2 | co2-f4 | co2-clip-f4 | co2-f4-resume | co2-f4-kill | ...   any mode with
//                        "-f<F>" in its name: streaming outer synchronisation over F fragments
//                        (tau 4), against the reference's fragmented rule; the stats must count
//                        F fragments, every fragment's syncs and a per-sync size below the model's
//   dp_rank localsgd-avgstate | diloco-avgstate-f2 | diloco-zero1-avgstate | ...   any local SGD
//                        mode with "-avgstate": the inner optimizer's momentum averaged over the
//                        ranks at every round end (plan.average_inner_state), against the
//                        reference averaging its simulated ranks' momenta alike
//   dp_rank ddp-k25 | ddp-k3 | ddp-k25-nan | ddp-k25-resume | ddp-k3-kill | ...   DDP with "-k<P>":
//                        top-k gradient compression keeping P% of each bucket (25: the bitmap
//                        form; 3: int32 indices), with error feedback, against the reference's
//                        own top-k rule (each rank's gradient, the exchange, the residuals); the
//                        stats must show fewer bytes a step than the gradients'
//   dp_rank diloco-zero2-g2 | co2-zero3-g2 | co2-zero2-g2-resume | ...   any mode with "-g<S>" in
//                        its name: shard groups of S ranks (ZeRO stage N inside each replica, the
//                        outer rule between replicas on each rank's shard), against the reference
//                        with one simulated rank per replica on its ranks' rows; the stats must
//                        show each outer sync carrying ~1/S of the model, localsgd's outer
//                        collectives all waited and co2's partly hidden. With -nan / -nanparam the
//                        whole last replica skips / drops its round; with -f<F> each fragment runs
//                        on its pieces of every rank's shard
// Each rank initialises with a different seed: attach must broadcast rank 0's weights.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/device/device.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/device_comm.h"
#include "tests/multirank/kill_check.h"
#include "tests/unit/core/parallel/dp_reference.h"
#include "transport/bootstrap/env.h"
#include "transport/coll/ucx_communicator.h"

using namespace cohort;
namespace coll = cohort::transport::coll;

namespace {
constexpr int64_t kTau = 3;
constexpr int64_t kSteps = 5 * kTau + 2;  // ends mid-round
int64_t g_hidden = 16;  // 8192 in the -wide modes
bool g_adamw = false;    // "-adamw": AdamW inner steps (SGD with momentum otherwise)

optim::OptimizerConfig inner_optimizer() { return g_adamw ? test::dp_adamw_optimizer() : test::dp_inner_optimizer(); }
int g_fragments = 1;    // "-f<F>": plan.outer_fragments, with rounds of kFragmentTau steps
int g_shard_group = 1;  // "-g<S>": plan.shard_group (replicas of S ranks, ZeRO inside each)
int g_keep_percent = 100;  // "-k<P>": plan.grad_keep = P / 100 (top-k gradient compression)
constexpr int64_t kFragmentTau = 4;
// The plan's tau (the step counts of the runs stay multiples of kTau's).
int64_t plan_tau() { return g_fragments > 1 ? kFragmentTau : kTau; }

// -nan / -nanparam: what the last rank meets, and when.
enum class Poison { kNone, kBatch, kParams };
Poison g_poison = Poison::kNone;
constexpr int64_t kNanStep = kTau + 1;      // mid-round
constexpr int64_t kInfStep = 3 * kTau - 1;  // the last step of a round

// The batch of `rank` (its first sample at `row` of the batch given) gets its NaN or Inf.
void poison_batch(int64_t step, int rank, int world, std::map<std::string, Tensor>& batch, int64_t row) {
  if (g_poison != Poison::kBatch || rank != world - 1) return;
  float* x = batch.at("x").data<float>() + row * test::kFeatures;
  if (step == kNanStep) x[0] = std::nanf("");
  if (step == kInfStep) x[1] = INFINITY;
}

// The last rank's parameters turn NaN after its step g_param_nan_step: kNanStep (co2: just after
// a merge), or kTau (-nanmerge: just before co2's merge, which then drops the rank's steps).
int64_t g_param_nan_step = kNanStep;
void poison_parameters(int64_t step, int rank, int world, Trainer& t) {
  if (g_poison != Poison::kParams || rank != world - 1 || step != g_param_nan_step) return;
  std::vector<float> flat = test::dp_flat(t);
  flat[3] = std::nanf("");
  test::dp_set_flat(t, flat);
}

// Whether `mode` ends with `tail` (and holds more than it); if so, `mode` loses it.
bool take_suffix(std::string& mode, const std::string& tail) {
  if (mode.size() <= tail.size() || mode.compare(mode.size() - tail.size(), tail.size(), tail) != 0) return false;
  mode.resize(mode.size() - tail.size());
  return true;
}

// Whether `mode` holds `tag` anywhere; if so, its first occurrence goes.
bool take_tag(std::string& mode, const std::string& tag) {
  const size_t at = mode.find(tag);
  if (at == std::string::npos) return false;
  mode.erase(at, tag.size());
  return true;
}

parallel::PlanConfig plan_for_mode(std::string mode) {
  using parallel::Preset;
  if (take_suffix(mode, "-avgstate")) {  // the inner optimizer state averaged at round ends
    parallel::PlanConfig p = plan_for_mode(mode);
    p.average_inner_state = true;
    return p;
  }
  if (take_suffix(mode, "-noise")) {  // local steps normalised for the averaged gradient (AdamW)
    parallel::PlanConfig p = plan_for_mode(mode);
    p.inner_noise_scaling = true;
    return p;
  }
  for (int stage : {1, 2, 3}) {  // "-zeroN": ZeRO stage N (1 only for the outer modes)
    if (take_suffix(mode, "-zero" + std::to_string(stage))) {
      parallel::PlanConfig p = plan_for_mode(mode);
      p.zero_stage = stage;
      return p;
    }
  }
  if (mode == "diloco-clip") {
    parallel::PlanConfig p = parallel::preset(Preset::kDiLoCo, plan_tau());
    p.outer.clip_threshold = 0.05;  // below the momentum norm of this model: clipping binds
    return p;
  }
  if (mode == "ddp") {
    parallel::PlanConfig p = parallel::preset(Preset::kDdp, 1);
    // Several buckets: of this small model, or (wide) one of 128 KiB and one of 416 KiB.
    p.bucket_bytes = g_hidden > 16 ? 64 << 10 : 256;
    return p;
  }
  if (mode == "localsgd") return parallel::preset(Preset::kLocalSgd, plan_tau());
  if (mode == "slowmo") return parallel::preset(Preset::kSlowMo, plan_tau());
  if (mode == "diloco") return parallel::preset(Preset::kDiLoCo, plan_tau());
  // co2: the preset (DiLoCo's Nesterov outer optimizer) merging 2 steps into each round of 3 (so
  // under ZeRO 1 the block step and the merge fall on different steps); -plain averages (lr 1,
  // no momentum) and merges after 1 step; -heavy has heavy-ball momentum (the guess exact);
  // -late merges on the next round end (overlap = tau); -penalty and -clip switch those on.
  parallel::PlanConfig p = parallel::preset(Preset::kCo2, plan_tau());
  p.overlap = 2;
  if (mode == "co2-plain") p.outer.lr = 1, p.outer.momentum = 0, p.outer.nesterov = false, p.overlap = 1;
  if (mode == "co2-heavy") p.outer.lr = 0.5, p.outer.momentum = 0.8, p.outer.nesterov = false;
  if (mode == "co2-late") p.overlap = plan_tau();
  // -auto starts from 2 steps as well, or over F fragments from at most tau / F (one average in flight).
  if (mode == "co2-auto") p.overlap_auto = true, p.overlap = std::min<int64_t>(2, plan_tau() / g_fragments);
  if (mode == "co2-8bit") p.outer_bits = 8;
  if (mode == "co2-4bit") p.outer_bits = 4;
  if (mode == "co2-penalty") p.outer.staleness_penalty = true;
  if (mode == "co2-clip") p.outer.clip_threshold = 0.05;  // below this model's momentum norm: binds
  return p;
}

parallel::PlanConfig plan_for(const std::string& mode) {
  parallel::PlanConfig p = plan_for_mode(mode);
  p.outer_fragments = g_fragments;
  p.shard_group = g_shard_group;
  if (g_shard_group > 1) p.bucket_bytes = 256;  // several ZeRO buckets per replica, one uneven
  p.grad_keep = g_keep_percent / 100.0;
  return p;
}

std::unique_ptr<Trainer> make_trainer(int rank, Device device = Device::kCpu) {
  TrainerOptions o;
  o.seed = 1 + static_cast<uint64_t>(rank);  // only rank 0's seed must matter
  o.num_threads = 1;
  o.device = device;
  return std::make_unique<Trainer>(test::dp_model(test::kShard, g_hidden), inner_optimizer(), o);
}

// The outer synchronisation's stats: F fragments; one sync per fragment's round end (fragment f's
// at step counts f tau / F mod tau); a sync's bytes those of the largest fragment, under the
// whole model's when F > 1.
bool fragment_stats_hold(const parallel::PlanConfig& plan, const parallel::ParallelStats& st,
                         const std::vector<Tensor>& params) {
  int64_t syncs = 0, model_bytes = 0;
  for (int f = 0; f < plan.outer_fragments; ++f)
    for (int64_t n = 1; n <= kSteps; ++n) syncs += (n - f * plan.tau / plan.outer_fragments) % plan.tau == 0;
  for (const Tensor& p : params) model_bytes += p.nbytes();
  bool smaller = plan.outer_fragments == 1 ? st.outer_sync_bytes == model_bytes
                                           : st.outer_sync_bytes > 0 && st.outer_sync_bytes < model_bytes;
  // Shard groups: each rank's outer all-reduce carries its shard, 1/S of the model plus at most
  // one padding element per bucket.
  if (plan.shard_group > 1)
    smaller = st.outer_sync_bytes > 0 &&
              st.outer_sync_bytes <= model_bytes / plan.shard_group + st.buckets * static_cast<int64_t>(sizeof(float));
  // Shard groups over F fragments: a fragment may have no piece in this rank's shard (a small
  // parameter inside another position's block), and then no sync here.
  const bool syncs_hold = plan.shard_group > 1 && plan.outer_fragments > 1 ? st.outer_syncs > 0 && st.outer_syncs <= syncs
                                                                           : st.outer_syncs == syncs;
  if (st.outer_fragments == plan.outer_fragments && syncs_hold &&
      (smaller || plan.outer_bits < 32 || (plan.zero_stage > 0 && plan.shard_group == 1)))
    return true;
  std::printf("outer stats: %lld fragments (plan %d), %lld syncs (expected %lld), %lld B a sync (model %lld B)\n",
              static_cast<long long>(st.outer_fragments), plan.outer_fragments, static_cast<long long>(st.outer_syncs),
              static_cast<long long>(syncs), static_cast<long long>(st.outer_sync_bytes),
              static_cast<long long>(model_bytes));
  return false;
}

// co2 under overlap auto (run_auto): the round shape each step left, the reference's to follow.
std::vector<parallel::RoundShape> g_shapes;
// Shard groups with low-bit messages: every position's outer layout (the ranks of the first
// replica's), for the reference's messages (set by run_compare; empty otherwise).
std::vector<test::DpSimulation::PositionLayout> g_positions;

// Each position's DataParallel::outer_layout, all-gathered (every rank calls it: a collective).
std::vector<test::DpSimulation::PositionLayout> position_layouts(const parallel::DataParallel& dp,
                                                                 coll::Communicator& comm, int group) {
  const parallel::DataParallel::OuterLayout mine = dp.outer_layout();
  // Every position's shard is as long (a block of each bucket), and cut into as many fragments.
  std::vector<int64_t> row(mine.flat);
  for (size_t b : mine.fragment_begin) row.push_back(static_cast<int64_t>(b));
  std::vector<int64_t> all(row.size() * static_cast<size_t>(comm.size()));
  comm.all_gather(row.data(), all.data(), row.size(), coll::DataType::kI64)->wait();
  std::vector<test::DpSimulation::PositionLayout> out(static_cast<size_t>(group));
  for (size_t p = 0; p < out.size(); ++p) {
    const int64_t* r = all.data() + p * row.size();
    out[p].flat.assign(r, r + mine.flat.size());
    out[p].fragment_begin.assign(r + mine.flat.size(), r + row.size());
  }
  return out;
}

// *skipped: the steps the reference skipped for NaN or Inf on this rank.
std::vector<float> reference(const std::string& mode, int world, int rank, const parallel::PlanConfig& plan,
                             std::vector<int64_t>* skipped) {
  if (plan.grad_keep < 1) {  // top-k: each rank's own gradient matters, not only their average
    test::TopkDdpSimulation sim(world, plan, g_hidden);
    for (int64_t s = 0; s < kSteps; ++s)
      if (!sim.step(s, [world](int64_t st, int r, std::map<std::string, Tensor>& b) { poison_batch(st, r, world, b, 0); }))
        skipped->push_back(s);
    return test::dp_flat(sim.model());
  }
  if (plan.mode == parallel::SyncMode::kSync) {
    // Single rank on the concatenated batch (ZeRO 1 steps the same update in shards).
    TrainerOptions o;
    o.seed = 1;
    o.num_threads = 1;
    Trainer t(test::dp_model(test::kShard * world, g_hidden), inner_optimizer(), o);
    for (int64_t s = 0; s < kSteps; ++s) {
      std::map<std::string, Tensor> batch = test::dp_batch(s, 0, test::kShard * world);
      poison_batch(s, world - 1, world, batch, (world - 1) * test::kShard);
      try {
        t.step(batch);
      } catch (const Error& e) {
        if (e.status() != Status::kNonFinite) throw;
        skipped->push_back(s);
      }
    }
    return test::dp_flat(t);
  }
  // Shard groups: a replica of S ranks is one simulated rank on their rows; the last rank's
  // rows, poisoned, are the last of the last replica's.
  const int group = plan.shard_group, replicas = world / group;
  test::DpSimulation sim(replicas, plan, 1, g_hidden, group * test::kShard, inner_optimizer());
  sim.edit_batch = [replicas, group](int64_t s, int r, std::map<std::string, Tensor>& b) {
    poison_batch(s, r, replicas, b, (group - 1) * test::kShard);
  };
  sim.after_step = [replicas](int64_t s, int r, Trainer& t) { poison_parameters(s, r, replicas, t); };
  if (!g_shapes.empty()) sim.shape = [](int64_t s) { return g_shapes.at(static_cast<size_t>(s)); };
  sim.positions = g_positions;
  const int64_t steps = g_shapes.empty() ? kSteps : static_cast<int64_t>(g_shapes.size());
  for (int64_t s = 0; s < steps; ++s) sim.step(s);
  *skipped = sim.skipped.at(static_cast<size_t>(rank / group));
  return test::dp_flat(sim.rank(rank / group));
}

// Trainer::average_replicas at step `s` of run_compare (every rank alike). Checks that every rank
// then evaluates the same model, the ranks' mean of their own parameters (all-gathered and summed
// here in rank order), while parameters() stay this rank's own; for co2 with plain or Nesterov
// averaging at a round end (one fragment, fp32, no clip) that model is where the merge puts the
// anchor a step later: `*merged_at` is set to that step and `expect` to the model. 0 when it holds.
int check_replica_average(const std::string& mode, const parallel::PlanConfig& plan, coll::Communicator& comm,
                          Trainer& trainer, int64_t s, std::vector<float>& expect, int64_t* merged_at) {
  trainer.gather_parameters();  // ZeRO 3 between steps: shards only
  const std::vector<float> own = test::dp_flat(trainer);
  const bool averaged = trainer.average_replicas();
  if (averaged != (plan.mode != parallel::SyncMode::kSync && comm.size() > plan.shard_group)) {
    std::printf("rank %d %s: average_replicas returned %d at step %lld\n", comm.rank(), mode.c_str(), averaged,
                static_cast<long long>(s));
    return 1;
  }
  // Its own parameters untouched (bit for bit: NaN too, where a -nan mode poisoned them). Every
  // rank goes on to the collectives below before any verdict, so that none is left waiting.
  const std::vector<float> after = test::dp_flat(trainer);
  const bool untouched = std::memcmp(after.data(), own.data(), own.size() * sizeof(float)) == 0;
  const int world = comm.size();
  std::vector<float> all(own.size() * static_cast<size_t>(world));
  comm.all_gather(own.data(), all.data(), own.size(), coll::DataType::kF32)->wait();
  std::vector<float> mean(own.size(), 0.0f), seen;
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < own.size(); ++i) mean[i] += all[static_cast<size_t>(r) * own.size() + i] / world;
  for (const std::string& name : trainer.parameter_names()) {
    const Tensor v = to_device(trainer.parameter_value(name), Device::kCpu);
    seen.insert(seen.end(), v.data<float>(), v.data<float>() + v.numel());
  }
  const double off = test::dp_max_diff(seen, averaged ? mean : own);
  // The evaluation reads it: the same loss on every rank (each evaluates the same samples).
  std::map<std::string, Tensor> out{{"loss", Tensor::empty({}, DType::kF32)}};
  trainer.evaluate(test::dp_batch(1000, 0, test::kShard), out);
  float loss[2] = {out.at("loss").data<float>()[0], -out.at("loss").data<float>()[0]};
  comm.all_reduce(loss, 2, coll::DataType::kF32, coll::ReduceOp::kMax)->wait();
  std::printf("rank %d/%d %s: replicas' average at step %lld: max |view - mean| %.3g, evaluated loss %.6f on every "
              "rank: %s\n",
              comm.rank(), world, mode.c_str(), static_cast<long long>(s), off, loss[0],
              loss[0] == -loss[1] ? "yes" : "no");
  if (!untouched) return 1;
  if (g_poison != Poison::kNone) return 0;  // a NaN in some rank's parameters: so in the average
  if (off > 1e-6 || loss[0] != -loss[1]) return 1;
  if (plan.mode == parallel::SyncMode::kCo2 && plan.outer_fragments == 1 && plan.outer_bits == 32 &&
      plan.outer.clip_threshold == 0 && plan.shard_group == 1 && !plan.overlap_auto && (s + 1) % plan.tau == 0) {
    expect = mean;
    *merged_at = s + plan.overlap;
  }
  return 0;
}

int run_compare(const std::string& mode, std::shared_ptr<coll::Communicator> comm, Device device = Device::kCpu,
                std::shared_ptr<transport::Store> store = nullptr) {
  parallel::PlanConfig plan = plan_for(mode);
  auto trainer = make_trainer(comm->rank(), device);
  std::shared_ptr<coll::Communicator> device_comm;
  if (device != Device::kCpu && plan.mode == parallel::SyncMode::kSync) {
    std::string why;
    device_comm = parallel::make_device_communicator(*comm, store, &why);
    std::printf("rank %d/%d %s on %s: gradient buckets reduced %s\n", comm->rank(), comm->size(), mode.c_str(),
                device_name(device), device_comm ? "over NCCL in device memory" : ("through host copies: " + why).c_str());
  }
  auto dp = parallel::DataParallel::attach(*trainer, plan, comm, device_comm);
  if (plan.shard_group > 1 && plan.outer_bits < 32) g_positions = position_layouts(*dp, *comm, plan.shard_group);
  std::vector<int64_t> skipped, want_skipped;
  std::vector<float> merged;
  int64_t merged_at = -1;
  for (int64_t s = 0; s < kSteps; ++s) {
    std::map<std::string, Tensor> batch = test::dp_batch(s, comm->rank() * test::kShard, test::kShard);
    poison_batch(s, comm->rank(), comm->size(), batch, 0);
    try {
      trainer->step(batch);
    } catch (const Error& e) {
      if (e.status() != Status::kNonFinite) throw;
      skipped.push_back(s);
    }
    // Under shard groups the parameters of every rank of the last replica (they are one model).
    poison_parameters(s, comm->rank() / plan.shard_group, comm->size() / plan.shard_group, *trainer);
    // The replicas' average, read mid-round and at the first round end, changes nothing of the
    // run (the reference below has no such calls); at the round end it is the next anchor.
    if (s == merged_at) {
      const double off = test::dp_max_diff(dp->anchor(), merged);
      std::printf("rank %d/%d %s: the merge at step %lld put the anchor %.3g from the replicas' average of step %lld\n",
                  comm->rank(), comm->size(), mode.c_str(), static_cast<long long>(s), off,
                  static_cast<long long>(s - plan.overlap));
      if (off > 1e-5) return 1;
    }
    if (device == Device::kCpu && (s == 1 || s == plan.tau - 1) &&
        check_replica_average(mode, plan, *comm, *trainer, s, merged, &merged_at) != 0)
      return 1;
  }
  std::vector<float> want = reference(mode, comm->size(), comm->rank(), plan, &want_skipped);
  trainer->gather_parameters();  // ZeRO 3 keeps only shards between steps (a collective; elsewhere a no-op)
  const std::vector<float> got = test::dp_flat(*trainer);
  double diff = test::dp_max_diff(got, want);
  if (g_poison != Poison::kNone) {
    std::string seen, expected;
    for (int64_t s : skipped) seen += " " + std::to_string(s);
    for (int64_t s : want_skipped) expected += " " + std::to_string(s);
    bool finite = true;
    for (float v : got) finite = finite && std::isfinite(v);
    std::printf("rank %d/%d %s: steps skipped for NaN/Inf:%s (reference:%s); parameters %s\n", comm->rank(),
                comm->size(), mode.c_str(), seen.empty() ? " none" : seen.c_str(),
                expected.empty() ? " none" : expected.c_str(), finite ? "finite" : "NOT FINITE");
    // The last rank always meets the NaN; under DDP every rank skips with it, under shard groups
    // every rank of its replica.
    const bool must_skip = comm->rank() / plan.shard_group == comm->size() / plan.shard_group - 1 ||
                           plan.mode == parallel::SyncMode::kSync;
    if (skipped != want_skipped || skipped.empty() == must_skip || !finite) return 1;
  }
  parallel::ParallelStats st = dp->stats();
  std::printf("rank %d/%d %s: max |param - reference| = %.3g; rounds %lld, compute %.4f s, comm %.4f s, wait %.4f s, "
              "hidden %.2f, buckets %lld, last penalty scale %.3f, last outer momentum norm %.3g, outer fragments "
              "%lld, outer syncs %lld, %lld B a sync; outer collectives %.4f s, waited %.4f s, hidden %.2f; shard "
              "group %d\n",
              comm->rank(), comm->size(), mode.c_str(), diff, static_cast<long long>(st.rounds), st.compute_seconds,
              st.comm_seconds, st.wait_seconds, st.hidden_fraction, static_cast<long long>(st.buckets),
              st.last_staleness_scale, st.last_momentum_norm, static_cast<long long>(st.outer_fragments),
              static_cast<long long>(st.outer_syncs), static_cast<long long>(st.outer_sync_bytes), st.outer_seconds,
              st.outer_wait_seconds, st.outer_hidden_fraction, st.shard_group);
  if (plan.mode != parallel::SyncMode::kSync && !fragment_stats_hold(plan, st, trainer->parameters())) return 1;
  if ((plan.mode == parallel::SyncMode::kSync || plan.shard_group > 1) && st.buckets < 2) return 1;
  if (st.shard_group != plan.shard_group) return 1;
  // Top-k: each bucket's message, all buckets together fewer bytes than the gradients.
  if (plan.grad_keep < 1) {
    int64_t model_bytes = 0;
    for (const Tensor& p : trainer->parameters()) model_bytes += p.nbytes();
    std::printf("rank %d/%d %s: keep %.2f, %lld B of messages a step for %lld B of gradients\n", comm->rank(),
                comm->size(), mode.c_str(), st.grad_keep, static_cast<long long>(st.gradient_sync_bytes),
                static_cast<long long>(model_bytes));
    if (st.grad_keep != plan.grad_keep || !(st.gradient_sync_bytes < model_bytes)) return 1;
  }
  // localsgd's outer all-reduce blocks: all of it waited. co2's travels behind `overlap` local
  // steps: the merge waits for what is left of it, if anything (on these loaded cores often
  // a share, for a replica that lags; never all of it).
  if (plan.mode == parallel::SyncMode::kLocalSgd && st.outer_seconds > 0 && st.outer_hidden_fraction != 0) return 1;
  if (plan.mode == parallel::SyncMode::kCo2 && plan.outer_bits == 32 && !(st.outer_hidden_fraction > 0)) return 1;
  // Wide: the buckets / the pseudo-gradient are in registered memory, reduced in place where
  // the ranks share memory.
  if (g_hidden > 16) {
    auto* ucx = dynamic_cast<coll::UcxCommunicator*>(comm.get());
    const bool shared = ucx != nullptr && ucx->uses_shared_memory();
    const uint64_t chunks = ucx != nullptr ? ucx->registered_chunks() : 0;
    std::printf("rank %d/%d %s-wide: shared memory %s, %llu chunks read or written in registered memory\n",
                comm->rank(), comm->size(), mode.c_str(), shared ? "yes" : "no", static_cast<unsigned long long>(chunks));
    if (shared && chunks == 0) return 1;
  }
  // The clipping variants must actually clip.
  if (mode.find("clip") != std::string::npos && !(st.last_momentum_norm > plan.outer.clip_threshold)) return 1;
  // The penalty variants must actually scale the carried-over steps.
  if (mode.find("penalty") != std::string::npos && !(st.last_staleness_scale < 1.0)) return 1;
  if (plan.outer_bits < 32) {
    // Every rank decodes the same messages in the same order: the anchors agree bit for bit —
    // under shard groups those of one position (rank r % S) in every replica, each its shard's.
    float sum = 0;
    for (float v : dp->anchor()) sum += v;
    std::vector<float> sums(static_cast<size_t>(comm->size()));
    comm->all_gather(&sum, sums.data(), 1, coll::DataType::kF32)->wait();
    for (size_t r = 0; r < sums.size(); ++r)
      if (std::memcmp(&sums[r], &sums[r % static_cast<size_t>(plan.shard_group)], sizeof(float)) != 0) return 1;
    return diff <= (plan.outer_bits == 8 ? 2e-3 : 2e-2) ? 0 : 1;
  }
  // On the GPU the sums run in another order than the CPU reference's: a few ulps per step.
  return diff <= (device == Device::kCpu ? 2e-5 : 2e-4) ? 0 : 1;
}

// co2 with overlap auto: the shape of each round follows measured times, so it is recorded after
// every step and given to the reference. Every rank must have made the same choices at every step
// (the same tau and overlap, the same anchor bit for bit), in range, and match the reference.
int run_auto(const std::string& mode, std::shared_ptr<coll::Communicator> comm, bool resume) {
  parallel::PlanConfig plan = plan_for(mode);
  const int rank = comm->rank();
  const std::string path = "/tmp/cohort_dp_auto_" + std::to_string(getppid()) + "_" + std::to_string(rank);
  const int64_t steps = 8 * kTau, stop = 2 * kTau + 1;
  auto trainer = make_trainer(rank);
  auto dp = parallel::DataParallel::attach(*trainer, plan, comm);
  bool in_range = true;
  uint64_t shapes_hash = 1469598103934665603ull;  // FNV-1a over every step's (tau, overlap)
  for (int64_t s = 0; s < steps; ++s) {
    if (resume && s == stop) {  // a new trainer and hook from the checkpoint, the shape in force with them
      checkpoint::CheckpointExtra extra;
      dp->save_state(extra);
      checkpoint::save_checkpoint(*trainer, path, extra);
      trainer->set_step_hook(nullptr);
      dp.reset();
      trainer = make_trainer(rank + 100);
      dp = parallel::DataParallel::attach(*trainer, plan, comm);
      checkpoint::CheckpointExtra loaded;
      checkpoint::load_checkpoint(*trainer, path, &loaded);
      dp->load_state(loaded);
      std::remove(path.c_str());
    }
    trainer->step(test::dp_batch(s, rank * test::kShard, test::kShard));
    const parallel::ParallelStats now = dp->stats();
    g_shapes.push_back({now.overlap, now.tau});
    // Over F fragments one average in flight at a time, from the plan's shape on (F = 1: overlap <= tau).
    in_range = in_range && now.overlap >= 1 && now.tau >= plan.tau && now.tau >= plan.outer_fragments * now.overlap;
    for (int64_t v : {now.tau, now.overlap}) shapes_hash = (shapes_hash ^ static_cast<uint64_t>(v)) * 1099511628211ull;
  }
  parallel::ParallelStats st = dp->stats();
  in_range = in_range && st.tau >= std::max(2, plan.outer_fragments) * st.overlap;  // as re-chosen
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the anchor's bytes (whole or this rank's block)
  for (float v : dp->anchor()) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    hash = (hash ^ bits) * 1099511628211ull;
  }
  // Min and max over the ranks of the shapes' hash in one kMax all-reduce (24 bits a float).
  float v[4] = {static_cast<float>(shapes_hash >> 40), static_cast<float>(shapes_hash & 0xffffff)};
  v[2] = -v[0], v[3] = -v[1];
  comm->all_reduce(v, 4, coll::DataType::kF32, coll::ReduceOp::kMax)->wait();
  bool same = v[0] == -v[2] && v[1] == -v[3];
  // The anchor (whole, or this rank's shard under shard groups) over the ranks that hold the
  // same elements: every rank, or the ranks of one position in every replica.
  const int group = plan.shard_group;
  auto holders = group > 1 ? comm->split(comm->rank() % group, comm->rank() / group, "same-shard") : comm;
  float h[4] = {static_cast<float>(hash >> 40), static_cast<float>(hash & 0xffffff)};
  h[2] = -h[0], h[3] = -h[1];
  holders->all_reduce(h, 4, coll::DataType::kF32, coll::ReduceOp::kMax)->wait();
  same = same && h[0] == -h[2] && h[1] == -h[3];
  std::string seen;  // the shapes chosen, each from the step count it took effect
  for (size_t s = 0; s < g_shapes.size(); ++s)
    if (s == 0 || g_shapes[s].tau != g_shapes[s - 1].tau || g_shapes[s].overlap != g_shapes[s - 1].overlap)
      seen += " " + std::to_string(s + 1) + ":(" + std::to_string(g_shapes[s].overlap) + "," +
              std::to_string(g_shapes[s].tau) + ")";
  trainer->gather_parameters();  // ZeRO 3 keeps only shards between steps (a collective; elsewhere a no-op)
  std::vector<int64_t> skipped;
  const double diff = test::dp_max_diff(test::dp_flat(*trainer), reference(mode, comm->size(), rank, plan, &skipped));
  std::printf("rank %d/%d %s%s: tau %lld, overlap %lld (an average took %.4f s, a step %.4f s), hidden %.2f; "
              "(overlap, tau) from step:%s; the ranks %s; max |param - reference| = %.3g\n",
              rank, comm->size(), mode.c_str(), resume ? "-resume" : "", static_cast<long long>(st.tau),
              static_cast<long long>(st.overlap), st.outer_comm_seconds, st.step_seconds, st.hidden_fraction,
              seen.c_str(), same ? "agree" : "DISAGREE", diff);
  // The steps' compute measured: summed over the run, not the last round's step time, which a
  // loaded box can leave at 0 (a tiny model's steps all spent waiting; seen under ctest -j2).
  if (!in_range || !(st.compute_seconds > 0))
    std::printf("rank %d: %s\n", rank, !in_range ? "a shape out of range" : "no compute time measured");
  return same && in_range && st.compute_seconds > 0 && diff <= 2e-5 ? 0 : 1;
}

int run_outer_memory(const std::string& mode, std::shared_ptr<coll::Communicator> comm) {
  parallel::ParallelStats st[2];
  std::vector<float> params[2];
  size_t inner = 0;
  for (int stage = 0; stage < 2; ++stage) {
    parallel::PlanConfig plan = plan_for(stage ? mode + "-zero1" : mode);
    auto trainer = make_trainer(comm->rank());
    auto dp = parallel::DataParallel::attach(*trainer, plan, comm);
    for (int64_t s = 0; s < kSteps; ++s) trainer->step(test::dp_batch(s, comm->rank() * test::kShard, test::kShard));
    st[stage] = dp->stats();
    params[stage] = test::dp_flat(*trainer);
    inner = trainer->optimizer().state_bytes();  // the inner optimizer's: never sharded here
  }
  const double outer0 = static_cast<double>(st[0].optimizer_state_bytes) - static_cast<double>(inner);
  const double outer1 = static_cast<double>(st[1].optimizer_state_bytes) - static_cast<double>(inner);
  // Unsharded the outer state is 3 whole vectors (anchor, round start, momentum); sharded 2
  // blocks (anchor, momentum). Blocks are padded: +1%.
  const double w = comm->size();
  const double share = 2 / w / 3;
  const double diff = test::dp_max_diff(params[0], params[1]);
  std::printf("rank %d/%d %s: outer optimizer state %.0f B unsharded, %.0f B under ZeRO 1 (%.3f, expected %.3f); "
              "inner %zu B; max |param difference| %.3g\n",
              comm->rank(), comm->size(), mode.c_str(), outer0, outer1, outer1 / outer0, share, inner, diff);
  return outer1 >= share * outer0 && outer1 <= 1.01 * share * outer0 && outer0 > 0 && diff <= 2e-5 ? 0 : 1;
}

// Shard groups of 2 against every rank its own replica (the same world, diloco and co2): the
// model state per rank, as the sync mode's ZeRO counts it, must shrink to ~1/S — the optimizer
// state (inner and outer) at every stage, and the bytes of each outer sync; from stage 2 the
// gradient buffers are two shards (the replica's reduced gradients and the pseudo-gradient), at
// most 2/S of the model where the unsharded run holds the whole pseudo-gradient; at stage 3 the
// parameters held between steps are the shard.
int run_shard_memory(std::shared_ptr<coll::Communicator> comm) {
  constexpr int kGroup = 2;
  auto measure = [&](const std::string& mode, int group) {
    g_shard_group = group;
    parallel::PlanConfig plan = plan_for(mode);
    auto trainer = make_trainer(comm->rank());
    auto dp = parallel::DataParallel::attach(*trainer, plan, comm);
    for (int64_t s = 0; s < kSteps; ++s) trainer->step(test::dp_batch(s, comm->rank() * test::kShard, test::kShard));
    return dp->stats();
  };
  auto ratio = [](int64_t a, int64_t b) { return static_cast<double>(a) / static_cast<double>(b); };
  const double share = 1.0 / kGroup + 0.05;  // 1/S of the elements, plus padding of the buckets
  bool ok = true;
  for (const std::string mode : {"diloco", "co2"}) {
    const parallel::ParallelStats base = measure(mode, 1);
    int64_t stage1_gradients = 0;
    for (int stage = 1; stage <= 3; ++stage) {
      const parallel::ParallelStats g = measure(mode + "-zero" + std::to_string(stage), kGroup);
      const double params = ratio(g.parameter_bytes, base.parameter_bytes),
                   grads = ratio(g.gradient_bytes, base.gradient_bytes),
                   optimizer = ratio(g.optimizer_state_bytes, base.optimizer_state_bytes),
                   sync = ratio(g.outer_sync_bytes, base.outer_sync_bytes);
      const int64_t model = base.parameter_bytes;  // every parameter, whole
      bool holds = optimizer <= share && sync <= share && g.shard_group == kGroup;
      if (stage == 1) stage1_gradients = g.gradient_bytes;
      if (stage >= 2) holds = holds && ratio(g.gradient_bytes, model) <= 2 * share && g.gradient_bytes < stage1_gradients;
      if (stage == 3) holds = holds && params <= share;
      std::printf("rank %d/%d %s, shard groups of %d, ZeRO %d, of every rank its own replica's: parameters %.3f "
                  "(%lld of %lld B), gradients %.3f (%lld of %lld B), optimizer state %.3f (%lld of %lld B, inner "
                  "and outer), an outer sync %.3f -> %s\n",
                  comm->rank(), comm->size(), mode.c_str(), kGroup, stage, params,
                  static_cast<long long>(g.parameter_bytes), static_cast<long long>(base.parameter_bytes), grads,
                  static_cast<long long>(g.gradient_bytes), static_cast<long long>(base.gradient_bytes), optimizer,
                  static_cast<long long>(g.optimizer_state_bytes), static_cast<long long>(base.optimizer_state_bytes),
                  sync, holds ? "as expected" : "UNEXPECTED");
      ok = ok && holds;
    }
  }
  g_shard_group = 1;
  return ok ? 0 : 1;
}

int run_resume(const std::string& mode, std::shared_ptr<coll::Communicator> comm) {
  parallel::PlanConfig plan = plan_for(mode);
  const int64_t stop = 2 * kTau + 1;  // mid-round, round 1's reduction in flight
  std::string path = "/tmp/cohort_dp_resume_" + std::to_string(getppid()) + "_" + std::to_string(comm->rank());
  int rank = comm->rank();
  std::vector<float> straight;
  {
    auto t = make_trainer(rank);
    auto dp = parallel::DataParallel::attach(*t, plan, comm);
    for (int64_t s = 0; s < kSteps; ++s) {
      if (s == stop) {
        checkpoint::CheckpointExtra extra;
        dp->save_state(extra);
        checkpoint::save_checkpoint(*t, path, extra);
      }
      t->step(test::dp_batch(s, rank * test::kShard, test::kShard));
    }
    t->gather_parameters();  // ZeRO 3 (shard groups): whole only when gathered; elsewhere a no-op
    straight = test::dp_flat(*t);
  }
  auto t = make_trainer(rank + 100);
  auto dp = parallel::DataParallel::attach(*t, plan, comm);
  checkpoint::CheckpointExtra extra;
  checkpoint::load_checkpoint(*t, path, &extra);
  dp->load_state(extra);
  for (int64_t s = stop; s < kSteps; ++s) t->step(test::dp_batch(s, rank * test::kShard, test::kShard));
  std::remove(path.c_str());
  t->gather_parameters();
  std::vector<float> resumed = test::dp_flat(*t);
  bool same = resumed.size() == straight.size() &&
              std::memcmp(resumed.data(), straight.data(), resumed.size() * sizeof(float)) == 0;
  std::printf("rank %d: resumed %s run %s the uninterrupted one\n", rank, mode.c_str(),
              same ? "matches bit for bit" : "DIFFERS from");
  return same ? 0 : 1;
}

int run_kill(const std::string& mode, std::shared_ptr<coll::Communicator> comm) {
  parallel::PlanConfig plan = plan_for(mode);
  int rank = comm->rank(), last = comm->size() - 1;
  auto t = make_trainer(rank);
  auto dp = parallel::DataParallel::attach(*t, plan, comm);
  auto start = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < 40 * kTau; ++s) {
    if (rank == last && s == 2 * kTau + 1) _exit(0);  // dies mid-round, round 1 in flight
    try {
      t->step(test::dp_batch(s, rank * test::kShard, test::kShard));
    } catch (const Error& e) {
      return test::check_kill_failure(rank, s, e, "rank " + std::to_string(last), start);
    }
  }
  std::printf("rank %d: no failure reported after the peer died\n", rank);
  return 1;
}
// "<tag><N>" in the mode (as "-f4"): N, and the mode without it; `otherwise` when absent.
int take_number(std::string& mode, const char* tag, int otherwise) {
  const size_t at = mode.find(tag), digits = at + std::strlen(tag);
  if (at == std::string::npos || digits >= mode.size() || !std::isdigit(static_cast<unsigned char>(mode[digits])))
    return otherwise;
  size_t end = digits;
  while (end < mode.size() && std::isdigit(static_cast<unsigned char>(mode[end]))) ++end;
  const int n = std::stoi(mode.substr(digits, end - digits));
  mode.erase(at, end - at);
  return n;
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "co2";
  g_fragments = take_number(mode, "-f", g_fragments);       // "-f<F>": F fragments
  g_shard_group = take_number(mode, "-g", g_shard_group);   // "-g<S>": shard groups of S ranks
  g_keep_percent = take_number(mode, "-k", g_keep_percent);  // "-k<P>": top-k keeping P%
  for (auto [tail, poison] : {std::pair{"-nanparam", Poison::kParams}, std::pair{"-nanmerge", Poison::kParams},
                              std::pair{"-nan", Poison::kBatch}}) {
    if (take_suffix(mode, tail)) {
      g_poison = poison;
      if (std::string(tail) == "-nanmerge") g_param_nan_step = kTau;
      break;
    }
  }
  if (take_tag(mode, "-wide")) g_hidden = 8192;
  g_adamw = take_tag(mode, "-adamw");
  Device device = Device::kCpu;
  if (take_suffix(mode, "-cuda")) {
    device = Device::kCuda;
    const std::string why = device_unavailable_reason(device);
    if (!why.empty()) {
      std::printf("dp_rank %s-cuda: skipped: %s\n", mode.c_str(), why.c_str());
      return 77;
    }
  }
  try {
    transport::JobEnv env = transport::detect_job_env();
    auto store = transport::connect_job_store(env, std::chrono::milliseconds(30000));
    coll::CommOptions co;
    co.timeout = std::chrono::milliseconds(5000);
    auto comm = coll::UcxCommunicator::create(store, env.rank, env.world, co);
    auto ends_with = [&](const std::string& tail) {
      return mode.size() > tail.size() && mode.compare(mode.size() - tail.size(), tail.size(), tail) == 0;
    };
    const bool killing = ends_with("-kill");
    const bool automatic = mode.rfind("co2-auto", 0) == 0;
    int rc = automatic ? run_auto(ends_with("-resume") ? mode.substr(0, mode.size() - 7) : mode, comm,
                                  ends_with("-resume"))
             : ends_with("-resume") ? run_resume(mode.substr(0, mode.size() - 7), comm)
             : killing            ? run_kill(mode.substr(0, mode.size() - 5), comm)
             : mode == "outer-memory" ? run_outer_memory("diloco", comm)
             : mode == "shard-memory" ? run_shard_memory(comm)
                                      : run_compare(mode, comm, device, store);
    if (!killing) comm->barrier()->wait();  // rank 0's store outlives every peer's use
    return rc;
  } catch (const Error& e) {
    std::fprintf(stderr, "dp_rank %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
}
