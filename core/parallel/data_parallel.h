// Data parallelism over a communicator, installed into a Trainer as its StepHook: synchronous
// DDP (bucketed gradient all-reduce overlapping backward), local SGD / SlowMo / DiLoCo (blocking
// outer step every tau steps) and CO2 (round k's pseudo-gradient reduced while the first
// `overlap` steps of round k+1 run from a guess, then merged: blocking DiLoCo's outer step on the
// anchor, the steps taken since carried over — derived at end_round_co2). Local SGD and co2 can
// stream their outer synchronisation (plan.outer_fragments): the model cut into fragments whose
// rounds are staggered, each outer all-reduce carrying one fragment — derived above after_update.
// Local SGD can also average the ranks' inner optimizer state at each round end
// (plan.average_inner_state), so that every replica starts a round with one state, as DDP's do.
// Everything runs on the training thread; the communicator's progress thread moves the bytes.
//
// ZeRO stages 1-3 (sync mode, core/parallel/zero.cpp): each bucket is padded to a multiple
// of the world and rank r owns block r of every bucket; r keeps optimizer state only for its
// blocks and updates them with its own Optimizer over one flat shard tensor. Stage 1
// all-reduces gradients; stages 2 and 3 reduce-scatter them. Stages 1 and 2 all-gather the
// buckets after the update; stage 3 keeps only the shard between steps and gathers each bucket
// just before a node reads it (forward and again in backward), one bucket ahead, releasing its
// memory after its last reader. The trainer's gradients stay this rank's local ones, and its
// own optimizer holds no state. Local SGD with stage 1 shards the outer state instead
// (core/parallel/outer_shard.cpp): the anchor and outer momentum of rank r are block r of each
// fragment of the outer synchronisation (the flat model with one; padded to a multiple of the
// world); a fragment's round end reduce-scatters its parameters, steps the block and all-gathers
// the new anchor. CO2 takes no ZeRO stage alone: each rank's
// guess needs the whole anchor and outer momentum (plan.cpp says so to the caller).
//
// Shard groups (plan.shard_group = S > 1; localsgd / DiLoCo / co2 with ZeRO stage 1-3): attach
// splits the data-parallel group of D ranks into D / S replicas of S consecutive ranks (the
// "replica" communicator, comm_) and, across them, the D / S ranks of each position (outer_comm_).
// Every step is the sync ZeRO path above over the replica: its S ranks are one model replica
// training synchronously, rank p owning block p of every bucket (its shard). Every tau steps
// the outer rule runs between the replicas exactly as it does unsharded between single ranks,
// with the rank's shard standing for the flat model: anchor, outer momentum, co2's guess and the
// pseudo-gradient buffer are its shard's elements (1/S of the model each, the padding zero and
// staying zero), the pseudo-gradient is all-reduced over outer_comm_ (the replicas' S outer
// all-reduces run at once, each 1/S of the model; co2's in the background as ever), and the
// whole-model quantities — the clip's momentum norm, co2's penalty norms, whether a replica's
// round or an average is not finite — are summed over the replica (sum_over_model), so each replica
// decides as one. The rule writes the new shard (anchor, guess, merge); stages 1-2 then
// all-gather it into the whole parameters over the replica, stage 3 keeps just the shard. What
// the stage shards, per rank: 1 the inner optimizer state and the outer state; 2 also the
// reduced gradients; 3 also the parameters between steps — ParallelStats' memory figures count
// them as for the sync mode. A NaN in one rank's batch makes its whole replica skip that step
// (the ZeRO norm is the replica's), still counted toward the round; a replica whose shard is
// not finite at a round end drops its round as one.
//
// The one thing to know: a buffer being reduced is never touched. DDP reduces per-bucket copies
// of the gradients; CO2 reduces a snapshot of the pseudo-gradient, never live parameters, and
// only one round is in flight. A peer failure surfaces from step() as kPeerFailed / kTimeout.
//
// NaN and Inf (issue #25). DDP: every rank updates from the same averaged gradients, so every
// rank must skip a step alike. A rank whose loss is not finite marks the first gradient bucket it
// reduces with a NaN (on_loss), so the averaged gradients are non-finite on every rank whenever
// any rank's loss or gradients are, and every rank's optimizer (or ZeRO's global norm) skips the
// step. Local SGD / co2: an inner step skipped for NaN is this rank's alone, and still counts
// toward the round, so the ranks' round ends stay matched. At a round end a rank whose own
// pseudo-gradient holds NaN or Inf contributes zeros instead (its round is dropped: it restarts
// from the anchor), and an outer step whose averaged pseudo-gradient still is not finite (only
// ZeRO 1 local SGD, which averages parameters, or an overflow) is skipped on every rank: anchor
// and outer momentum stay as they were.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/exec/trainer.h"
#include "core/parallel/grad_topk.h"
#include "core/parallel/outer.h"
#include "core/parallel/plan.h"
#include "core/parallel/quantize.h"
#include "transport/coll/comm_buffer.h"
#include "transport/coll/communicator.h"

