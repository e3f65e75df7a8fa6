//! Communicators and collectives: a group of ranks (one process each) exchanging host buffers,
//! cohort used as a collective library on its own.
//!
//! The C collectives are asynchronous: the library reads and writes the caller's buffers after
//! the call returns, until the operation completes. Two ways in keep that safe:
//! - `Comm::all_reduce` and friends block until the operation is done.
//! - [`Comm::scope`] hands out [`Work`]s: each borrows its buffers for the whole scope, so they
//!   can be neither touched nor freed until the scope ends, and dropping a `Work` waits for it.
//!   The scope itself waits for every operation still in flight when it ends (also when a
//!   `Work` was leaked with `mem::forget`, or on a panic), as `std::thread::scope` does for
//!   threads — so no safe code can reach a buffer while the library may still use it.
//!
//! Buffers may lie in the communicator's registered memory ([`Comm::alloc`], in
//! `registered.rs`), which collectives of 256 KiB and more use in place where ranks share a host.
//!
//! Operations on one communicator are issued from one thread at a time (a `Comm` is not Sync),
//! in the same order on every rank; they complete in issue order. After a rank fails, every
//! operation returns PEER_FAILED or TIMEOUT naming it, and only status, abort and drop remain.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::os::raw::c_void;
use std::ptr::NonNull;
use std::time::Duration;

use crate::error::{check, Error, Result, Status};
use crate::sys;
use crate::tensor::Element;

/// Options of a communicator.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CommOptions {
    /// A peer silent this long fails the operation; 0 = 60000.
    pub timeout_ms: i64,
    /// Joining the rendezvous; 0 = 60000.
    pub connect_timeout_ms: i64,
}

impl Default for CommOptions {
    fn default() -> CommOptions {
        // SAFETY: never fails.
        let raw = unsafe { sys::cohort_comm_options_default() };
        CommOptions { timeout_ms: raw.timeout_ms, connect_timeout_ms: raw.connect_timeout_ms }
    }
}

/// How a reduction combines the ranks' values (f32, bf16 and f16 reduce in f32; i32 and i64
/// support sum and max).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Avg,
    Max,
}

impl ReduceOp {
    fn to_raw(self) -> sys::cohort_reduce_op {
        match self {
            ReduceOp::Sum => sys::cohort_reduce_op::COHORT_REDUCE_SUM,
            ReduceOp::Avg => sys::cohort_reduce_op::COHORT_REDUCE_AVG,
            ReduceOp::Max => sys::cohort_reduce_op::COHORT_REDUCE_MAX,
        }
    }
}

/// [`Comm::probe_links`]'s result: size x size matrices, symmetric with a zero diagonal.
#[derive(Clone, Debug, PartialEq)]
pub struct Links {
    /// Each link's bandwidth, bytes per second; `bytes_per_second[i][j]` between ranks i and j.
    pub bytes_per_second: Vec<Vec<f64>>,
    /// Each link's one-way latency, seconds.
    pub latency_seconds: Vec<Vec<f64>>,
    /// The matrix as text to print (Mbit/s and ms).
    pub report: String,
}

/// A communicator: this rank's membership of a group of ranks.
pub struct Comm {
    raw: NonNull<sys::cohort_comm>,
    rank: i32,
    size: i32,
}

// SAFETY: a communicator may move between threads; not being Sync keeps its operations on one
// thread at a time, as the library requires.
unsafe impl Send for Comm {}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Comm(rank {} of {})", self.rank, self.size)
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: live, owned handle. Destroy waits (bounded by the timeout) for operations in
        // flight; a Scope borrowing this Comm has ended before, so none remain.
        unsafe {
            sys::cohort_comm_destroy(self.raw.as_ptr());
        }
    }
}

