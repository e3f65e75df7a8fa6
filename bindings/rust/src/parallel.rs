//! Parallel plans and data-parallel trainers: how a model is spread over the ranks of a
//! communicator — synchronous DDP, local SGD with an outer optimizer (localsgd, SlowMo, DiLoCo),
//! or CO2 (Sun et al., ICLR 2024) — and what such a trainer reports.

use std::path::Path;

use crate::comm::Comm;
use crate::error::{c_path, c_string, check, Result};
use crate::graph::Graph;
use crate::optim::Optimizer;
use crate::sys;
use crate::trainer::{Trainer, TrainerOptions};

/// When gradients or parameters are averaged.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SyncMode {
    /// Gradients averaged every step.
    Ddp,
    /// tau inner steps, then a blocking outer step.
    LocalSgd,
    /// tau inner steps, the outer average overlapped with the next round.
    Co2,
}

/// A named setting of the mode and every outer-optimizer field.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Preset {
    /// Mode and outer settings exactly as given.
    None,
    Ddp,
    /// Outer lr 1, momentum 0: plain parameter averaging.
    LocalSgd,
    /// Outer lr 1, momentum 0.5.
    SlowMo,
    /// Outer lr 0.7, Nesterov momentum 0.9.
    DiLoCo,
    /// DiLoCo's outer optimizer (lr 0.7, Nesterov momentum 0.9), no clip, staleness penalty
    /// off; over an SGD optimizer, plain averaging (lr 1, no momentum).
    Co2,
}