namespace cohort::parallel {

// Cumulative since attach (times in seconds, measured on the training thread).
struct ParallelStats {
  int64_t rounds = 0;            // DDP: steps; localsgd/co2: outer rounds completed
  double compute_seconds = 0;    // step time outside waits for communication
  double comm_seconds = 0;       // collectives in flight: launch to observed completion
  double wait_seconds = 0;       // the training thread blocked on collectives
  double hidden_fraction = 1;    // share of comm_seconds overlapped with compute: 1 - wait/comm
  double last_staleness_scale = 1;  // co2: the penalty factor of the last outer step
  double last_momentum_norm = 0;    // outer momentum L2 norm before clipping, last outer step
  // co2: the current round's length and the steps its average travels before the merge (the
  // plan's, or chosen under overlap auto from the two times after them: how long the last
  // merged average took to arrive, the quickest rank's — over F fragments the slowest of a
  // round's fragments' averages, each ~1/F of the model — and the compute time per step, the
  // slowest rank's).
  int64_t tau = 0;
  int64_t overlap = 0;
  double outer_comm_seconds = 0;
  double step_seconds = 0;
  // localsgd, co2: the fragments the outer synchronisation is cut into (plan.outer_fragments),
  // the outer collectives this rank launched (one per fragment's round end), and the most bytes
  // one of them carries from this rank (the largest fragment, or co2's low-bit message, or
  // ZeRO 1's padded fragment): the peak bandwidth the outer synchronisation needs, ~1/F of the
  // model's bytes.
  int64_t outer_fragments = 0;
  int64_t outer_syncs = 0;
  int64_t outer_sync_bytes = 0;
  int64_t buckets = 0;              // DDP: gradient buckets per step
  // ZeRO 3: bucket all-gathers of parameters, and those launched ahead of the node that first
  // needs them (prefetched; the others block the training thread until they arrive).
  int64_t parameter_gathers = 0;
  int64_t parameter_gathers_prefetched = 0;
  // The most bytes of whole parameters held at once during a step: every parameter, except
  // under ZeRO 3: the gathered buckets and the buffers their all-gathers land in.
  int64_t peak_parameter_bytes = 0;
  // Model state held by this rank after a step, in bytes (measured from the buffers it owns):
  // parameters (the whole fp32 parameters that hold memory — none under ZeRO 3 between steps —
  // plus the fp32 shard copy the ZeRO optimizer steps),
  // reduced gradients (DDP and stage 1: the full bucket buffers; stage 2: only the shard — the
  // bucket buffers are freed once reduced) and optimizer state (stage >= 1: the shard's only;
  // under top-k compression also the residuals, a whole model's worth, and the messages among the
  // gradients').
  // The trainer's own backward outputs (the local, unreduced gradients) are not counted.
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  // localsgd, co2: the outer collectives alone (the pseudo-gradient's average, launch to observed
  // completion, and the training thread's waits for it): co2's is hidden behind the local steps,
  // localsgd's is all waited. Under shard groups comm_/wait_seconds also hold the replica's ZeRO
  // collectives of every step; these do not.
  double outer_seconds = 0;
  double outer_wait_seconds = 0;
  double outer_hidden_fraction = 1;  // 1 - outer_wait_seconds / outer_seconds (1 before any)
  // co2: of outer_wait_seconds, what every rank of the data-parallel group waited too — per round
  // (from one round end to the next), the least any rank waited for its averages, summed over
  // the rounds whose reduction of it has arrived (all but the last one or few). The rank that
  // launches its average last waits for the transfer alone, every other rank also for that rank:
  // so this is the transfers' own exposed time, and the rest of a rank's waits went to ranks
  // slower to reach the round's end (uneven steps: more work, a busier core; over shared memory,
  // where a transfer takes microseconds, such waits remain). Where the link is busy for longer
  // than a round, the waits themselves decide which rank is last, and this is a lower bound.
  // 0 in the other modes.
  double outer_shared_wait_seconds = 0;
  int shard_group = 1;               // plan.shard_group: ranks per replica
  // sync: the gradient bytes this rank puts on the wire a step — its buckets' fp32 bytes, or
  // under top-k compression (plan.grad_keep < 1) its messages' — and the kept fraction.
  int64_t gradient_sync_bytes = 0;
  double grad_keep = 1;
};

class DataParallel : public StepHook {
 public:
  // Validates the plan against comm's size (kInvalidPlan / kUnsupported), requires contiguous
  // fp32 parameters (kUnsupported), broadcasts rank 0's parameters (collective: every rank
  // calls attach in the same order) and installs the hook into trainer, which shares ownership.
  // trainer must outlive its use of the hook; comm is shared.
  //
  // A trainer on the CUDA device: comm (host memory) carries everything through host copies
  // of the device values; DDP's gradient buckets instead stay in device memory and are reduced
  // over device_comm when one is given (a communicator on device buffers — NCCL — of the same
  // ranks, in the same order, whose operations wait for the compute stream's work:
  // core/parallel/device_comm.h makes one). ZeRO stages of DDP need host parameters
  // (kUnsupported on the device); local SGD and CO2, ZeRO 1 of their outer state included, run
  // on the host copies.
  static std::shared_ptr<DataParallel> attach(Trainer& trainer, const PlanConfig& plan,
                                              std::shared_ptr<transport::coll::Communicator> comm,
                                              std::shared_ptr<transport::coll::Communicator> device_comm = nullptr);
  DataParallel(const PlanConfig& plan, std::shared_ptr<transport::coll::Communicator> comm);
  ~DataParallel() override;