impl Comm {
    /// Joins the job this process was started in: by cohort-run, torchrun (RANK, WORLD_SIZE,
    /// MASTER_ADDR, MASTER_PORT), mpirun or srun; with none of their variables, a world of one.
    /// Collective: every rank of the job calls it.
    pub fn from_env(options: &CommOptions) -> Result<Comm> {
        // SAFETY: never fails; gives the struct with its size set.
        let mut raw = unsafe { sys::cohort_comm_options_default() };
        raw.timeout_ms = options.timeout_ms;
        raw.connect_timeout_ms = options.connect_timeout_ms;
        let mut out = std::ptr::null_mut();
        // SAFETY: valid options and output.
        check(unsafe { sys::cohort_comm_create_from_env(&raw, &mut out) })?;
        Comm::wrap(out)
    }

    fn wrap(raw: *mut sys::cohort_comm) -> Result<Comm> {
        let raw =
            NonNull::new(raw).ok_or_else(|| Error::new(Status::Internal, "Comm: no handle"))?;
        let (mut rank, mut size) = (0, 0);
        // SAFETY: live handle, valid outputs.
        let status = check(unsafe { sys::cohort_comm_rank(raw.as_ptr(), &mut rank, &mut size) });
        let comm = Comm { raw, rank, size }; // owns the handle from here, also on error
        status.map(|_| comm)
    }

    /// The C handle, for calls through [`crate::sys`]; it stays owned by this value.
    pub fn as_raw(&self) -> *mut sys::cohort_comm {
        self.raw.as_ptr()
    }

    /// This rank, 0..size-1.
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> i32 {
        self.size
    }

    /// Collective: ranks with equal `color` form a new communicator ordered by (key, rank). A
    /// rank with a negative color takes part and gets None.
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Comm>> {
        let mut out = std::ptr::null_mut();
        // SAFETY: live handle, valid output.
        check(unsafe { sys::cohort_comm_split(self.as_raw(), color, key, &mut out) })?;
        if out.is_null() {
            Ok(None)
        } else {
            Comm::wrap(out).map(Some)
        }
    }

    /// Ok, or the sticky failure (PEER_FAILED or TIMEOUT, its message naming the rank).
    pub fn status(&self) -> Result<()> {
        // SAFETY: live handle; the failed rank is not asked for.
        check(unsafe { sys::cohort_comm_status(self.as_raw(), std::ptr::null_mut()) })
    }

    /// The rank whose failure stopped this communicator, if any.
    pub fn failed_rank(&self) -> Option<i32> {
        let mut failed = -1;
        // SAFETY: live handle, valid output (written by every status).
        let _ = unsafe { sys::cohort_comm_status(self.as_raw(), &mut failed) };
        if failed >= 0 {
            Some(failed)
        } else {
            None
        }
    }

    /// Measures the links between every pair of ranks (cohort_comm_probe_links): a collective —
    /// every rank calls it at the same point — bounded to about 20 s. PEER_FAILED or TIMEOUT
    /// when a rank fails meanwhile.
    pub fn probe_links(&self) -> Result<Links> {
        let n = self.size.max(0) as usize;
        let cells = n * n;
        let mut bandwidth = vec![0.0f64; cells];
        let mut latency = vec![0.0f64; cells];
        // A collective cannot be asked again: room for the whole text (about 18 bytes a cell).
        let mut report = vec![0u8; 4096 + 32 * (cells + n)];
        // SAFETY: live handle; each matrix holds `cells` doubles and report report.len() bytes.
        check(unsafe {
            sys::cohort_comm_probe_links(
                self.as_raw(),
                bandwidth.as_mut_ptr(),
                latency.as_mut_ptr(),
                cells,
                report.as_mut_ptr().cast(),
                report.len(),
                std::ptr::null_mut(),
            )
        })?;
        let end = report.iter().position(|&b| b == 0).unwrap_or(report.len());
        report.truncate(end);
        let rows = |m: Vec<f64>| -> Vec<Vec<f64>> {
            if n == 0 {
                Vec::new()
            } else {
                m.chunks(n).map(|row| row.to_vec()).collect()
            }
        };
        Ok(Links {
            bytes_per_second: rows(bandwidth),
            latency_seconds: rows(latency),
            report: String::from_utf8_lossy(&report).into_owned(),
        })
    }