/// The options of a plan; see cohort_plan_options in cohort.h for each field's range.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct PlanOptions {
    /// Not None: sets mode and every outer_* / penalty / clip field.
    pub preset: Preset,
    /// Ranks in the data-parallel group; 0 = the whole communicator.
    pub data_parallel: i32,
    pub mode: SyncMode,
    /// Inner steps per round (localsgd, co2), >= 1.
    pub tau: i64,
    pub outer_lr: f64,
    /// In [0, 1).
    pub outer_momentum: f64,
    pub outer_nesterov: bool,
    /// co2: scale the stale pseudo-gradient by the gap.
    pub staleness_penalty: bool,
    pub penalty_constant: f64,
    /// Outer momentum L2-norm clip; 0 = off.
    pub clip_threshold: f64,
    /// 0..3: 1 shards optimizer state, 2 also gradients, 3 also parameters (2-3: DDP only).
    pub zero_stage: i32,
    /// DDP gradient bucket size, > 0.
    pub bucket_bytes: i64,
    /// localsgd, co2 with AdamW: normalise local steps by the second moment expected of the
    /// group's averaged gradient (no preset sets it; INVALID_PLAN under DDP).
    pub inner_noise_scaling: bool,
    /// co2: inner steps a round's average travels before it is merged, 1..=tau; 0 means 1, -1
    /// chosen (and re-chosen) from the measured all-reduce and step times.
    pub overlap_steps: i64,
    /// co2: bits per value of the pseudo-gradient each rank sends: 32, 8 or 4 (block-scaled
    /// integers averaged in fp32); 0 means the default: 4 under co2 (8 over an SGD optimizer), 32
    /// with shard groups or in another mode.
    pub outer_bits: i32,
    /// localsgd, co2: streaming outer synchronisation — the parameters cut, in graph order, into
    /// this many fragments of about equal bytes, fragment f synchronised f * tau / F steps into
    /// each round, so each outer all-reduce carries about 1/F of the model. 0 or 1: the whole
    /// model at once. InvalidPlan below 0 or above tau; Unsupported above 1 under DDP, overlap
    /// auto, ZeRO or a tensor / pipeline axis.
    pub outer_fragments: i32,
    /// localsgd, co2: shard groups — the data-parallel ranks as replicas of this many consecutive
    /// ranks, each training synchronously with ZeRO stage zero_stage (1..3) over its ranks, the
    /// outer rule between replicas on each rank's ZeRO shard (a rank's outer state and each outer
    /// all-reduce ~1/S of the model). 0 or 1: every rank its own replica. InvalidPlan below 0,
    /// above 1 with ZeRO stage 0, or (at trainer creation) not dividing the data-parallel degree;
    /// Unsupported above 1 under DDP, outer bits 8 / 4, noise scaling, fragments, a tensor /
    /// pipeline axis or an automatic layout.
    pub shard_group: i32,
    /// DDP: top-k compression of the gradients with error feedback — each gradient bucket sends
    /// only this fraction of its entries of largest magnitude (its gradient plus what earlier
    /// steps left unsent), the ranks average the messages, and the rest waits for later steps.
    /// 0 or 1: off. InvalidPlan below 0 or above 1; Unsupported below 1 outside DDP, with ZeRO
    /// stage 2 / 3, a tensor / pipeline axis or an automatic layout.
    pub grad_keep: f64,
    /// localsgd (the LocalSgd, SlowMo and DiLoCo presets): average every rank's inner optimizer
    /// state (SGD's momentum, AdamW's moments) over the data-parallel ranks at each round end, as
    /// DDP's replicas share theirs; one more blocking all-reduce a round, of the state's size.
    /// InvalidPlan outside localsgd mode; Unsupported with shard groups.
    pub average_inner_state: bool,
    /// The tensor grid (AxoNN's X, Y, Z axes), ranks per axis, >= 1. Each rank trains its part
    /// of the model (split layers hold blocks): a split layer's weight is cut over X along its
    /// in-features and over Y along its out-features (tensor_y alone is Megatron's 1D), and its
    /// block over Z along its rows; the ranks of one tensor group step on the same rows, except
    /// that the Z ranks each step on their own.
    pub tensor_x: i32,
    pub tensor_y: i32,
    pub tensor_z: i32,
    /// Wait for each tensor-parallel collective at once instead of overlapping it (comparison).
    pub tensor_overlap_off: bool,
    /// Activation checkpointing per transformer block (a gpt's "h.<layer>." nodes): backward
    /// recomputes each block's activations from its input; the same gradients, less activation
    /// memory. A model without blocks is refused when the trainer is made (INVALID_PLAN).
    pub activation_checkpointing: bool,
    /// Sequence parallelism over tensor_y: 0 none, 1 Megatron's (the regions between split layers
    /// hold each rank's block of the tokens), 2 the all-to-all kind (tensor_y a sequence axis:
    /// attention exchanges the tokens for heads). tensor_y 1 is INVALID_PLAN; a model it does not
    /// fit is refused when the trainer is made.
    pub sequence_parallel: i32,
    /// Pipeline parallelism: the model cut into this many stages over consecutive ranks (ranks
    /// laid out row-major over data, pipe, x, y, z), each rank holding only its stages; 0 or 1 =
    /// none. INVALID_PLAN when negative, or when pipeline_stages x the tensor grid does not divide
    /// the communicator (when the trainer is made). The cuts: [`Plan::with_pipeline_cuts`].
    pub pipeline_stages: i32,
    /// Stages per rank (virtual stages), under the interleaved schedule only; 0 or 1 = one.
    pub pipeline_chunks: i32,
    /// Each rank's batch cut into this many micro-batches (their gradients summed: one step on
    /// the whole batch); 0 or 1 = one. INVALID_PLAN when it does not divide the graph's batch.
    pub micro_batches: i32,
    /// cohort_pipeline_schedule: 0 GPipe, 1 1F1B (the default), 2 interleaved 1F1B.
    pub pipeline_schedule: i32,
    /// The layout (data_parallel, the tensor grid, sequence parallelism, the pipeline fields,
    /// micro-batches, ZeRO stage, activation checkpointing) is the planner's to choose: resolve it
    /// with [`Plan::choose`]; a trainer refuses an automatic plan (INVALID_PLAN naming
    /// cohort_plan_choose).
    pub automatic: bool,
    /// [`Plan::choose`]: time a few steps of the K best predicted layouts and take the fastest
    /// measured; 0 takes the fastest predicted. INVALID_PLAN outside 0..=64.
    pub auto_trials: i32,
    /// Memory a rank may use, bytes: [`Plan::choose`] passes over layouts predicted to need more
    /// (INVALID_PLAN naming memory_limit_bytes when none fits), a trainer refuses a plan that
    /// does. 0: the host's memory over the ranks. Negative: INVALID_PLAN.
    pub memory_limit_bytes: f64,
    /// OP-Fence: the communicator's ranks become one pipeline, a stage per rank, whose rank
    /// order, cuts and top-k compression the trainer chooses from the links it measures between
    /// the ranks ([`Comm::probe_links`]) and their compute. The tensor grid and data_parallel
    /// must be 1 (UNSUPPORTED otherwise), pipeline_chunks 1, and no pipeline cuts or keep
    /// (INVALID_PLAN); pipeline_stages is ignored. Ranks other than world rank 0 may make their
    /// trainer without a graph ([`Trainer::new_parallel_without_graph`]).
    pub fence: bool,
    /// fence: whether a cut whose transfer would be the pipeline's bottleneck sends only the
    /// top-k entries of its activations (true, the default) or everything (false).
    pub fence_compression: bool,
    /// fence: the smallest share of entries a compressed cut keeps, in (0, 1]; 0 = the default
    /// 0.1. INVALID_PLAN naming fence_min_keep outside [0, 1].
    pub fence_min_keep: f64,
}

