//! Registered memory: buffers a communicator allocates (`cohort_comm_mem_alloc`), like NCCL's
//! registered buffers. Where the ranks share a host, collectives whose buffers lie in such memory
//! read and write them in place (from 256 KiB) instead of copying them through shared slots;
//! elsewhere it is ordinary memory.
//!
//! The one thing to know: allocating and freeing are collective. Every rank allocates and frees
//! the same sizes in the same order among its other operations on the communicator; a rank that
//! frees out of turn fails the communicator on every rank with a message that says so. A
//! [`Registered`] borrows its [`Comm`], so the communicator cannot be dropped first (which would
//! unmap the memory), and it derefs to a slice, so it goes wherever a slice does — the
//! collectives and [`Comm::scope`] included, whose borrows keep it from being freed while an
//! operation uses it.

use std::fmt;
use std::mem::{self, ManuallyDrop};
use std::ops::{Deref, DerefMut};
use std::os::raw::c_void;
use std::ptr::{self, NonNull};
use std::slice;

use crate::comm::Comm;
use crate::error::{check, Error, Result, Status};
use crate::sys;
use crate::tensor::Element;

/// `len` elements of registered memory on a communicator, zero-initialised; see
/// [`Comm::alloc`]. Freed by [`Registered::free`] or when dropped, in both cases a collective
/// step that every rank takes at the same point.
pub struct Registered<'comm, T: Element> {
    comm: &'comm Comm,
    data: NonNull<T>,
    len: usize,
}

// Not Send and not Sync (NonNull is neither): the buffer holds a `&Comm`, whose operations stay
// on one thread, and freeing it is one of them.

impl Comm {
    /// Allocates registered memory for `len` elements of `T` and zeroes it.
    ///
    /// **Collective**: every rank calls it with the same `len` and `T`, in the same order among
    /// its other operations on this communicator, and every rank later frees it (with
    /// [`Registered::free`] or by dropping it) at the same point. Where the ranks share a host,
    /// collectives on buffers inside it run in place; elsewhere it is ordinary memory. The memory
    /// lives until it is freed; the borrow of `self` keeps the communicator alive that long.
    ///
    /// Errors: INVALID_ARGUMENT for 0 elements or a size no host has; OUT_OF_MEMORY; the
    /// communicator's failure (PEER_FAILED, TIMEOUT) once it has failed.
    ///
    /// ```no_run
    /// # fn main() -> cohort::Result<()> {
    /// use cohort::{Comm, ReduceOp};
    /// let comm = Comm::from_env(&Default::default())?;
    /// let mut grads = comm.alloc::<f32>(1 << 20)?; // the same size on every rank
    /// grads.fill(1.0);
    /// comm.all_reduce_in_place(&mut grads, ReduceOp::Sum)?; // in place where ranks share a host
    /// comm.scope(|s| s.all_reduce_in_place(&mut grads, ReduceOp::Avg)?.wait())?;
    /// grads.free()?; // collective too: every rank frees it here
    /// # Ok(()) }
    /// ```
    ///
    /// The communicator outlives its memory:
    ///
    /// ```compile_fail
    /// # fn main() -> cohort::Result<()> {
    /// let comm = cohort::Comm::from_env(&Default::default())?;
    /// let buffer = comm.alloc::<f32>(1024)?;
    /// drop(comm); // error: `comm` is borrowed by `buffer`
    /// buffer.free()
    /// # }
    /// ```
    ///
    /// memory cannot be used after it is freed:
    ///
    /// ```compile_fail
    /// # fn main() -> cohort::Result<()> {
    /// let comm = cohort::Comm::from_env(&Default::default())?;
    /// let buffer = comm.alloc::<f32>(1024)?;
    /// buffer.free()?;
    /// println!("{}", buffer[0]); // error: `buffer` was moved by free()
    /// # Ok(()) }
    /// ```
    ///
    /// nor freed twice, nor while an operation uses it:
    ///
    /// ```compile_fail
    /// # fn main() -> cohort::Result<()> {
    /// let comm = cohort::Comm::from_env(&Default::default())?;
    /// let mut buffer = comm.alloc::<f32>(1024)?;
    /// comm.scope(|s| -> cohort::Result<()> {
    ///     let work = s.all_reduce_in_place(&mut buffer, cohort::ReduceOp::Sum)?;
    ///     buffer.free()?; // error: `buffer` is borrowed by the operation
    ///     work.wait()
    /// })
    /// # }
    /// ```
    pub fn alloc<T: Element>(&self, len: usize) -> Result<Registered<'_, T>> {
        let bytes = len.checked_mul(mem::size_of::<T>()).ok_or_else(|| {
            Error::new(
                Status::InvalidArgument,
                format!(
                    "Comm::alloc: {} elements of {:?} overflow the address space",
                    len,
                    T::DTYPE
                ),
            )
        })?;
        let mut out: *mut c_void = ptr::null_mut();
        // SAFETY: live handle, valid output.
        check(unsafe { sys::cohort_comm_mem_alloc(self.as_raw(), bytes, &mut out) })?;
        let data = NonNull::new(out.cast::<T>())
            .ok_or_else(|| Error::new(Status::Internal, "Comm::alloc: no memory returned"))?;
        let buffer = Registered { comm: self, data, len }; // frees on drop from here
        if (out as usize) % mem::align_of::<T>() != 0 {
            return Err(Error::new(Status::Internal, "Comm::alloc: memory is not aligned"));
        }
        // SAFETY: the library gave `bytes` writable bytes at `data`, aligned for T; zeroes are a
        // valid value of every Element type, so the slice may be read at once.
        unsafe { ptr::write_bytes(data.as_ptr(), 0, len) };
        Ok(buffer)
    }
}

impl<'comm, T: Element> Registered<'comm, T> {
    /// The communicator that allocated this memory.
    pub fn comm(&self) -> &'comm Comm {
        self.comm
    }

    /// Frees the memory (once the operations issued before it on the communicator have finished)
    /// and reports the library's status. **Collective**, like [`Comm::alloc`]: every rank frees
    /// its buffer at the same point among its operations.
    pub fn free(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        this.release()
    }

    fn release(&self) -> Result<()> {
        // SAFETY: live handle (borrowed for 'comm) and a pointer it returned, freed exactly once:
        // free() consumes self without running Drop, Drop runs at most once.
        check(unsafe { sys::cohort_comm_mem_free(self.comm.as_raw(), self.data.as_ptr().cast()) })
    }
}

impl<T: Element> Drop for Registered<'_, T> {
    /// Frees the memory like [`Registered::free`] — a collective step, so every rank must drop
    /// its buffer at the same point — and, as the crate's other drops do, loses the status: call
    /// `free()` to see it.
    fn drop(&mut self) {
        let _ = self.release();
    }
}

impl<T: Element> Deref for Registered<'_, T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised elements at `data`, valid until self is freed; a collective
        // writing them holds the exclusive borrow (Scope) for as long as it may.
        unsafe { slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }
}

impl<T: Element> DerefMut for Registered<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref; &mut self makes this the only borrow.
        unsafe { slice::from_raw_parts_mut(self.data.as_ptr(), self.len) }
    }
}

impl<T: Element> fmt::Debug for Registered<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Registered({} x {:?} at {:p} on {:?})", self.len, T::DTYPE, self.data, self.comm)
    }
}