    /// Fails every pending and later operation and tells the peers; returns at once.
    pub fn abort(&self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::cohort_comm_abort(self.as_raw()) })
    }

    /// Runs `f` with a [`Scope`] that issues asynchronous operations. Buffers given to them stay
    /// borrowed until the scope ends, and the scope waits for every operation still in flight
    /// before it returns (or unwinds).
    ///
    /// ```no_run
    /// # fn main() -> cohort::Result<()> {
    /// use cohort::{Comm, ReduceOp};
    /// let comm = Comm::from_env(&Default::default())?;
    /// let (mut grads, mut stats) = (vec![1f32; 1024], vec![0i64; 4]);
    /// comm.scope(|s| -> cohort::Result<()> {
    ///     let a = s.all_reduce_in_place(&mut grads, ReduceOp::Avg)?; // both in flight at once
    ///     let b = s.all_reduce_in_place(&mut stats, ReduceOp::Sum)?;
    ///     a.wait()?;
    ///     b.wait()
    /// })?;
    /// println!("{}", grads[0]); // the scope has ended: the buffers are ours again
    /// # Ok(()) }
    /// ```
    ///
    /// A buffer cannot be touched while an operation may still use it:
    ///
    /// ```compile_fail
    /// # fn main() -> cohort::Result<()> {
    /// let comm = cohort::Comm::from_env(&Default::default())?;
    /// let mut buffer = vec![1f32; 4];
    /// comm.scope(|s| -> cohort::Result<()> {
    ///     let work = s.all_reduce_in_place(&mut buffer, cohort::ReduceOp::Sum)?;
    ///     buffer[0] = 2.0; // error: `buffer` is borrowed by the operation
    ///     work.wait()
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// nor be freed before the scope ends:
    ///
    /// ```compile_fail
    /// # fn main() -> cohort::Result<()> {
    /// let comm = cohort::Comm::from_env(&Default::default())?;
    /// comm.scope(|s| -> cohort::Result<()> {
    ///     let mut local = vec![1f32; 4];
    ///     let work = s.all_reduce_in_place(&mut local, cohort::ReduceOp::Sum)?;
    ///     work.wait() // error: `local` is dropped here, before the scope has waited
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// and a [`Work`] cannot leave its scope:
    ///
    /// ```compile_fail
    /// # fn main() -> cohort::Result<()> {
    /// let comm = cohort::Comm::from_env(&Default::default())?;
    /// let work = comm.scope(|s| s.barrier())?; // error: the Work borrows the scope
    /// # Ok(()) }
    /// ```
    pub fn scope<'env, F, R>(&'env self, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
    {
        let pending = RefCell::new(Vec::new());
        let _wait_all = WaitAll(&pending); // dropped after `scope`, also when f panics
        let scope = Scope { comm: self, pending: &pending, scope: PhantomData };
        f(&scope)
    }

    /// Sums (averages, maxes) `input` over the ranks into `output` (the same length). Blocks.
    pub fn all_reduce<T: Element>(
        &self,
        input: &[T],
        output: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        self.scope(|s| s.all_reduce(input, output, op)?.wait())
    }

    /// all_reduce with the result written over `buffer`. Blocks.
    pub fn all_reduce_in_place<T: Element>(&self, buffer: &mut [T], op: ReduceOp) -> Result<()> {
        self.scope(|s| s.all_reduce_in_place(buffer, op)?.wait())
    }

    /// Reduces `input` (size x n elements) and gives rank r block r in `output` (n). Blocks.
    pub fn reduce_scatter<T: Element>(
        &self,
        input: &[T],
        output: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        self.scope(|s| s.reduce_scatter(input, output, op)?.wait())
    }

    /// Gathers every rank's `input` (n elements) into `output` (size x n, in rank order). Blocks.
    pub fn all_gather<T: Element>(&self, input: &[T], output: &mut [T]) -> Result<()> {
        self.scope(|s| s.all_gather(input, output)?.wait())
    }

    /// Copies `root`'s `buffer` into every rank's. Blocks.
    pub fn broadcast<T: Element>(&self, buffer: &mut [T], root: i32) -> Result<()> {
        self.scope(|s| s.broadcast(buffer, root)?.wait())
    }

    /// Sends block r of `input` (size x n) to rank r, receiving rank r's block into block r of
    /// `output`. Blocks.
    pub fn all_to_all<T: Element>(&self, input: &[T], output: &mut [T]) -> Result<()> {
        self.scope(|s| s.all_to_all(input, output)?.wait())
    }

    /// Returns once every rank has reached it.
    pub fn barrier(&self) -> Result<()> {
        self.scope(|s| s.barrier()?.wait())
    }

    /// Sends `buffer` to `peer` (matched in issue order per pair of ranks). Blocks.
    pub fn send<T: Element>(&self, buffer: &[T], peer: i32) -> Result<()> {
        self.scope(|s| s.send(buffer, peer)?.wait())
    }

    /// Receives from `peer` into `buffer`. Blocks.
    pub fn recv<T: Element>(&self, buffer: &mut [T], peer: i32) -> Result<()> {
        self.scope(|s| s.recv(buffer, peer)?.wait())
    }
}