impl Default for PlanOptions {
    /// Preset None, the whole communicator, DDP, tau 1, outer lr 1, no momentum, no penalty
    /// (constant 1), no clip, ZeRO stage 0, 25 MiB buckets, no tensor parallelism (grid 1 x 1 x 1),
    /// no pipeline (1 stage, 1 chunk, 1 micro-batch, schedule 1F1B), not automatic, no trials,
    /// memory limit 0 (the host's memory over the ranks), no fence (compression on, minimum keep
    /// 0 = 0.01).
    fn default() -> PlanOptions {
        // SAFETY: never fails.
        PlanOptions::from_raw(&unsafe { sys::cohort_plan_options_default() })
    }
}

impl PlanOptions {
    /// Every field but pipeline_cuts and pipeline_keep (pointers the struct does not own).
    fn from_raw(raw: &sys::cohort_plan_options) -> PlanOptions {
        use sys::cohort_plan_preset as P;
        use sys::cohort_sync_mode as M;
        PlanOptions {
            preset: match raw.preset {
                P::COHORT_PRESET_DDP => Preset::Ddp,
                P::COHORT_PRESET_LOCALSGD => Preset::LocalSgd,
                P::COHORT_PRESET_SLOWMO => Preset::SlowMo,
                P::COHORT_PRESET_DILOCO => Preset::DiLoCo,
                P::COHORT_PRESET_CO2 => Preset::Co2,
                _ => Preset::None,
            },
            data_parallel: raw.data_parallel,
            mode: match raw.mode {
                M::COHORT_SYNC_LOCALSGD => SyncMode::LocalSgd,
                M::COHORT_SYNC_CO2 => SyncMode::Co2,
                _ => SyncMode::Ddp,
            },
            tau: raw.tau,
            outer_lr: raw.outer_lr,
            outer_momentum: raw.outer_momentum,
            outer_nesterov: raw.outer_nesterov != 0,
            staleness_penalty: raw.staleness_penalty != 0,
            penalty_constant: raw.penalty_constant,
            clip_threshold: raw.clip_threshold,
            zero_stage: raw.zero_stage,
            bucket_bytes: raw.bucket_bytes,
            inner_noise_scaling: raw.inner_noise_scaling != 0,
            overlap_steps: raw.overlap_steps,
            outer_bits: raw.outer_bits,
            outer_fragments: raw.outer_fragments,
            shard_group: raw.shard_group,
            grad_keep: raw.grad_keep,
            average_inner_state: raw.average_inner_state != 0,
            tensor_x: raw.tensor_x,
            tensor_y: raw.tensor_y,
            tensor_z: raw.tensor_z,
            tensor_overlap_off: raw.tensor_overlap_off != 0,
            activation_checkpointing: raw.activation_checkpointing != 0,
            sequence_parallel: raw.sequence_parallel,
            pipeline_stages: raw.pipeline_stages,
            pipeline_chunks: raw.pipeline_chunks,
            micro_batches: raw.micro_batches,
            pipeline_schedule: raw.pipeline_schedule,
            automatic: raw.automatic != 0,
            auto_trials: raw.auto_trials,
            memory_limit_bytes: raw.memory_limit_bytes,
            fence: raw.fence != 0,
            fence_compression: raw.fence_compression_off == 0,
            fence_min_keep: raw.fence_min_keep,
        }
    }

