//! Trainers: training steps and evaluations of one model, parameters in and out, statistics, and
//! checkpoints (one file with the whole training state, plus named int64 values such as a
//! sampler's position). Data-parallel trainers are made in [`crate::parallel`].

use std::path::Path;

use crate::device::Device;
use crate::error::{c_path, c_string, check, Result};
use crate::graph::Graph;
use crate::optim::Optimizer;
use crate::sys;
use crate::tensor::{with_refs, with_refs_mut, AsTensorRef, TensorMut};

/// Options of a trainer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TrainerOptions {
    /// Parameter initialisation and dropout.
    pub seed: u64,
    /// CPU threads; 0 leaves the process setting as it is.
    pub num_threads: i32,
    /// Where parameters, gradients, optimizer state and the steps' work live (default CPU).
    /// [`Device::Cuda`] makes creating the trainer fail with [`crate::Status::Unsupported`],
    /// naming the reason, when the device cannot be used ([`crate::device_usable`] tells
    /// beforehand) or an operator of the graph has no CUDA kernel. Data-parallel trainers on the
    /// GPU reduce DDP's gradients over NCCL where every rank has a device of its own, else
    /// through host copies.
    pub device: Device,
}

impl Default for TrainerOptions {
    fn default() -> TrainerOptions {
        // SAFETY: never fails.
        let raw = unsafe { sys::cohort_trainer_options_default() };
        TrainerOptions {
            seed: raw.seed,
            num_threads: raw.num_threads,
            device: Device::from_raw(raw.device),
        }
    }
}

impl TrainerOptions {
    pub(crate) fn to_raw(self) -> sys::cohort_trainer_options {
        // SAFETY: never fails; gives the struct with its size set.
        let mut raw = unsafe { sys::cohort_trainer_options_default() };
        raw.seed = self.seed;
        raw.num_threads = self.num_threads;
        raw.device = self.device.to_raw().0 as i32;
        raw
    }
}

/// What a trainer reports about itself.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct TrainerStats {
    /// Completed training steps.
    pub step: i64,
    /// Used by the last step.
    pub learning_rate: f64,
    /// Global gradient L2 norm of the last step (before clipping).
    pub grad_norm: f64,
    /// Largest live activation memory of any step so far.
    pub peak_activation_bytes: i64,
    /// Parameters + gradients + optimizer state.
    pub parameter_bytes: i64,
    pub last_step_seconds: f64,
    /// Micro-batches per step (the plan's micro_batches; 1 otherwise).
    pub micro_batches: i32,
    /// Pipeline stages, the last step: this rank's work (forward, backward, bookkeeping), in seconds ...
    pub pipeline_busy_seconds: f64,
    /// ... and its time blocked on the other stages, as a fraction of the step (0 with one stage).
    pub pipeline_bubble_fraction: f64,
}

handle!(
    /// Runs training steps and evaluations of one model. It keeps its own copies of the graph and
    /// the optimizer (and, when data-parallel, of the plan and the communicator's engine).
    ///
    /// Like every handle it may move to another thread but not be shared by two:
    ///
    /// ```compile_fail
    /// fn shared<T: Sync>() {}
    /// shared::<cohort::Trainer>(); // error: a Trainer is not Sync
    /// ```
    Trainer,
    sys::cohort_trainer,
    sys::cohort_trainer_destroy
);

impl Trainer {
    /// Copies `graph` (which needs a loss) and `optimizer`, adds the backward pass and
    /// initialises the parameters.
    pub fn new(graph: &Graph, optimizer: &Optimizer, options: &TrainerOptions) -> Result<Trainer> {
        let raw = options.to_raw();
        create!(Trainer, |out| sys::cohort_trainer_create(
            graph.as_raw(),
            optimizer.as_raw(),
            &raw,
            &mut out
        ))
    }

    /// One training step (forward, backward, update) on `inputs`, which bind every graph input
    /// the loss needs by name, with exactly the declared shape and dtype. Returns the loss. On an
    /// error before the update (a bad buffer, an unknown name) nothing changed.
    pub fn step<B: AsTensorRef>(&mut self, inputs: &[B]) -> Result<f32> {
        let mut loss = 0f32;
        let trainer = self.as_raw();
        // SAFETY: live handle; the refs point into `inputs`, borrowed for the call.
        check(with_refs(inputs, |refs, n| unsafe {
            sys::cohort_trainer_step(trainer, refs, n, &mut loss)
        })?)?;
        Ok(loss)
    }