/// The operations a scope issued that are not yet released.
type Pending = RefCell<Vec<*mut sys::cohort_work>>;

/// Waits for and releases every operation still pending when a scope ends.
struct WaitAll<'a>(&'a Pending);

impl Drop for WaitAll<'_> {
    fn drop(&mut self) {
        for work in self.0.borrow_mut().drain(..) {
            // SAFETY: a live work handle whose Work was leaked; destroy waits for the operation
            // (bounded by the communicator's timeout), after which its buffers are free.
            unsafe {
                sys::cohort_work_destroy(work);
            }
        }
    }
}

/// Issues asynchronous operations on a communicator inside [`Comm::scope`]. Buffers are borrowed
/// for `'scope`, the whole scope.
pub struct Scope<'scope, 'env: 'scope> {
    comm: &'env Comm,
    pending: &'scope Pending,
    /// Invariant in 'scope, like std::thread::Scope, so the borrows cannot be shortened.
    scope: PhantomData<&'scope mut &'scope ()>,
}

/// An operation in flight. Dropping it waits for the operation (its status is then lost: call
/// [`Work::wait`] to see it).
#[must_use = "a Work is waited for when dropped; call wait() to see its status"]
pub struct Work<'scope> {
    raw: NonNull<sys::cohort_work>,
    pending: &'scope Pending,
}

impl Work<'_> {
    /// Waits until the operation finishes (bounded by the communicator's timeout) and returns
    /// its status.
    pub fn wait(self) -> Result<()> {
        // SAFETY: live work handle.
        check(unsafe { sys::cohort_work_wait(self.raw.as_ptr(), -1) })
    }

    /// Waits at most `timeout`: Ok(true) when the operation finished well, Ok(false) while it is
    /// still running (the Work stays valid), its failure otherwise.
    pub fn wait_for(&mut self, timeout: Duration) -> Result<bool> {
        let ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        // SAFETY: live work handle.
        match check(unsafe { sys::cohort_work_wait(self.raw.as_ptr(), ms) }) {
            Ok(()) => Ok(true),
            // TIMEOUT is also how an operation fails when a peer goes silent: ask which it is.
            Err(e) if e.status() == Status::Timeout => self.test(),
            Err(e) => Err(e),
        }
    }

    /// Ok(true) when finished well, Ok(false) while pending, the failure otherwise.
    pub fn test(&mut self) -> Result<bool> {
        let mut done = 0;
        // SAFETY: live work handle, valid output.
        check(unsafe { sys::cohort_work_test(self.raw.as_ptr(), &mut done) })?;
        Ok(done != 0)
    }
}