    fn to_raw(self) -> sys::cohort_plan_options {
        use sys::cohort_plan_preset as P;
        use sys::cohort_sync_mode as M;
        // SAFETY: never fails; gives the struct with its size set.
        let mut raw = unsafe { sys::cohort_plan_options_default() };
        raw.preset = match self.preset {
            Preset::None => P::COHORT_PRESET_NONE,
            Preset::Ddp => P::COHORT_PRESET_DDP,
            Preset::LocalSgd => P::COHORT_PRESET_LOCALSGD,
            Preset::SlowMo => P::COHORT_PRESET_SLOWMO,
            Preset::DiLoCo => P::COHORT_PRESET_DILOCO,
            Preset::Co2 => P::COHORT_PRESET_CO2,
        };
        raw.data_parallel = self.data_parallel;
        raw.mode = match self.mode {
            SyncMode::Ddp => M::COHORT_SYNC_DDP,
            SyncMode::LocalSgd => M::COHORT_SYNC_LOCALSGD,
            SyncMode::Co2 => M::COHORT_SYNC_CO2,
        };
        raw.tau = self.tau;
        raw.outer_lr = self.outer_lr;
        raw.outer_momentum = self.outer_momentum;
        raw.outer_nesterov = self.outer_nesterov as i32;
        raw.staleness_penalty = self.staleness_penalty as i32;
        raw.penalty_constant = self.penalty_constant;
        raw.clip_threshold = self.clip_threshold;
        raw.zero_stage = self.zero_stage;
        raw.bucket_bytes = self.bucket_bytes;
        raw.inner_noise_scaling = i32::from(self.inner_noise_scaling);
        raw.overlap_steps = self.overlap_steps;
        raw.outer_bits = self.outer_bits;
        raw.outer_fragments = self.outer_fragments;
        raw.shard_group = self.shard_group;
        raw.grad_keep = self.grad_keep;
        raw.average_inner_state = i32::from(self.average_inner_state);
        raw.tensor_x = self.tensor_x;
        raw.tensor_y = self.tensor_y;
        raw.tensor_z = self.tensor_z;
        raw.tensor_overlap_off = i32::from(self.tensor_overlap_off);
        raw.activation_checkpointing = i32::from(self.activation_checkpointing);
        raw.sequence_parallel = self.sequence_parallel;
        raw.pipeline_stages = self.pipeline_stages;
        raw.pipeline_chunks = self.pipeline_chunks;
        raw.micro_batches = self.micro_batches;
        raw.pipeline_schedule = self.pipeline_schedule;
        raw.automatic = i32::from(self.automatic);
        raw.auto_trials = self.auto_trials;
        raw.memory_limit_bytes = self.memory_limit_bytes;
        raw.fence = i32::from(self.fence);
        raw.fence_compression_off = i32::from(!self.fence_compression);
        raw.fence_min_keep = self.fence_min_keep;
        raw
    }
}

handle!(
    /// A validated parallel plan; trainers made with it keep their own copy.
    Plan,
    sys::cohort_plan,
    sys::cohort_plan_destroy
);

impl Plan {
    /// INVALID_PLAN naming the field (tau < 1, negative lr, momentum >= 1, ...), UNSUPPORTED for
    /// ZeRO stages 2-3 outside DDP.
    pub fn new(options: &PlanOptions) -> Result<Plan> {
        let raw = options.to_raw();
        create!(Plan, |out| sys::cohort_plan_create(&raw, &mut out))
    }

    /// Like [`Plan::new`], with the pipeline's cuts named: the first node of stages 1.. (as many
    /// as pipeline_stages x pipeline_chunks - 1); empty = chosen where the graph is narrowest,
    /// balancing the stages' estimated time (what `new` does). INVALID_PLAN naming pipeline_cuts
    /// for the wrong number of names or an empty one; a name that is no node, or where no stage
    /// can begin, when the trainer is made.
    pub fn with_pipeline_cuts(options: &PlanOptions, cuts: &[&str]) -> Result<Plan> {
        Plan::with_pipeline(options, cuts, &[])
    }

