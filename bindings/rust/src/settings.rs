//! Process-wide settings: version, logging (level and a Rust callback) and CPU threads.
//!
//! The log callback is called from any cohort thread. A Rust panic must not unwind into C (it
//! would abort the process), so the trampoline the library calls catches every panic of the
//! user's closure and drops that line.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, RwLock};

use crate::error::{check, Result};
use crate::sys;

/// The ABI version of the header this crate was generated from (major * 10000 + minor * 100 +
/// patch); compare with [`abi_version`].
pub const ABI_VERSION: i32 = sys::COHORT_ABI_VERSION as i32;

/// The ABI version of the loaded library.
pub fn abi_version() -> i32 {
    // SAFETY: never fails.
    unsafe { sys::cohort_abi_version() }
}

/// "major.minor.patch" of the loaded library.
pub fn version() -> &'static str {
    // SAFETY: never fails; returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(sys::cohort_version_string()) }.to_str().unwrap_or("unknown")
}

/// Severity of a log line; lines above the level set with [`set_log_level`] are dropped.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

impl LogLevel {
    fn from_raw(level: c_int) -> LogLevel {
        match level {
            i32::MIN..=0 => LogLevel::Error,
            1 => LogLevel::Warn,
            2 => LogLevel::Info,
            _ => LogLevel::Debug,
        }
    }
}

/// Drops log lines above `level`. Process-wide.
pub fn set_log_level(level: LogLevel) -> Result<()> {
    // SAFETY: plain value argument.
    check(unsafe { sys::cohort_set_log_level(level as c_int) })
}

/// Threads used by this process's CPU math; `n >= 1` (else INVALID_ARGUMENT). With several ranks
/// on one machine give each rank cores / ranks threads. Process-wide.
pub fn set_num_threads(n: i32) -> Result<()> {
    // SAFETY: plain value argument.
    check(unsafe { sys::cohort_set_num_threads(n) })
}

type LogCallback = dyn Fn(LogLevel, &str) + Send + Sync + 'static;

/// The Rust callback the trampoline forwards to; replaced as a whole, so a line being delivered
/// keeps the closure it started with alive (the Arc) while another is installed.
static LOG_CALLBACK: RwLock<Option<Arc<LogCallback>>> = RwLock::new(None);

/// Sends every log line (with its rank prefix) to `callback` instead of stderr. It is called
/// from any cohort thread and must not call back into cohort. A panic inside it is caught and
/// the line dropped: it never reaches the library.
pub fn set_log_callback<F>(callback: F) -> Result<()>
where
    F: Fn(LogLevel, &str) + Send + Sync + 'static,
{
    *LOG_CALLBACK.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(callback));
    // SAFETY: the trampoline is a valid extern "C" function for the library's whole life and
    // ignores the user pointer.
    check(unsafe { sys::cohort_set_log_callback(Some(log_trampoline), std::ptr::null_mut()) })
}

/// Restores the library's default log destination (stderr) and drops the Rust callback.
pub fn reset_log_callback() -> Result<()> {
    // SAFETY: NULL restores the default.
    check(unsafe { sys::cohort_set_log_callback(None, std::ptr::null_mut()) })?;
    *LOG_CALLBACK.write().unwrap_or_else(|e| e.into_inner()) = None;
    Ok(())
}

/// What the library calls for each line: never unwinds.
extern "C" fn log_trampoline(level: c_int, message: *const c_char, _user: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let callback = LOG_CALLBACK.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(callback) = callback {
            let text = if message.is_null() {
                Default::default()
            } else {
                // SAFETY: the library passes a NUL-terminated line valid during this call.
                unsafe { CStr::from_ptr(message) }.to_string_lossy()
            };
            callback(LogLevel::from_raw(level), &text);
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The trampoline forwards lines and survives a panicking callback. (No public call logs on
    /// demand, so the test calls the trampoline the way the library does.)
    #[test]
    fn log_callback_receives_lines_and_contains_panics() {
        static LINES: Mutex<Vec<(LogLevel, String)>> = Mutex::new(Vec::new());
        set_log_callback(|level, line| LINES.lock().unwrap().push((level, line.to_owned())))
            .unwrap();
        log_trampoline(1, b"[rank 0] hello\0".as_ptr().cast(), std::ptr::null_mut());
        assert_eq!(
            LINES.lock().unwrap().as_slice(),
            &[(LogLevel::Warn, "[rank 0] hello".to_owned())]
        );

        set_log_callback(|_, line| panic!("callback panicked on {}", line)).unwrap();
        log_trampoline(0, b"boom\0".as_ptr().cast(), std::ptr::null_mut()); // must return normally
        reset_log_callback().unwrap();
        set_log_level(LogLevel::Warn).unwrap();
    }
}
