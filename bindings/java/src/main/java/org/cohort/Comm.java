package org.cohort;

import java.nio.Buffer;

/**
 * A group of ranks, one process each, exchanging host memory through UCX ({@code cohort_comm}).
 * Collectives are asynchronous: each returns a {@link Work} at once. Their buffers are direct
 * {@link java.nio.Buffer}s in the platform's byte order, used from index 0; each must hold at
 * least the elements the operation reads or writes (checked here: INVALID_ARGUMENT otherwise) and
 * must not be touched until the Work completes. Operations on one communicator are issued from
 * one thread at a time, in the same order on every rank, and complete in issue order.
 *
 * <p>A rank that dies or stops answering turns every pending and later operation into
 * PEER_FAILED (or TIMEOUT) naming the rank, on every surviving rank; the communicator then only
 * serves {@link #health} and {@link #close}.
 */
public final class Comm extends Handle {
  /** {@code cohort_reduce_op}. f32, bf16 and f16 reduce in f32; i32 and i64 support SUM and MAX. */
  public enum ReduceOp {
    SUM(cohort_reduce_op.COHORT_REDUCE_SUM),
    AVG(cohort_reduce_op.COHORT_REDUCE_AVG),
    MAX(cohort_reduce_op.COHORT_REDUCE_MAX);

    final int code;

    ReduceOp(int code) {
      this.code = code;
    }
  }

  /** The communicator's state: OK, or the sticky failure with the rank it names (-1 if none). */
  public record Health(Status status, int failedRank, String message) {
    public boolean ok() {
      return status == Status.OK;
    }
  }

  /** The number of ranks, read once: it never changes. */
  private final int size;

  private Comm(long ptr) {
    super(ptr);
    int[] n = new int[1];
    int code = CohortC.cohort_comm_rank(ptr, new int[1], n);
    if (code != cohort_status.COHORT_OK) {
      CohortException e = CohortException.fromLastError(code);
      CohortC.cohort_comm_destroy(ptr);
      throw e;
    }
    size = n[0];
  }

  /**
   * Joins the job this process was started in — by cohort-run, torchrun, mpirun or srun; with none
   * of their variables, a world of one. Collective: every rank of the job calls it.
   */
  public static Comm fromEnv() {
    return fromEnv(new CommOptions());
  }

  public static Comm fromEnv(CommOptions options) {
    cohort_comm_options o = options.toNative();
    try {
      return new Comm(create(out -> CohortC.cohort_comm_create_from_env(o, out)));
    } finally {
      o.delete();
    }
  }

  /** Waits for (and closes) the works still open on this communicator, then destroys it. */
  @Override
  public void close() {
    RuntimeException first = null;
    for (Work w : Work.openOn(this)) {
      try {
        w.close();
      } catch (RuntimeException e) {
        if (first == null) first = e;
      }
    }
    super.close();
    if (first != null) throw first;
  }

  @Override
  int destroy(long ptr) {
    return CohortC.cohort_comm_destroy(ptr);
  }

  /** This rank, 0..size-1. */
  public int rank() {
    int[] rank = new int[1];
    int[] n = new int[1];
    CohortException.check(CohortC.cohort_comm_rank(ptr(), rank, n));
    return rank[0];
  }

  /** The number of ranks. */
  public int size() {
    int[] rank = new int[1];
    int[] n = new int[1];
    CohortException.check(CohortC.cohort_comm_rank(ptr(), rank, n));
    return n[0];
  }

  /**
   * Collective: ranks with equal {@code color} form a new communicator ordered by (key, rank). A
   * rank with color &lt; 0 takes part and gets null.
   */
  public Comm split(int color, int key) {
    long sub = create(out -> CohortC.cohort_comm_split(ptr(), color, key, out));
    return sub == 0 ? null : new Comm(sub);
  }

  /** OK, or the sticky failure (its message names the rank). */
  public Health health() {
    int[] failed = new int[1];
    int code = CohortC.cohort_comm_status(ptr(), failed);
    if (code == cohort_status.COHORT_OK) return new Health(Status.OK, -1, "");
    if (code == cohort_status.COHORT_ERR_INVALID_HANDLE) throw CohortException.fromLastError(code);
    return new Health(Status.of(code), failed[0], CohortC.cohort_last_error());
  }

  /** Fails every pending and later operation and tells the peers. Returns at once. */
  public void abort() {
    CohortException.check(CohortC.cohort_comm_abort(ptr()));
  }

  // ---- collectives: count is in elements ----------------------------------------------------

  /** Reduces {@code in} over all ranks into {@code out} (count elements each; in may be out). */
  public Work allReduce(Buffer in, Buffer out, long count, DType dtype, ReduceOp op) {
    String fn = "cohort_comm_all_reduce";
    checkIn(fn, "in", in, count, 1, dtype);
    checkOut(fn, "out", out, count, 1, dtype);
    return issue(new Buffer[] {in, out},
        w -> CohortC.cohort_comm_all_reduce(ptr(), in, out, count, dtype.code(), op.code, w));
  }