    /// Like [`Plan::with_pipeline_cuts`], with the share of each cut's activation entries sent
    /// (their top-k by magnitude; the gradients come back at the same entries): one per cut
    /// (pipeline_stages x pipeline_chunks - 1), each in (0, 1] — `&[1.0, 0.1]` compresses the
    /// second cut of three stages to a tenth; empty = no cut compressed. INVALID_PLAN naming
    /// pipeline keep for the wrong count or a value outside (0, 1].
    pub fn with_pipeline(options: &PlanOptions, cuts: &[&str], keep: &[f64]) -> Result<Plan> {
        let mut raw = options.to_raw();
        let joined = c_string(&cuts.join(","), "pipeline_cuts")?;
        if !cuts.is_empty() {
            raw.pipeline_cuts = joined.as_ptr();
        }
        // Rust's shortest round-trip text of each share ("0.1", "NaN", "inf"), which strtod reads.
        let shares: Vec<String> = keep.iter().map(|k| k.to_string()).collect();
        let keep_text = c_string(&shares.join(","), "pipeline_keep")?;
        if !keep.is_empty() {
            raw.pipeline_keep = keep_text.as_ptr();
        }
        // The plan copies both lists: `joined` and `keep_text` outlive the call.
        create!(Plan, |out| sys::cohort_plan_create(&raw, &mut out))
    }

    /// Resolves an automatic plan (cohort_plan_choose): a collective over `comm` — every rank
    /// calls it with the same arguments — that probes the links, ranks the layouts that fit with
    /// the planner's model (world rank 0 decides; every rank gets the same choice) and, with
    /// auto_trials K > 0, times a few steps of the K best with `optimizer` and `trainer_options`.
    /// `global_graph` is the model at the GLOBAL batch, every data replica's rows together; each
    /// rank then trains it at global / (D x tensor_z) rows, D = comm size / (pipeline_stages x
    /// tensor_x x tensor_y x tensor_z). `options.automatic` is not read: this always chooses;
    /// nor is `options.fence` taken (it chooses the layout itself: the result has it false;
    /// INVALID_PLAN with `automatic` set too).
    ///
    /// Returns the options to make the plan from — every field as given except the layout, which
    /// is the chosen one, automatic and fence false — and world rank 0's report (the probe, the ranked
    /// layouts, the choice; empty on the other ranks). INVALID_PLAN naming memory_limit_bytes
    /// when no layout fits, naming the field for a bad option.
    pub fn choose(
        options: &PlanOptions,
        global_graph: &Graph,
        optimizer: &Optimizer,
        comm: &Comm,
        trainer_options: &TrainerOptions,
    ) -> Result<(PlanOptions, String)> {
        // A collective cannot be asked again: the report is cut at this many bytes.
        const REPORT_BYTES: usize = 1 << 18;
        let raw = options.to_raw();
        let trainer_raw = trainer_options.to_raw();
        // SAFETY: never fails; overwritten by the call on success.
        let mut chosen = unsafe { sys::cohort_plan_options_default() };
        let mut report = vec![0u8; REPORT_BYTES];
        let mut needed: usize = 0;
        // SAFETY: live handles; the structs are the header's (size set by their defaults); report
        // holds report.len() bytes.
        check(unsafe {
            sys::cohort_plan_choose(
                &raw,
                global_graph.as_raw(),
                optimizer.as_raw(),
                &trainer_raw,
                comm.as_raw(),
                &mut chosen,
                report.as_mut_ptr().cast(),
                report.len(),
                &mut needed,
            )
        })?;
        let end = report.iter().position(|&b| b == 0).unwrap_or(report.len());
        report.truncate(end);
        Ok((PlanOptions::from_raw(&chosen), String::from_utf8_lossy(&report).into_owned()))
    }
}