  void begin_step() override;
  void on_gradient(size_t index, const Tensor& grad) override;
  // DDP: keeps the loss to mark the first bucket reduced when it is not finite.
  void on_loss(const Tensor& loss) override;
  void before_update(std::vector<Tensor>& grads) override;
  // ZeRO stage >= 1: steps this rank's shard and all-gathers the parameters (zero.cpp).
  bool apply_update(std::vector<Tensor>& params, std::vector<Tensor>& grads) override;
  double applied_grad_norm() const override {
    return shard_optimizer_ ? shard_optimizer_->last_grad_norm() : -1.0;
  }
  void after_update(std::vector<Tensor>& params, int64_t step) override;
  // ZeRO stage 3 (zero.cpp): gathers a bucket before its first reader, releases it after the last.
  bool observes_nodes() const override { return plan_.zero_stage >= 3; }
  void before_node(size_t position) override;
  void after_node(size_t position) override;
  void materialize_parameters(std::vector<Tensor>& params, bool keep_values) override;
  // Local SGD, SlowMo, DiLoCo and co2 over more than one replica: the average of every data rank's
  // parameters (replicas of equal size under shard groups: each counted alike), an all-reduce
  // over every data rank. DDP, or a single replica: false.
  bool average_replicas(const std::vector<Tensor>& params, std::vector<Tensor>& average) override;

  ParallelStats stats() const;
  // DDP's buckets are reduced in device memory over the device communicator.
  bool reduces_on_device() const { return device_comm_ != nullptr; }
  const PlanConfig& plan() const { return plan_; }
  const std::vector<float>& anchor() const { return anchor_; }
  // Shard groups: where each element of this rank's outer state (its shard, fragment after
  // fragment) sits in the whole model — its flat index over the trainer's parameters in order, -1
  // for a bucket's padding — and where each fragment begins in it (low-bit messages' blocks start
  // there). Empty without groups, where the outer state is the flat model fragment after fragment.
  struct OuterLayout {
    std::vector<int64_t> flat;
    std::vector<size_t> fragment_begin;
  };
  OuterLayout outer_layout() const;
  const std::vector<float>& outer_momentum() { return outer_.momentum(); }

  // Outer state into / out of a checkpoint's extra section ("parallel.*" entries): anchor,
  // outer momentum, inner-step count; co2 also this rank's guess and
  // its round's shape ("parallel.co2.*", with the rule's version), and the reduction in
  // flight — waited for at save time and stored as its result, so a resumed run merges it at the
  // same step as if never stopped. load_state throws kInvalidArgument when the entries are
  // missing or sized for another model, and for co2 state written by the earlier
  // one-round-stale rule (no "parallel.co2.rule"), which this rule cannot continue.
  // The model-sized vectors are written in the whole model's layout (save_outer_vector) with the
  // replica's index: a rank of replica d resumes replica d's file under another tensor grid or
  // pipeline (the same number of replicas; outer_fragments > 1 too: the fragments are cut by the
  // whole model's parameters, so their saved pending averages mean the same ones). Files of
  // earlier builds (this rank's flat vectors) still load under the layout that wrote them.
  // Under ZeRO they hold this rank's (outer) optimizer shard instead ("parallel.zero.*"): every rank
  // saves its own file, and a load needs the same world, rank and bucket layout. Under shard
  // groups both: the inner optimizer's shard ("parallel.zero.*") and the outer state of this
  // rank's shard under the unsharded names, with "parallel.shard_group"; a load needs the same
  // group size, position in the replica and bucket layout.
  void save_state(checkpoint::CheckpointExtra& extra);
  void load_state(const checkpoint::CheckpointExtra& extra);
  // After the trainer's parameters were replaced by a checkpoint that holds no outer state of
  // this plan's mode (one written by a plain trainer, by DDP, or — under DDP — by a local-
  // updating run, whose ranks' files hold each replica's own parameters): every replica is set
  // to the ranks' average of them (under DDP their optimizer states too), and local updating
  // restarts its outer state from it, as
  // attach does (anchor = the parameters, no outer momentum, no average in flight, a new
  // round). Without this the anchor stayed where attach left it — the initial weights — and the
  // first outer step pulled the loaded model back toward them; DDP's replicas stayed apart. A
  // collective over every data rank. kUnsupported under ZeRO or shard groups, whose state a
  // checkpoint must hold (load_state).
  void restart_from_parameters(std::vector<Tensor>& params);
  // After the trainer loaded a checkpoint (its parameters and optimizer state), the hook's part
  // of it: load_state where the file holds this mode's outer state (always under ZeRO and shard
  // groups, whose state must come from it; DDP: top-k's residuals), restart_from_parameters where
  // it holds none (local updating) or holds a local-updating run's replicas (DDP). A collective
  // over the data ranks where it restarts.
  void apply_checkpoint(const checkpoint::CheckpointExtra& extra);
  // Local updating: parameter `index` was written from outside a step on this rank (a
  // set_parameter): its elements of the anchor and of the round's start take the new values, so
  // the next round end measures the replica's progress from them, not from the values before.
  // Every rank writes the same values (as DDP's replicas need too). A no-op for DDP.
  // check_parameter_write throws kUnsupported, before anything is written, where the outer state
  // is sharded (ZeRO 1 local SGD, shard groups).
  void check_parameter_write() const;
  void parameter_written(const std::vector<Tensor>& params, size_t index);