  /** in: size x count elements; out: count (rank r receives block r of the reduction). */
  public Work reduceScatter(Buffer in, Buffer out, long count, DType dtype, ReduceOp op) {
    String fn = "cohort_comm_reduce_scatter";
    checkIn(fn, "in", in, count, size, dtype);
    checkOut(fn, "out", out, count, 1, dtype);
    return issue(new Buffer[] {in, out},
        w -> CohortC.cohort_comm_reduce_scatter(ptr(), in, out, count, dtype.code(), op.code, w));
  }

  /** in: count elements; out: size x count, rank r's block at r. */
  public Work allGather(Buffer in, Buffer out, long count, DType dtype) {
    String fn = "cohort_comm_all_gather";
    checkIn(fn, "in", in, count, 1, dtype);
    checkOut(fn, "out", out, count, size, dtype);
    return issue(new Buffer[] {in, out},
        w -> CohortC.cohort_comm_all_gather(ptr(), in, out, count, dtype.code(), w));
  }

  /** Copies root's {@code buf} into every other rank's. */
  public Work broadcast(Buffer buf, long count, DType dtype, int root) {
    checkOut("cohort_comm_broadcast", "buf", buf, count, 1, dtype);
    return issue(new Buffer[] {buf},
        w -> CohortC.cohort_comm_broadcast(ptr(), buf, count, dtype.code(), root, w));
  }

  /** in, out: size x count elements each, distinct buffers; block r of in goes to rank r. */
  public Work allToAll(Buffer in, Buffer out, long count, DType dtype) {
    String fn = "cohort_comm_all_to_all";
    checkIn(fn, "in", in, count, size, dtype);
    checkOut(fn, "out", out, count, size, dtype);
    return issue(new Buffer[] {in, out},
        w -> CohortC.cohort_comm_all_to_all(ptr(), in, out, count, dtype.code(), w));
  }

  public Work barrier() {
    return issue(new Buffer[0], w -> CohortC.cohort_comm_barrier(ptr(), w));
  }

  /** Point to point, matched in issue order per (sender, receiver) pair. */
  public Work send(Buffer buf, long count, DType dtype, int peer) {
    checkIn("cohort_comm_send", "buf", buf, count, 1, dtype);
    return issue(new Buffer[] {buf},
        w -> CohortC.cohort_comm_send(ptr(), buf, count, dtype.code(), peer, w));
  }

  public Work recv(Buffer buf, long count, DType dtype, int peer) {
    checkOut("cohort_comm_recv", "buf", buf, count, 1, dtype);
    return issue(new Buffer[] {buf},
        w -> CohortC.cohort_comm_recv(ptr(), buf, count, dtype.code(), peer, w));
  }

  /** A C collective call: writes the new work handle to out[0] and returns the status. */
  @FunctionalInterface
  private interface Issue {
    int issue(long[] workOut);
  }

  private Work issue(Buffer[] keep, Issue call) {
    long[] out = new long[1];
    CohortException.check(call.issue(out));
    return new Work(out[0], this, keep);
  }

  /** A buffer C reads: see {@link #checkSize}. */
  private void checkIn(String fn, String arg, Buffer b, long count, long blocks, DType dtype) {
    checkSize(fn, arg, b, count, blocks, dtype, false);
  }

  /** A buffer C writes: see {@link #checkSize}; read-only buffers are refused too. */
  private void checkOut(String fn, String arg, Buffer b, long count, long blocks, DType dtype) {
    checkSize(fn, arg, b, count, blocks, dtype, true);
  }

  /**
   * The buffer is direct, in native order and holds blocks x count elements of dtype. A closed
   * communicator is left to C to report (INVALID_HANDLE).
   */
  private void checkSize(
      String fn, String arg, Buffer b, long count, long blocks, DType dtype, boolean written) {
    if (isClosed()) return;
    Tensor.checkBuffer(fn + ": " + arg, b, dtype);
    if (written && b.isReadOnly())
      throw CohortException.invalid(fn, arg + " is a read-only buffer");
    if (count < 0 || count > Long.MAX_VALUE / 8 / Math.max(blocks, 1)) {
      throw CohortException.invalid(
          fn, "count must be 0.." + Long.MAX_VALUE / 8 / Math.max(blocks, 1) + ", got " + count);
    }
    long need = count * blocks * dtype.size();
    long have = Tensor.byteSize(b);
    if (have < need) {
      throw CohortException.invalid(fn,
          arg + " has " + have + " bytes, but " + (blocks > 1 ? blocks + " x " : "") + count + " "
              + dtype.cName() + " elements need " + need);
    }
  }
}