/// Cumulative statistics of a data-parallel trainer; seconds measured on the training thread.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct ParallelStats {
    /// DDP: steps; localsgd / co2: outer rounds completed.
    pub rounds: i64,
    /// Step time outside waits for communication.
    pub compute_seconds: f64,
    /// Collectives in flight, launch to observed completion.
    pub comm_seconds: f64,
    /// Time the training thread was blocked on collectives.
    pub wait_seconds: f64,
    /// Share of communication hidden behind compute: 1 - wait / comm.
    pub hidden_fraction: f64,
    /// co2: penalty factor of the last outer step (1 = none).
    pub last_staleness_scale: f64,
    /// Outer momentum L2 norm before clipping, last outer step.
    pub last_momentum_norm: f64,
    /// DDP: gradient buckets per step.
    pub buckets: i64,
    /// Bytes this rank holds after a step: parameters, reduced gradients, optimizer state.
    pub parameter_bytes: i64,
    pub gradient_bytes: i64,
    pub optimizer_state_bytes: i64,
    /// ZeRO 3: bucket all-gathers of parameters, and those launched ahead of their first reader.
    pub parameter_gathers: i64,
    pub parameter_gathers_prefetched: i64,
    /// The most bytes of whole parameters held at once in a step (all of them unless ZeRO 3).
    pub peak_parameter_bytes: i64,
    /// co2: the current round's length and the steps its average travels before the merge (the
    /// plan's, or chosen under overlap auto), and the two times the last choice used: seconds an
    /// average took to arrive and compute seconds per step (0 until measured, and without auto).
    pub tau: i64,
    pub overlap_steps: i64,
    pub outer_comm_seconds: f64,
    pub step_seconds: f64,
    /// localsgd, co2: the fragments of the outer synchronisation, the outer collectives this rank
    /// launched, and the most bytes one of them carries from this rank (0 for DDP).
    pub outer_fragments: i64,
    pub outer_syncs: i64,
    pub outer_sync_bytes: i64,
    /// localsgd, co2: the outer collectives' share of their time hidden behind local steps.
    pub outer_hidden_fraction: f64,
    /// Ranks per replica (1 without shard groups).
    pub shard_group: i64,
    /// DDP: gradient bytes this rank sends a step (top-k messages under grad_keep < 1), and the
    /// kept fraction (1 uncompressed).
    pub gradient_sync_bytes: i64,
    pub grad_keep: f64,
    /// co2: of this rank's waits for its averages, those every rank waited too (per round the
    /// least any rank waited): the transfers' own exposed time; the rest went to slower ranks.
    pub outer_shared_wait_seconds: f64,
}

impl Trainer {
    /// A data-parallel trainer over `comm` with `plan`: like [`Trainer::new`], then rank 0's
    /// initial parameters are broadcast (collective: every rank calls this in the same order as
    /// its other collectives). `step` then takes this rank's shard of the batch. The trainer
    /// keeps the communicator's engine alive, so `comm` may be dropped afterwards.
    /// INVALID_PLAN when the plan does not fit the communicator; PEER_FAILED or TIMEOUT from the
    /// broadcast. Under a pipeline plan (pipeline_stages > 1, or fence) only world rank 0 reads
    /// `graph`; the other ranks may use [`Trainer::new_parallel_without_graph`].
    pub fn new_parallel(
        graph: &Graph,
        optimizer: &Optimizer,
        plan: &Plan,
        comm: &Comm,
        options: &TrainerOptions,
    ) -> Result<Trainer> {
        Self::create_parallel(graph.as_raw(), optimizer, plan, comm, options)
    }

    /// [`Trainer::new_parallel`] on a rank other than world rank 0 under a pipeline plan
    /// (pipeline_stages > 1, or fence): world rank 0, which calls new_parallel with the model,
    /// cuts it and sends this rank its stages, so this rank needs no graph of its own (a corrupt
    /// or mismatched stage is CORRUPT; rank 0's error, such as a plan the graph cannot take, is
    /// returned here too). On world rank 0, or without pipeline stages: INVALID_HANDLE naming
    /// graph.
    pub fn new_parallel_without_graph(
        optimizer: &Optimizer,
        plan: &Plan,
        comm: &Comm,
        options: &TrainerOptions,
    ) -> Result<Trainer> {
        Self::create_parallel(std::ptr::null(), optimizer, plan, comm, options)
    }