 private:
  using Clock = std::chrono::steady_clock;
  struct Bucket {
    std::vector<size_t> params;   // parameter indices, in production (reverse) order
    std::vector<size_t> offsets;  // element offset of each in buf
    // Padded to a multiple of the world under ZeRO (zeros at the end). In the communicator's
    // registered memory when it persists (DDP, ZeRO 1): reduced in place there.
    transport::coll::CommBuffer buf;
    Tensor dev;              // instead of buf: the bucket in device memory (DDP over device_comm_)
    size_t numel = 0;        // elements of its parameters (buf may be longer: padding)
    size_t padded = 0;       // ZeRO: numel rounded up to a multiple of the world, else numel
    size_t block = 0;        // ZeRO: padded / world, the elements each rank owns
    size_t shard_offset = 0;  // ZeRO: where this rank's block lives in the flat shard
    size_t remaining = 0;
    transport::coll::WorkPtr work;
    Clock::time_point launched, done;
    bool finished = false;
    // ZeRO 3: the parameters' all-gather into `gathered`, whose slices the parameters borrow
    // while resident (or, after a restore, memory of their own).
    std::vector<float> gathered;
    transport::coll::WorkPtr gather;
    Clock::time_point gather_launched;
    bool resident = true;
    int readers = 0;         // uses (below) in progress
    int64_t held_bytes = 0;  // bytes held for its whole parameters (gathered, or their own)
    // Top-k compression (plan.grad_keep < 1, grad_topk.h): buf holds this rank's gradient plus
    // residual from launch to settle; its message, and every rank's after the all-gather.
    std::unique_ptr<GradTopk> topk;
    std::vector<uint8_t> message, messages;
  };
  // ZeRO 3: the span of step positions over which one bucket's parameters are read — one per
  // segment of the step that reads it (forward and backward; under micro-batches each schedule
  // slot: Trainer::step_segments), merged when no other bucket is needed in between.
  struct Use {
    size_t bucket, first, last;
  };
  void build_buckets(const std::vector<Tensor>& params);
  // Top-k compression (grad_topk.h): averages every bucket's messages into the gradients, then
  // settles every residual alike (kept when the averaged gradients are not finite: the step is
  // skipped on every rank). Its residuals in a checkpoint, in parameter order (save_state).
  void average_topk(std::vector<Tensor>& grads);
  void save_topk_state(checkpoint::CheckpointExtra& extra);
  void load_topk_state(const checkpoint::CheckpointExtra& extra);
  // The buckets' residuals into `into_flat`, or (into_flat null) from `from_flat`: the model's
  // elements in parameter order.
  void copy_residuals(float* into_flat, const float* from_flat);
  // A checkpoint's int entry `name`; kInvalidArgument "the checkpoint has no '<name>'<hint>".
  static int64_t saved_int(const checkpoint::CheckpointExtra& extra, const std::string& name, const char* hint = "");
  // The outer state in the whole model's layout: a flat vector of this rank's parameters written
  // as one whole tensor per parameter under "key/<parameter>" (a collective over the model axes,
  // like the checkpoint's parameters), and read back as this rank's blocks. So a replica's state
  // resumes under another tensor grid or pipeline, or on one process.
  void save_outer_vector(checkpoint::CheckpointExtra& extra, const std::string& key,
                         const std::vector<float>& flat) const;
  std::vector<float> load_outer_vector(const checkpoint::CheckpointExtra& extra, const std::string& key) const;
  // The saved replica is this rank's, among as many (the tensor grid and pipeline may differ).
  void check_outer_layout(const checkpoint::CheckpointExtra& extra) const;
  // DDP: the last bucket of a step gets element 0 set to NaN when this rank's loss is not finite,
  // so every rank of the group sees it in the average. It waits for the loss (held_) where the
  // gradients come first: under micro-batches the loss comes after the schedule (trainer.h).
  void mark_if_loss_not_finite(Bucket& b);
  // Local SGD / co2 (unsharded and sharded): zeros this rank's own pseudo-gradient of n floats
  // when it holds NaN or Inf (logged), so that its round is dropped rather than spread.
  void drop_if_not_finite(float* d, size_t n, const char* what);
  // Whether the averaged pseudo-gradient d (n floats: all of it, or this rank's ZeRO 1 block) is
  // finite, decided alike on every rank: unsharded, every rank holds the same bytes; a block
  // takes one flag all-reduce. false is logged: the caller skips the outer step.
  bool outer_finite(const float* d, size_t n);
  // The mean over every data rank of `ts` (f32 tensors on any device, flattened in order): an
  // all-reduce over group_comm_, a collective (average_replicas, restart_from_parameters).
  std::vector<float> data_rank_mean(const std::vector<Tensor>& ts);
  void poll();  // records completion times of collectives in flight (throws their failure)
  static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
  // The training thread waited on communication from `start` until now: counted in the step's
  // wait (not compute) and the run's. Returns now.
  Clock::time_point note_wait(Clock::time_point start);
  // A blocking collective from `start` until now: all of it communication, all of it waited.
  // Returns its seconds.
  double note_blocking(Clock::time_point start) {
    const double took = seconds(note_wait(start) - start);
    stats_.comm_seconds += took;
    return took;
  }
  // Waits out a collective a failed step left in flight and drops it; its failure is not
  // thrown here (the communicator's sticky error reaches the next collective).
  static void settle(transport::coll::WorkPtr& work);
  // Streaming outer synchronisation (plan.outer_fragments; the rule is the comment above
  // after_update): fragment f is cut from the whole model's parameters (model_graph(), graph
  // order, whole sizes), so it names the same parameters under every tensor grid and pipeline;
  // on this rank it is `params` (this rank's parts of them, local indices ascending; none where
  // another pipeline stage holds them all), the elements [begin, begin + count) of the outer
  // state, whose rounds end `offset` steps into the plan's (fragment 0's: 0). Unsharded local SGD
  // and co2 run every round end, reduction and merge per fragment; with one fragment (the
  // default) it is the whole model. Each fragment has at most one average in flight, in its own
  // slice of inflight_.
  struct Fragment {
    std::vector<size_t> params;
    size_t begin = 0, count = 0;
    int64_t offset = 0;
    // ZeRO 1 of the outer state (outer_shard.cpp): the fragment padded to a multiple of the world
    // is `block` elements a rank; this rank's block lives at anchor_[shard_begin], the padded
    // fragment at inflight_[padded_begin].
    size_t block = 0, shard_begin = 0, padded_begin = 0;
    // Shard groups (shard_group.cpp): its elements in this rank's ZeRO shard, (offset, count)
    // pieces in shard order, laid end to end at [begin, begin + count) of the outer state.
    std::vector<std::pair<size_t, size_t>> pieces;
    transport::coll::WorkPtr work;     // its average in flight (co2)
    Clock::time_point launched, done_at;  // launched; when poll() saw it arrive
    bool have_result = false;    // co2: its slice of inflight_ holds the arrived average
    bool merge_pending = false;  // co2: a round's average not yet merged
    // co2 with outer_bits 8 or 4: the fragment's quantizer (its blocks start at its first
    // element), this rank's message and every rank's, gathered; decoded: their average is in the
    // fragment's slice of inflight_ (decode_average). The message carries the pseudo-gradient
    // plus residual_, what earlier messages' rounding left out (end_round_co2).
    std::unique_ptr<Quantizer> quant;
    std::vector<uint8_t> packed, gathered;
    bool decoded = true;
  };
  std::vector<Fragment> fragments_;
  // The outer state's layout: fragment after fragment, each its parameters in local order, so
  // parameter i's elements start at outer_at_[i] (with one fragment, or without model axes, the
  // parameters' own flat order). Also the model axes' norm_ranges_ in that layout.
  std::vector<size_t> outer_at_;
  void build_fragments(const std::vector<Tensor>& params);
  // The fragments' offsets into rounds of tau steps: the plan's, or under overlap auto the
  // running round's (update_round_shape; merges are pending then on no fragment but the first).
  void place_fragments(int64_t tau);
  bool any_in_flight() const;
  // co2: steps fragment fr has run of its current round, 1..round_tau_ after a step's increment.
  int64_t fragment_position(const Fragment& fr) const;
  // Fragment fr's slice of inflight_ = anchor - this rank's parameters there (its pseudo-
  // gradient), zeroed when not finite (drop_if_not_finite): the start of both round ends.
  void take_pseudo_gradient(const Fragment& fr, const std::vector<Tensor>& params);
  void end_round_blocking(Fragment& fr, std::vector<Tensor>& params);
  // plan.average_inner_state (localsgd, after fragment fr's round end): the inner optimizer's
  // moment tensors of fr's parameters replaced by their mean over the data ranks, summed in
  // inner_state_ with a trailing count of the ranks whose state was finite (the others send
  // zeros and take the mean). A blocking all-reduce over the data ranks (outer_comm_).
  void average_inner_state(const Fragment& fr, std::vector<Tensor>& params);
  std::vector<float> inner_state_;
  // Unsharded local SGD and co2: the outer step with the averaged pseudo-gradient d (indexed like
  // the flat model) on fragment fr's elements, skipped on every rank when they are not finite;
  // the clip's norm is the whole model's momentum.
  void outer_step(const float* d, const Fragment& fr);
  // ZeRO 1 of the outer state (outer_shard.cpp).
  bool outer_sharded() const { return plan_.mode != SyncMode::kSync && plan_.zero_stage >= 1 && !grouped(); }
  // Shard groups: the replica's ranks train synchronously (the DDP / ZeRO path of each step).
  bool grouped() const { return plan_.shard_group > 1; }
  bool replica_sync() const { return plan_.mode == SyncMode::kSync || grouped(); }
  // Shard groups: comm_ becomes the replica's ranks, outer_comm_ the ranks of this position in
  // every replica (collective over the data-parallel group); the outer state is this rank's shard.
  void split_shard_groups();
  void init_outer_over_shard();
  // co2 with outer_bits 8 or 4: each fragment's quantizer and message buffers (a message from
  // each rank of outer_comm_) and the error feedback (residual_), over the outer state as laid out
  // (the flat model, or under shard groups this rank's shard).
  void init_low_bit_messages();
  // Each fragment's pieces of this rank's shard, its slice of the outer state, norm_ranges_.
  void cut_shard_into_fragments();
  // The outer rule's view of this rank's part of the model, fragment fr's elements [begin, begin
  // + count) of `flat` (indexed like the outer state): the parameters (unsharded) or the ZeRO
  // shard (shard groups; write_outer then has the parameters gathered at the step's end).
  void read_outer(const Fragment& fr, const std::vector<Tensor>& params, float* flat) const;
  void write_outer(const Fragment& fr, const float* flat, std::vector<Tensor>& params);
  bool shard_written_ = false;
  // The outer collectives' share of the statistics (ParallelStats::outer_seconds).
  void note_outer(double comm_seconds, double wait_seconds) {
    stats_.outer_seconds += comm_seconds;
    stats_.outer_wait_seconds += wait_seconds;
    round_outer_wait_ += wait_seconds;
  }
  // A blocking outer collective from `start` until now: counted as note_blocking does, and all of
  // it in the outer share (waited whole).
  void note_outer_blocking(Clock::time_point start) {
    const double took = note_blocking(start);
    note_outer(took, took);
  }
  // outer: the model in the outer state's layout (fragment after fragment).
  void init_outer_shard(const std::vector<float>& outer);
  void end_round_sharded(const Fragment& fr, std::vector<Tensor>& params);
  // Under model axes: the squares of this rank's momentum blocks over the elements it counts in
  // the whole model's norms (norm_ranges_), every fragment's.
  double counted_block_sum_of_squares();
  // Blocking sum of n floats over `comm`'s ranks, reduced in `buffer` (a member: a failed
  // reduction may leave a send holding it, work.h); returns values[0]. sum_over_ranks is it over
  // the data-parallel communicator (the replica under shard groups), sum_over_model_axis over the
  // model axis, sum_over_model over the whole replica (above).
  double sum_over(transport::coll::Communicator& comm, std::vector<float>& buffer, float* values, size_t n);
  double sum_over_ranks(float* values, size_t n) { return sum_over(*comm_, scalars_, values, n); }
  std::vector<float> scalars_;  // sum_over_ranks' reduction buffer
  std::vector<float> topk_average_;  // top-k: one bucket's averaged gradient (grown to the largest padded bucket)
  void save_outer_shard(checkpoint::CheckpointExtra& extra);
  void load_outer_shard(const checkpoint::CheckpointExtra& extra);
  void end_round_co2(Fragment& fr, std::vector<Tensor>& params);
  void merge_co2(Fragment& fr, std::vector<Tensor>& params);
  // outer_bits 8 or 4: fr's slice of inflight_ = the mean of its gathered messages, summed in
  // rank order.
  void decode_average(Fragment& fr);
  // co2: the round-end and merge bookkeeping (round shape, overlap auto's timing).
  void note_round_end();
  void note_merge(double comm_seconds, bool first_fragment);
  // Waits for overlap auto's reduction of the ranks' times, if one is in flight.
  void wait_timing();
  // co2: adds the ranks' least outer wait of each round whose reduction has arrived to
  // ParallelStats::outer_shared_wait_seconds, waiting for the oldest until at most `in_flight`
  // remain.
  void collect_shared_waits(size_t in_flight);
  // overlap auto: at a merge, the next merge's overlap and the running round's tau from the
  // ranks' times (note_round_end says which; plan.h, choose_round_shape).
  void update_round_shape();
  // co2's own checkpoint entries: the round's shape, overlap auto's times and the rule's
  // version. load_co2_state verifies them (refusing another rule's state by name) and returns
  // what applies them.
  void save_co2_state(checkpoint::CheckpointExtra& extra);
  std::function<void()> load_co2_state(const checkpoint::CheckpointExtra& extra);
  // Tensor and pipeline parallelism (the trainer's "model" axis, of more than one rank), and
  // shard groups (the replica's ranks): this rank holds part of the model, so every decision the
  // outer step takes from a norm or a finiteness check (the momentum clip, the staleness penalty,
  // skipping or dropping a round, co2's merge) is taken from the whole model's, summed over
  // the replica — its shard group's ranks (comm_), then the model axis — with each replicated
  // parameter counted once (norm_ranges_: the ranges of the outer state this rank counts), so
  // every rank of the replica decides alike. Without either these are plain local sums.
  double model_sum_of_squares(const float* flat);  // over outer_numel_ floats; collective on the replica
  bool any_over_model(bool local);                // collective on the replica
  double sum_over_model(float* values, size_t n) {
    if (grouped()) sum_over(*comm_, model_scalars_, values, n);
    return model_ ? sum_over_model_axis(values, n) : values[0];
  }
  double sum_over_model_axis(float* values, size_t n) { return sum_over(*model_, model_scalars_, values, n); }
  std::shared_ptr<const CommAxes> axes_;
  transport::coll::Communicator* model_ = nullptr;    // the tensor / pipeline model axis (ZeRO's norm)
  // Whether the replica is more than this rank (model axes, shard groups): the sums above are collective.
  bool replica_spans_ranks() const { return model_ != nullptr || grouped(); }
  std::vector<std::pair<size_t, size_t>> norm_ranges_;  // (offset, count) in the outer state
  std::vector<float> model_scalars_;  // sum_over_model's buffer; kept alive as scalars_ is (~DataParallel)
  // ZeRO (zero.cpp).
  void build_shards(const optim::Optimizer& inner);
  void launch_reduction(Bucket& b);
  // This rank's block of the bucket's averaged gradients into shard_grads_: from `averaged` (the
  // bucket's padded length), or by default from buf, which stage 2 then frees.
  void take_gradient_shard(Bucket& b, const float* averaged = nullptr);
  void copy_shard(const Bucket& b, std::vector<Tensor>& params, float* shard, bool to_params) const;
  // For each parameter j of bucket b that rank `rank`'s block covers — bucket elements [lo, hi),
  // lo = rank * block; parameter j covers [offsets[j], offsets[j] + numel) — f(j, begin, end, lo)
  // with [begin, end) their intersection (the padding, >= b.numel, is in no parameter).
  template <typename F>
  static void for_each_block_piece(const Bucket& b, size_t rank, const std::vector<Tensor>& params, F f) {
    const size_t lo = rank * b.block, hi = lo + b.block;
    for (size_t j = 0; j < b.params.size(); ++j) {
      const size_t begin = std::max(lo, b.offsets[j]);
      const size_t end = std::min(hi, b.offsets[j] + static_cast<size_t>(params[b.params[j]].numel()));
      if (begin < end) f(j, begin, end, lo);
    }
  }
  double global_grad_norm();
  void gather_parameters(std::vector<Tensor>& params);
  void fill_memory_stats(ParallelStats& s) const;
  void build_uses(const Trainer& trainer);
  void begin_step_sharded();
  void launch_gather(Bucket& b, bool prefetch);
  void finish_gather(Bucket& b, std::vector<Tensor>& params);
  void release_bucket(Bucket& b, std::vector<Tensor>& params);
  void note_gathered_bytes(int64_t delta);
  void save_shard_state(checkpoint::CheckpointExtra& extra);
  // Verifies the entries (throwing as load_state says) and returns what applies them.
  std::function<void()> load_shard_state(const checkpoint::CheckpointExtra& extra);

