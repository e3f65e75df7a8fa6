//! Devices: where a trainer keeps its parameters, gradients and optimizer state and runs its
//! steps ([`crate::TrainerOptions::device`]), and whether this process can use one.

use std::ffi::CStr;
use std::os::raw::c_char;

use crate::error::{check, Result};
use crate::sys;

/// Where a trainer lives and works. Tensors passed to it stay in host memory either way: inputs
/// are copied to the device, the loss and outputs copied back.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    #[default]
    Cpu,
    /// The current CUDA device, in builds with the CUDA backend.
    Cuda,
}

impl Device {
    pub(crate) fn to_raw(self) -> sys::cohort_device {
        match self {
            Device::Cpu => sys::cohort_device::COHORT_DEVICE_CPU,
            Device::Cuda => sys::cohort_device::COHORT_DEVICE_CUDA,
        }
    }

    /// The device of an options field (an int32 holding a cohort_device).
    pub(crate) fn from_raw(raw: i32) -> Device {
        if raw == sys::cohort_device::COHORT_DEVICE_CUDA.0 as i32 {
            Device::Cuda
        } else {
            Device::Cpu
        }
    }
}

/// Whether this process can use `device`: `(true, "")`, or `(false, reason)` with why not ("this
/// build has no CUDA backend", the driver's message, ...).
pub fn device_usable(device: Device) -> Result<(bool, String)> {
    let mut usable = 0i32;
    let mut reason = [0 as c_char; 1024];
    // SAFETY: plain value argument; usable and reason (with its capacity) are valid for writes.
    check(unsafe {
        sys::cohort_device_usable(device.to_raw(), &mut usable, reason.as_mut_ptr(), reason.len())
    })?;
    // SAFETY: the library wrote a NUL-terminated string within the buffer (or left it all zeros).
    let reason = unsafe { CStr::from_ptr(reason.as_ptr()) }.to_string_lossy().into_owned();
    Ok((usable != 0, reason))
}