    // new_parallel and new_parallel_without_graph: `graph` is a live graph's handle or null.
    fn create_parallel(
        graph: *const sys::cohort_graph,
        optimizer: &Optimizer,
        plan: &Plan,
        comm: &Comm,
        options: &TrainerOptions,
    ) -> Result<Trainer> {
        let raw = options.to_raw();
        create!(Trainer, |out| sys::cohort_trainer_create_parallel(
            graph,
            optimizer.as_raw(),
            plan.as_raw(),
            comm.as_raw(),
            &raw,
            &mut out
        ))
    }

    /// The pipeline stages the plan cut the model into, as text to print (one line per stage:
    /// its nodes and estimated milliseconds); empty on ranks other than world rank 0 and without
    /// pipeline stages. INVALID_STATE for a trainer not made by new_parallel.
    pub fn pipeline_stages(&self) -> Result<String> {
        let mut needed: usize = 0;
        // SAFETY: live handle; a NULL buffer of size 0 only asks for the size (INVALID_ARGUMENT).
        let _ = unsafe { sys::cohort_trainer_pipeline_stages(self.as_raw(), std::ptr::null_mut(), 0, &mut needed) };
        let mut buf = vec![0u8; needed.max(1)];
        // SAFETY: live handle; buf holds buf.len() bytes.
        check(unsafe {
            sys::cohort_trainer_pipeline_stages(self.as_raw(), buf.as_mut_ptr().cast(), buf.len(), std::ptr::null_mut())
        })?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// INVALID_STATE for a trainer not made by new_parallel.
    pub fn parallel_stats(&self) -> Result<ParallelStats> {
        // SAFETY: all-zero is a valid cohort_parallel_stats; size is set before the call.
        let mut raw: sys::cohort_parallel_stats = unsafe { std::mem::zeroed() };
        raw.size = std::mem::size_of::<sys::cohort_parallel_stats>();
        // SAFETY: live handle; raw is a valid output of the size it declares.
        check(unsafe { sys::cohort_trainer_get_parallel_stats(self.as_raw(), &mut raw) })?;
        Ok(ParallelStats {
            rounds: raw.rounds,
            compute_seconds: raw.compute_seconds,
            comm_seconds: raw.comm_seconds,
            wait_seconds: raw.wait_seconds,
            hidden_fraction: raw.hidden_fraction,
            last_staleness_scale: raw.last_staleness_scale,
            last_momentum_norm: raw.last_momentum_norm,
            buckets: raw.buckets,
            parameter_bytes: raw.parameter_bytes,
            gradient_bytes: raw.gradient_bytes,
            optimizer_state_bytes: raw.optimizer_state_bytes,
            parameter_gathers: raw.parameter_gathers,
            parameter_gathers_prefetched: raw.parameter_gathers_prefetched,
            peak_parameter_bytes: raw.peak_parameter_bytes,
            tau: raw.tau,
            overlap_steps: raw.overlap_steps,
            outer_comm_seconds: raw.outer_comm_seconds,
            step_seconds: raw.step_seconds,
            outer_fragments: raw.outer_fragments,
            outer_syncs: raw.outer_syncs,
            outer_sync_bytes: raw.outer_sync_bytes,
            outer_hidden_fraction: raw.outer_hidden_fraction,
            shard_group: raw.shard_group,
            gradient_sync_bytes: raw.gradient_sync_bytes,
            grad_keep: raw.grad_keep,
            outer_shared_wait_seconds: raw.outer_shared_wait_seconds,
        })
    }

    /// Like save_checkpoint, with the outer state (every rank saves its own file); INVALID_STATE
    /// for a trainer that is not data-parallel.
    pub fn save_parallel_checkpoint(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: live handle, NUL-terminated path.
        check(unsafe { sys::cohort_trainer_save_parallel_checkpoint(self.as_raw(), path.as_ptr()) })
    }

    /// Like load_checkpoint, with the outer state; INVALID_ARGUMENT when the file has none for
    /// this plan (the trainer's own state has been restored then).
    pub fn load_parallel_checkpoint(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: live handle, NUL-terminated path.
        check(unsafe { sys::cohort_trainer_load_parallel_checkpoint(self.as_raw(), path.as_ptr()) })
    }
}
