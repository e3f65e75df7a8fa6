//! Optimizer configurations: SGD or AdamW with a learning-rate schedule and gradient clipping.
//! The library validates the options when the optimizer is made; trainers copy it.

use crate::error::Result;
use crate::sys;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum OptimizerKind {
    Sgd,
    AdamW,
}

/// Learning-rate schedule.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Schedule {
    Constant,
    /// Linear warmup from 0 to lr over warmup_steps, then cosine decay to min_lr at total_steps.
    WarmupCosine,
}

#[derive(Copy, Clone, Debug, PartialEq)]
pub struct OptimizerOptions {
    pub kind: OptimizerKind,
    pub lr: f64,
    /// SGD.
    pub momentum: f64,
    /// SGD; needs momentum > 0.
    pub nesterov: bool,
    /// SGD: L2 added to the gradient; AdamW: decoupled.
    pub weight_decay: f64,
    /// AdamW.
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub schedule: Schedule,
    pub warmup_steps: i64,
    pub total_steps: i64,
    /// Cosine floor.
    pub min_lr: f64,
    /// Global L2 gradient-norm clip; 0 = off.
    pub clip_norm: f64,
}

impl Default for OptimizerOptions {
    /// SGD, lr 0.01, no momentum, constant schedule, no clipping; AdamW betas 0.9/0.999, eps 1e-8.
    fn default() -> OptimizerOptions {
        // SAFETY: never fails.
        let raw = unsafe { sys::cohort_optimizer_options_default() };
        OptimizerOptions {
            kind: if raw.kind == sys::cohort_optimizer_kind::COHORT_OPTIM_ADAMW {
                OptimizerKind::AdamW
            } else {
                OptimizerKind::Sgd
            },
            lr: raw.lr,
            momentum: raw.momentum,
            nesterov: raw.nesterov != 0,
            weight_decay: raw.weight_decay,
            beta1: raw.beta1,
            beta2: raw.beta2,
            eps: raw.eps,
            schedule: if raw.schedule == sys::cohort_schedule_kind::COHORT_SCHEDULE_WARMUP_COSINE {
                Schedule::WarmupCosine
            } else {
                Schedule::Constant
            },
            warmup_steps: raw.warmup_steps,
            total_steps: raw.total_steps,
            min_lr: raw.min_lr,
            clip_norm: raw.clip_norm,
        }
    }
}

impl OptimizerOptions {
    fn to_raw(self) -> sys::cohort_optimizer_options {
        // SAFETY: never fails; gives the struct with its size set.
        let mut raw = unsafe { sys::cohort_optimizer_options_default() };
        raw.kind = match self.kind {
            OptimizerKind::Sgd => sys::cohort_optimizer_kind::COHORT_OPTIM_SGD,
            OptimizerKind::AdamW => sys::cohort_optimizer_kind::COHORT_OPTIM_ADAMW,
        };
        raw.lr = self.lr;
        raw.momentum = self.momentum;
        raw.nesterov = self.nesterov as i32;
        raw.weight_decay = self.weight_decay;
        raw.beta1 = self.beta1;
        raw.beta2 = self.beta2;
        raw.eps = self.eps;
        raw.schedule = match self.schedule {
            Schedule::Constant => sys::cohort_schedule_kind::COHORT_SCHEDULE_CONSTANT,
            Schedule::WarmupCosine => sys::cohort_schedule_kind::COHORT_SCHEDULE_WARMUP_COSINE,
        };
        raw.warmup_steps = self.warmup_steps;
        raw.total_steps = self.total_steps;
        raw.min_lr = self.min_lr;
        raw.clip_norm = self.clip_norm;
        raw
    }
}

handle!(
    /// A validated optimizer configuration; trainers copy it, so it may be dropped after.
    Optimizer,
    sys::cohort_optimizer,
    sys::cohort_optimizer_destroy
);

impl Optimizer {
    /// INVALID_ARGUMENT naming the field for a bad option.
    pub fn new(options: &OptimizerOptions) -> Result<Optimizer> {
        let raw = options.to_raw();
        create!(Optimizer, |out| sys::cohort_optimizer_create(&raw, &mut out))
    }
}