  PlanConfig plan_;
  // The data-parallel group; under shard groups its replica (S ranks) — the sync and ZeRO path's
  // communicator either way.
  std::shared_ptr<transport::coll::Communicator> comm_;
  // Where the outer rule averages: comm_, or under shard groups the ranks of this position in
  // every replica. group_comm_: the whole data-parallel group (overlap auto's times).
  std::shared_ptr<transport::coll::Communicator> outer_comm_, group_comm_;
  std::shared_ptr<transport::coll::Communicator> device_comm_;  // DDP buckets in device memory
  OuterOptimizer outer_;
  size_t numel_ = 0;
  size_t outer_numel_ = 0;  // the outer state's elements: numel_, or under shard groups the shard's
  Trainer* trainer_ = nullptr;  // for the optimizer state size of stage 0 (outlives the hook)
  // ZeRO: this rank's flat shard (its block of every bucket, in bucket order), the optimizer
  // that owns the shard's state, and the shard's reduced gradient.
  std::unique_ptr<optim::Optimizer> shard_optimizer_;
  Tensor shard_params_, shard_grads_;
  // ZeRO 3: bucket uses in order of their first position; the uses starting and ending at each
  // position; how many uses have had their gather launched; whether the parameters are whole.
  std::vector<Use> uses_;
  std::vector<std::vector<size_t>> starting_, ending_;
  size_t next_gather_ = 0;
  bool whole_ = true;
  bool in_step_ = false;         // the peak of whole parameter bytes is a step's
  int64_t gathered_bytes_ = 0;   // whole parameters and all-gather buffers held now
  // DDP.
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // parameter index -> bucket
  std::vector<size_t> offset_of_;  // parameter index -> offset in its bucket
  // Outer state (localsgd, co2): the anchor x_k (anchor_), the
  // pseudo-gradient snapshot being reduced (inflight_) and a second buffer (result_, localsgd).
  // co2 also keeps this rank's guess G while a merge is pending (round_start_). Under ZeRO 1
  // (localsgd, outer_shard.cpp) anchor_, the momentum and result_ hold this rank's block of each
  // fragment, outer_block_ elements in all, and inflight_ every fragment padded. inflight_ (and result_) are
  // reduced in the communicator's registered memory where it has some (comm_buffer.h).
  std::vector<float> anchor_, round_start_;
  transport::coll::CommBuffer inflight_, result_;
  // co2 with outer_bits 8 or 4 (error feedback): the part of this rank's pseudo-gradients its
  // low-bit messages have not carried yet, in the outer state's layout. Each message sends the
  // round's pseudo-gradient plus it and keeps what the message's rounding drops, so every
  // pseudo-gradient reaches the anchor in full — its rounding error a round or more late instead
  // of never (a block's values below half a level were zeroed every round, a bias that cost the
  // MLP ~0.2 points at 4 bits). Empty otherwise.
  std::vector<float> residual_;
  size_t outer_block_ = 0;
  // co2: the round's shape. round_pos_ counts inner steps since the last round end; the round
  // ends when it reaches round_tau_, and the merge of the average launched there falls at
  // merge_overlap_. The plan's tau and overlap, or re-chosen at each merge under overlap auto.
  int64_t round_pos_ = 0, round_tau_ = 0, merge_overlap_ = 0;
  // overlap auto: [seconds the last merged average took to arrive, compute seconds per step of
  // the round just ended], maxed over the ranks from a round end to its merge (timing_work_).
  std::vector<float> timing_;
  transport::coll::WorkPtr timing_work_;
  // co2: this rank's outer waits since the last round end (note_outer), and the rounds' before,
  // each negated and maxed over the data-parallel group (the least any rank waited) in the
  // background, oldest first. A round end launches one and takes those that have arrived without
  // waiting: on a link that is busy for longer than a round the reduction arrives late, and
  // waiting for it there (or at the merge, tried first: 4 ranks at 2 Mbit/s waited 9 s instead of
  // 6) would add to the waits it measures. Past kSharedWaitsInFlight the oldest is waited for.
  static constexpr size_t kSharedWaitsInFlight = 4;
  struct SharedWait {
    float value;  // this rank's wait, negated, then the ranks' maximum of it (the least wait)
    double own;   // this rank's wait: the least is never more (value is its float rounding)
    transport::coll::WorkPtr work;
  };
  double round_outer_wait_ = 0;
  std::list<SharedWait> shared_waits_;  // stable addresses while in flight
  // This rank's: the last merged average's travel time (over F fragments the slowest of those
  // merged since fragment 0's merge: note_merge), -1 unknown.
  double merged_comm_seconds_ = -1;
  // The quickest rank's travel times of the last kTravelHistory merges, oldest first; overlap
  // auto decides on their median (update_round_shape).
  static constexpr size_t kTravelHistory = 5;
  std::vector<float> travel_history_;
  double round_compute_mark_ = 0;   // stats_.compute_seconds at the last round end
  int64_t inner_steps_ = 0;   // inner steps since attach (a round ends every tau)
  // DDP: this step's loss (on_loss), the buckets whose gradients are all in, and the last of
  // them while it waits for the loss (mark_if_loss_not_finite).
  Tensor loss_;
  size_t buckets_complete_ = 0;
  Bucket* held_ = nullptr;
  // Statistics.
  ParallelStats stats_;
  Clock::time_point last_mark_;   // the end of the last step (after_update), or attach
  Clock::time_point step_began_;  // begin_step of the step running
  double step_wait_ = 0;
};

}  // namespace cohort::parallel