impl Drop for Work<'_> {
    fn drop(&mut self) {
        let raw = self.raw.as_ptr();
        self.pending.borrow_mut().retain(|&w| w != raw);
        // SAFETY: live, owned work handle; destroy waits for the operation first.
        unsafe {
            sys::cohort_work_destroy(raw);
        }
    }
}

fn length_error(what: &str, detail: String) -> Error {
    Error::new(Status::InvalidArgument, format!("Comm::{}: {}", what, detail))
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// The communicator this scope issues on.
    pub fn comm(&self) -> &'env Comm {
        self.comm
    }

    /// Runs one C call that writes a work handle, and tracks it.
    fn issue(
        &self,
        call: impl FnOnce(*mut sys::cohort_comm, *mut *mut sys::cohort_work) -> sys::cohort_status,
    ) -> Result<Work<'scope>> {
        let mut out = std::ptr::null_mut();
        check(call(self.comm.as_raw(), &mut out))?;
        let raw = NonNull::new(out)
            .ok_or_else(|| Error::new(Status::Internal, "Comm: no work handle"))?;
        self.pending.borrow_mut().push(out);
        Ok(Work { raw, pending: self.pending })
    }

    /// Size times n, for buffers that hold one block per rank.
    fn blocks(&self, what: &str, n: usize) -> Result<usize> {
        n.checked_mul(self.comm.size.max(0) as usize)
            .ok_or_else(|| length_error(what, format!("{} elements per rank overflow", n)))
    }

    /// [`Comm::all_reduce`], in flight until the returned Work is waited for.
    pub fn all_reduce<T: Element>(
        &self,
        input: &'scope [T],
        output: &'scope mut [T],
        op: ReduceOp,
    ) -> Result<Work<'scope>> {
        if input.len() != output.len() {
            return Err(length_error(
                "all_reduce",
                format!("input has {} elements but output has {}", input.len(), output.len()),
            ));
        }
        let (src, dst, n) =
            (input.as_ptr() as *const c_void, output.as_mut_ptr() as *mut c_void, input.len());
        // SAFETY: both buffers hold n elements and stay borrowed until the scope has waited.
        self.issue(|c, w| unsafe {
            sys::cohort_comm_all_reduce(c, src, dst, n, T::DTYPE.to_raw(), op.to_raw(), w)
        })
    }

    /// [`Comm::all_reduce_in_place`], in flight until the returned Work is waited for.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buffer: &'scope mut [T],
        op: ReduceOp,
    ) -> Result<Work<'scope>> {
        let (buf, n) = (buffer.as_mut_ptr() as *mut c_void, buffer.len());
        // SAFETY: in == out is allowed; the buffer stays borrowed until the scope has waited.
        self.issue(|c, w| unsafe {
            sys::cohort_comm_all_reduce(c, buf, buf, n, T::DTYPE.to_raw(), op.to_raw(), w)
        })
    }

    /// [`Comm::reduce_scatter`], in flight until the returned Work is waited for.
    pub fn reduce_scatter<T: Element>(
        &self,
        input: &'scope [T],
        output: &'scope mut [T],
        op: ReduceOp,
    ) -> Result<Work<'scope>> {
        let n = output.len();
        let want = self.blocks("reduce_scatter", n)?;
        if input.len() != want {
            return Err(length_error(
                "reduce_scatter",
                format!(
                    "input has {} elements, expected {} ranks x {} (output)",
                    input.len(),
                    self.comm.size,
                    n
                ),
            ));
        }
        let (src, dst) = (input.as_ptr() as *const c_void, output.as_mut_ptr() as *mut c_void);
        // SAFETY: input holds size x n, output n elements; both borrowed until the scope waited.
        self.issue(|c, w| unsafe {
            sys::cohort_comm_reduce_scatter(c, src, dst, n, T::DTYPE.to_raw(), op.to_raw(), w)
        })
    }

    /// [`Comm::all_gather`], in flight until the returned Work is waited for.
    pub fn all_gather<T: Element>(
        &self,
        input: &'scope [T],
        output: &'scope mut [T],
    ) -> Result<Work<'scope>> {
        let n = input.len();
        let want = self.blocks("all_gather", n)?;
        if output.len() != want {
            return Err(length_error(
                "all_gather",
                format!(
                    "output has {} elements, expected {} ranks x {} (input)",
                    output.len(),
                    self.comm.size,
                    n
                ),
            ));
        }
        let (src, dst) = (input.as_ptr() as *const c_void, output.as_mut_ptr() as *mut c_void);
        // SAFETY: input holds n, output size x n elements; both borrowed until the scope waited.
        self.issue(|c, w| unsafe {
            sys::cohort_comm_all_gather(c, src, dst, n, T::DTYPE.to_raw(), w)
        })
    }

    /// [`Comm::broadcast`], in flight until the returned Work is waited for.
    pub fn broadcast<T: Element>(
        &self,
        buffer: &'scope mut [T],
        root: i32,
    ) -> Result<Work<'scope>> {
        let (buf, n) = (buffer.as_mut_ptr() as *mut c_void, buffer.len());
        // SAFETY: the buffer holds n elements, borrowed until the scope has waited.
        self.issue(|c, w| unsafe {
            sys::cohort_comm_broadcast(c, buf, n, T::DTYPE.to_raw(), root, w)
        })
    }

    /// [`Comm::all_to_all`], in flight until the returned Work is waited for.
    pub fn all_to_all<T: Element>(
        &self,
        input: &'scope [T],
        output: &'scope mut [T],
    ) -> Result<Work<'scope>> {
        let size = self.comm.size.max(1) as usize;
        if input.len() != output.len() || input.len() % size != 0 {
            return Err(length_error(
                "all_to_all",
                format!(
                    "input and output must both hold {} ranks x n elements, got {} and {}",
                    size,
                    input.len(),
                    output.len()
                ),
            ));
        }
        let n = input.len() / size;
        let (src, dst) = (input.as_ptr() as *const c_void, output.as_mut_ptr() as *mut c_void);
        // SAFETY: distinct buffers (one shared, one exclusive borrow) of size x n elements each.
        self.issue(|c, w| unsafe {
            sys::cohort_comm_all_to_all(c, src, dst, n, T::DTYPE.to_raw(), w)
        })
    }

    /// [`Comm::barrier`], in flight until the returned Work is waited for.
    pub fn barrier(&self) -> Result<Work<'scope>> {
        // SAFETY: no buffers.
        self.issue(|c, w| unsafe { sys::cohort_comm_barrier(c, w) })
    }

    /// [`Comm::send`], in flight until the returned Work is waited for.
    pub fn send<T: Element>(&self, buffer: &'scope [T], peer: i32) -> Result<Work<'scope>> {
        let (buf, n) = (buffer.as_ptr() as *const c_void, buffer.len());
        // SAFETY: the buffer holds n elements, borrowed until the scope has waited.
        self.issue(|c, w| unsafe { sys::cohort_comm_send(c, buf, n, T::DTYPE.to_raw(), peer, w) })
    }

    /// [`Comm::recv`], in flight until the returned Work is waited for.
    pub fn recv<T: Element>(&self, buffer: &'scope mut [T], peer: i32) -> Result<Work<'scope>> {
        let (buf, n) = (buffer.as_mut_ptr() as *mut c_void, buffer.len());
        // SAFETY: the buffer holds n elements, borrowed exclusively until the scope has waited.
        self.issue(|c, w| unsafe { sys::cohort_comm_recv(c, buf, n, T::DTYPE.to_raw(), peer, w) })
    }
}
