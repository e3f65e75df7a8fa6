//! Errors: every failed cohort call becomes an [`Error`] holding its [`Status`] and the message
//! the C library wrote for it (cohort_last_error, read at once on the calling thread). Checks
//! this binding makes itself (a NUL inside a name, a buffer of the wrong length for a
//! collective) produce the same type with a status from the same list.

use std::ffi::{CStr, CString};
use std::fmt;
use std::path::Path;

use crate::sys;

/// Why a call failed: the non-OK values of `cohort_status`, with what is still usable afterwards.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// A bad value: nothing changed.
    InvalidArgument,
    /// NULL, destroyed or wrong handle: nothing changed.
    InvalidHandle,
    /// Shapes or dtypes disagree: nothing changed.
    ShapeMismatch,
    /// Unknown operator or name: nothing changed.
    NotFound,
    /// The file system failed: objects in memory unchanged.
    Io,
    /// A file failed verification: nothing was loaded.
    Corrupt,
    /// An allocation failed: the object is unchanged.
    OutOfMemory,
    /// Valid, but not available in this build or configuration.
    Unsupported,
    /// A bug in cohort: destroy the object.
    Internal,
    /// A peer rank died or left: abort the communicator.
    PeerFailed,
    /// A wait passed its deadline: abort the communicator.
    Timeout,
    /// The parallel plan does not fit: rebuild the plan.
    InvalidPlan,
    /// Called in the wrong state: nothing changed.
    InvalidState,
    /// A training step met NaN or Inf in its loss or gradients: its update was skipped and the
    /// trainer is as before the step; skip the batch and go on.
    NonFinite,
    /// A status this binding does not know (from a newer library).
    Other(u32),
}

impl Status {
    /// The status of a raw code; `None` for COHORT_OK.
    pub fn from_raw(code: sys::cohort_status) -> Option<Status> {
        Some(match code {
            sys::cohort_status::COHORT_OK => return None,
            sys::cohort_status::COHORT_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::cohort_status::COHORT_ERR_INVALID_HANDLE => Status::InvalidHandle,
            sys::cohort_status::COHORT_ERR_SHAPE_MISMATCH => Status::ShapeMismatch,
            sys::cohort_status::COHORT_ERR_NOT_FOUND => Status::NotFound,
            sys::cohort_status::COHORT_ERR_IO => Status::Io,
            sys::cohort_status::COHORT_ERR_CORRUPT => Status::Corrupt,
            sys::cohort_status::COHORT_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::cohort_status::COHORT_ERR_UNSUPPORTED => Status::Unsupported,
            sys::cohort_status::COHORT_ERR_INTERNAL => Status::Internal,
            sys::cohort_status::COHORT_ERR_PEER_FAILED => Status::PeerFailed,
            sys::cohort_status::COHORT_ERR_TIMEOUT => Status::Timeout,
            sys::cohort_status::COHORT_ERR_INVALID_PLAN => Status::InvalidPlan,
            sys::cohort_status::COHORT_ERR_INVALID_STATE => Status::InvalidState,
            sys::cohort_status::COHORT_ERR_NON_FINITE => Status::NonFinite,
            other => Status::Other(other.0),
        })
    }

    /// The raw code of this status.
    pub fn to_raw(self) -> sys::cohort_status {
        match self {
            Status::InvalidArgument => sys::cohort_status::COHORT_ERR_INVALID_ARGUMENT,
            Status::InvalidHandle => sys::cohort_status::COHORT_ERR_INVALID_HANDLE,
            Status::ShapeMismatch => sys::cohort_status::COHORT_ERR_SHAPE_MISMATCH,
            Status::NotFound => sys::cohort_status::COHORT_ERR_NOT_FOUND,
            Status::Io => sys::cohort_status::COHORT_ERR_IO,
            Status::Corrupt => sys::cohort_status::COHORT_ERR_CORRUPT,
            Status::OutOfMemory => sys::cohort_status::COHORT_ERR_OUT_OF_MEMORY,
            Status::Unsupported => sys::cohort_status::COHORT_ERR_UNSUPPORTED,
            Status::Internal => sys::cohort_status::COHORT_ERR_INTERNAL,
            Status::PeerFailed => sys::cohort_status::COHORT_ERR_PEER_FAILED,
            Status::Timeout => sys::cohort_status::COHORT_ERR_TIMEOUT,
            Status::InvalidPlan => sys::cohort_status::COHORT_ERR_INVALID_PLAN,
            Status::InvalidState => sys::cohort_status::COHORT_ERR_INVALID_STATE,
            Status::NonFinite => sys::cohort_status::COHORT_ERR_NON_FINITE,
            Status::Other(code) => sys::cohort_status(code),
        }
    }

    /// The library's lower-case name of the status ("shape mismatch").
    pub fn name(self) -> &'static str {
        // SAFETY: cohort_status_name never fails and returns a static NUL-terminated string.
        let name = unsafe { CStr::from_ptr(sys::cohort_status_name(self.to_raw())) };
        name.to_str().unwrap_or("unknown status")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed call: its status and the message that names the function, the problem and the
/// caller's object ("cohort_graph_add_op: matmul 'fc2': input 1 has shape ...").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    /// An error with a message of the caller's own (this binding's checks use it too).
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// What went wrong, and so what is still usable.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The message, as cohort_last_error() gave it.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error for a status returned on this thread just now, with this thread's last message.
    fn last(status: Status) -> Error {
        // SAFETY: cohort_last_error never fails; the pointer is valid until the next cohort call
        // on this thread, and the text is copied before any other call.
        let text = unsafe { CStr::from_ptr(sys::cohort_last_error()) };
        Error::new(status, text.to_string_lossy().into_owned())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.status)
    }
}

impl std::error::Error for Error {}

/// The result of every fallible call in this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a status returned by a raw call (see [`crate::sys`]) made on this thread just now into a
/// `Result`, reading the library's message for a failure. Call it before any other cohort call.
pub fn check(status: sys::cohort_status) -> Result<()> {
    match Status::from_raw(status) {
        None => Ok(()),
        Some(status) => Err(Error::last(status)),
    }
}

/// A C string of a name or other text argument; a NUL inside is INVALID_ARGUMENT.
pub(crate) fn c_string(text: &str, what: &str) -> Result<CString> {
    CString::new(text).map_err(|_| {
        Error::new(Status::InvalidArgument, format!("{} {:?} contains a NUL byte", what, text))
    })
}

/// A C string of a path (its bytes as the OS holds them).
pub(crate) fn c_path(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        Error::new(Status::InvalidArgument, format!("path {:?} contains a NUL byte", path))
    })
}

/// A count as the int32 the C API takes; larger is INVALID_ARGUMENT.
pub(crate) fn c_count(count: usize, what: &str) -> Result<i32> {
    i32::try_from(count).map_err(|_| {
        Error::new(
            Status::InvalidArgument,
            format!("{}: {} is more than the C API takes", what, count),
        )
    })
}
