//! cohort for Rust: a safe binding of cohort's C ABI (capi/include/cohort/cohort.h).
//!
//! Every handle of the C API is an owning Rust value released by `Drop`; every call returns
//! `Result<_, cohort::Error>`, whose [`Status`] says what is still usable and whose message is
//! the C library's own. Data goes in and out through borrowed slices ([`Tensor`], [`TensorMut`]
//! and the communicator's collectives), so nothing cohort reads or writes can be freed or
//! touched while it does. [`Comm::alloc`] gives a communicator's registered memory as a
//! [`Registered`] buffer that derefs to a slice. The raw declarations, generated from the header by bindgen at build
//! time, are in [`sys`].
//!
//! ```no_run
//! use cohort::*;
//! # fn main() -> cohort::Result<()> {
//! let graph = Graph::mlp(&MlpOptions { batch: 8, hidden: vec![32], ..MlpOptions::default() })?;
//! let optimizer = Optimizer::new(&OptimizerOptions { lr: 0.1, ..OptimizerOptions::default() })?;
//! let mut trainer = Trainer::new(&graph, &optimizer, &TrainerOptions::default())?;
//! let (x, y) = (vec![0.5f32; 8 * 784], vec![3i32; 8]);
//! let loss = trainer.step(&[Tensor::new("x", &x, &[8, 784]), Tensor::new("y", &y, &[8])])?;
//! # let _ = loss; Ok(()) }
//! ```
//!
//! Thread safety follows the C API: distinct objects may be used from distinct threads, one
//! object from one thread at a time. Handles are therefore `Send` but not `Sync`, except
//! [`Dataset`], which the library lets several threads read at once.

/// Declares an owning wrapper of one C handle type: not Sync (one thread at a time), Send
/// (distinct handles may live on distinct threads), destroyed on drop.
macro_rules! handle {
    ($(#[$meta:meta])* $name:ident, $raw:ty, $destroy:path) => {
        $(#[$meta])*
        pub struct $name {
            raw: std::ptr::NonNull<$raw>,
        }

        impl $name {
            /// The C handle, for calls through [`crate::sys`]. It stays owned by this value:
            /// do not destroy it, nor use it after this value is dropped.
            pub fn as_raw(&self) -> *mut $raw {
                self.raw.as_ptr()
            }

            /// Wraps the handle a successful create call wrote.
            #[allow(dead_code)]
            pub(crate) fn from_created(raw: *mut $raw) -> $crate::Result<Self> {
                let what = concat!(stringify!($name), ": no handle");
                std::ptr::NonNull::new(raw)
                    .map(|raw| $name { raw })
                    .ok_or_else(|| $crate::Error::new($crate::Status::Internal, what))
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: the handle is live and owned by self; destroy accepts it exactly once.
                // Its status is dropped: destroy of a live handle does not fail.
                unsafe {
                    $destroy(self.raw.as_ptr());
                }
            }
        }

        // SAFETY: the C API lets a handle be used from any thread, one thread at a time, which
        // &mut / non-Sync access enforces.
        unsafe impl Send for $name {}

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!(stringify!($name), "({:p})"), self.raw)
            }
        }
    };
}

/// Runs a create call with a handle output and wraps what it wrote.
macro_rules! create {
    ($handle:ty, |$out:ident| $call:expr) => {{
        let mut $out = std::ptr::null_mut();
        // SAFETY: the call's other arguments are valid for its duration (see each caller) and
        // $out is a valid place for the handle.
        $crate::check(unsafe { $call })?;
        <$handle>::from_created($out)
    }};
}

pub mod sys;

mod comm;
mod data;
mod device;
mod error;
mod graph;
mod models;
mod ops;
mod optim;
mod parallel;
mod registered;
mod settings;
mod tensor;
mod trainer;

pub use comm::{Comm, CommOptions, Links, ReduceOp, Scope, Work};
pub use data::{Dataset, Sampler, SamplerOptions, Split};
pub use device::{device_usable, Device};
pub use error::{check, Error, Result, Status};
pub use graph::{op_list, Attrs, Graph, GraphStats, InitKind, Initializer, Value};
pub use models::{Activation, CnnOptions, GptOptions, MlpOptions};
pub use ops::{op_describe, AttrType, AttrValue, OpAttr, OpInfo};
pub use optim::{Optimizer, OptimizerKind, OptimizerOptions, Schedule};
pub use parallel::{ParallelStats, Plan, PlanOptions, Preset, SyncMode};
pub use registered::Registered;
pub use settings::{
    abi_version, reset_log_callback, set_log_callback, set_log_level, set_num_threads, version,
    LogLevel, ABI_VERSION,
};
pub use tensor::{AsTensorRef, Bf16, DType, Element, Tensor, TensorMut, F16};
pub use trainer::{Trainer, TrainerOptions, TrainerStats};