    /// Forward only, in evaluation mode (dropout off), no update. Inputs bind like step, with any
    /// batch size; each of `outputs` (a marked output or the loss, by name) is written into its
    /// slice, whose shape must match.
    pub fn evaluate<B: AsTensorRef>(
        &mut self,
        inputs: &[B],
        outputs: &mut [TensorMut<'_>],
    ) -> Result<()> {
        let trainer = self.as_raw();
        let status = with_refs(inputs, |ins, n_in| {
            // SAFETY: live handle; inputs and outputs (exclusively) are borrowed for the call.
            with_refs_mut(outputs, |outs, n_out| unsafe {
                sys::cohort_trainer_evaluate(trainer, ins, n_in, outs, n_out)
            })
        })??;
        check(status)
    }

    /// Copies the current values of the parameter `parameter.name()` into its slice (f32 slices
    /// convert from bf16 parameters).
    pub fn get_parameter(&mut self, parameter: &mut TensorMut<'_>) -> Result<()> {
        let mut raw = parameter.raw_mut()?;
        // SAFETY: live handle; raw points into `parameter`, borrowed exclusively for the call.
        check(unsafe { sys::cohort_trainer_get_parameter(self.as_raw(), &mut raw) })
    }

    /// Makes every parameter whole until the next step: under ZeRO stage 3 a collective every
    /// rank calls at the same point (e.g. before one rank alone evaluates); otherwise a no-op.
    pub fn gather_parameters(&mut self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::cohort_trainer_gather_parameters(self.as_raw()) })
    }

    /// Under local updating (localsgd, slowmo, diloco, co2) makes `evaluate` and parameter reads
    /// see the average of every data-parallel replica's parameters until the next step or
    /// `set_parameter`, leaving this rank's own (and so the run) unchanged: call it before
    /// evaluating such a run. A collective every rank calls at the same point. `Ok(false)`, doing
    /// nothing, where the replicas hold the same parameters anyway (sync, one replica).
    pub fn average_replicas(&mut self) -> Result<bool> {
        let mut averaged: i32 = 0;
        // SAFETY: live handle; `averaged` outlives the call.
        check(unsafe { sys::cohort_trainer_average_replicas(self.as_raw(), &mut averaged) })?;
        Ok(averaged != 0)
    }

    /// Sets the parameter `parameter.name()` from its slice.
    pub fn set_parameter<B: AsTensorRef>(&mut self, parameter: &B) -> Result<()> {
        let raw = parameter.raw_ref()?;
        // SAFETY: live handle; raw points into `parameter`, borrowed for the call.
        check(unsafe { sys::cohort_trainer_set_parameter(self.as_raw(), &raw) })
    }

    /// Step count, learning rate, gradient norm, memory and timing.
    pub fn stats(&self) -> Result<TrainerStats> {
        // SAFETY: all-zero is a valid cohort_trainer_stats; size is set before the call.
        let mut raw: sys::cohort_trainer_stats = unsafe { std::mem::zeroed() };
        raw.size = std::mem::size_of::<sys::cohort_trainer_stats>();
        // SAFETY: live handle; raw is a valid output of the size it declares.
        check(unsafe { sys::cohort_trainer_get_stats(self.as_raw(), &mut raw) })?;
        Ok(TrainerStats {
            step: raw.step,
            learning_rate: raw.learning_rate,
            grad_norm: raw.grad_norm,
            peak_activation_bytes: raw.peak_activation_bytes,
            parameter_bytes: raw.parameter_bytes,
            last_step_seconds: raw.last_step_seconds,
            micro_batches: raw.micro_batches,
            pipeline_busy_seconds: raw.pipeline_busy_seconds,
            pipeline_bubble_fraction: raw.pipeline_bubble_fraction,
        })
    }

    /// Writes the whole training state to `path` atomically (a temporary file, fsync, rename):
    /// the file holds either its previous contents or the new checkpoint. IO names the path and
    /// the reason. The trainer is unchanged and usable after any status.
    pub fn save_checkpoint(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: live handle, NUL-terminated path.
        check(unsafe { sys::cohort_trainer_save_checkpoint(self.as_raw(), path.as_ptr()) })
    }

    /// Restores the state saved by save_checkpoint, verified first: after any error (CORRUPT,
    /// IO, INVALID_ARGUMENT for another model) the trainer is exactly as before.
    pub fn load_checkpoint(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: live handle, NUL-terminated path.
        check(unsafe { sys::cohort_trainer_load_checkpoint(self.as_raw(), path.as_ptr()) })
    }

    /// A named value (1 to 256 characters) saved with every later checkpoint and restored by a
    /// load, e.g. a sampler's position.
    pub fn set_checkpoint_value(&mut self, name: &str, value: i64) -> Result<()> {
        let name = c_string(name, "checkpoint value name")?;
        // SAFETY: live handle, NUL-terminated name (copied).
        check(unsafe {
            sys::cohort_trainer_set_checkpoint_value(self.as_raw(), name.as_ptr(), value)
        })
    }

    /// A value set with set_checkpoint_value or loaded from a checkpoint; NOT_FOUND if none.
    pub fn checkpoint_value(&self, name: &str) -> Result<i64> {
        let name = c_string(name, "checkpoint value name")?;
        let mut value = 0;
        // SAFETY: live handle, NUL-terminated name, valid output.
        check(unsafe {
            sys::cohort_trainer_get_checkpoint_value(self.as_raw(), name.as_ptr(), &mut value)
        })?;
        Ok(value)
    }
}
