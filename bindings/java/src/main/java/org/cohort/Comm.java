package org.cohort;

import java.nio.Buffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;

/**
 * A group of ranks, one process each, exchanging host memory through UCX ({@code cohort_comm}).
 * Collectives are asynchronous: each returns a {@link Work} at once. Their buffers are direct
 * {@link java.nio.Buffer}s in the platform's byte order, used from index 0; each must hold at
 * least the elements the operation reads or writes (checked here: INVALID_ARGUMENT otherwise) and
 * must not be touched until the Work completes. Operations on one communicator are issued from
 * one thread at a time, in the same order on every rank, and complete in issue order.
 *
 * <p>Buffers may also be the communicator's registered memory ({@link #alloc}, a {@link
 * RegisteredBuffer}), which collectives of 256 KiB and more use in place where the ranks share a
 * host; the overloads taking RegisteredBuffers read the dtype from them.
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

  /**
   * {@link #probeLinks}'s result: size x size matrices, symmetric with a zero diagonal, of each
   * link's bandwidth (bytes per second) and latency (seconds), and the matrix as text (Mbit/s and
   * ms) to print.
   */
  public record Links(double[][] bytesPerSecond, double[][] latencySeconds, String report) {}

  /** The number of ranks, read once: it never changes. */
  private final int size;

  /**
   * Buffers of operations closed after this communicator failed: reachable until close() has
   * destroyed it (Work.close).
   */
  private final List<Buffer[]> kept = new ArrayList<>();

  /** The registered memory of this communicator not yet freed; released by close(). */
  private final Set<RegisteredBuffer> registered =
      Collections.newSetFromMap(new IdentityHashMap<>());

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

  /**
   * Waits for (and closes) the works still open on this communicator, then destroys it, which
   * releases its registered memory not yet freed (those RegisteredBuffers throw INVALID_HANDLE
   * afterwards). INVALID_STATE, leaving the communicator open, while an open Work of another
   * communicator uses one of them.
   */
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
    if (!isClosed()) {
      List<RegisteredBuffer> mine;
      synchronized (registered) {
        mine = new ArrayList<>(registered);
      }
      try {
        for (RegisteredBuffer b : mine) b.checkIdle("Comm.close");
      } catch (CohortException e) {
        if (first != null) e.addSuppressed(first);
        throw e;
      }
      for (RegisteredBuffer b : mine) b.release();
      synchronized (registered) {
        registered.clear();
      }
    }
    try {
      super.close();
    } finally {
      synchronized (kept) {
        kept.clear(); // the communicator is gone (Handle.close): nothing can read them now
      }
    }
    if (first != null) throw first;
  }

  /** Keeps {@code buffers} until close() when this communicator has failed (Work.close). */
  void keepIfFailed(Buffer[] buffers) {
    if (isClosed() || health().ok()) return;
    synchronized (kept) {
      kept.add(buffers);
    }
  }

  /** How many operations' buffers are kept (tests). */
  int keptCount() {
    synchronized (kept) {
      return kept.size();
    }
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
   * Measures the links between every pair of ranks ({@code cohort_comm_probe_links}): a collective
   * — every rank calls it at the same point — bounded to about 20 s. PEER_FAILED or TIMEOUT when
   * a rank fails meanwhile.
   */
  public Links probeLinks() {
    final int cells = size * size;
    double[] both = new double[2 * cells]; // bandwidths, then latencies
    // A collective cannot be asked again: room for the whole text (about 18 characters a cell).
    byte[] report = new byte[4096 + 32 * (cells + size)];
    long[] needed = new long[1];
    CohortException.check(CohortC.cohortj_comm_probe_links(ptr(), both, report, needed));
    double[][] bandwidth = new double[size][];
    double[][] latency = new double[size][];
    for (int i = 0; i < size; i++) {
      bandwidth[i] = Arrays.copyOfRange(both, i * size, (i + 1) * size);
      latency[i] = Arrays.copyOfRange(both, cells + i * size, cells + (i + 1) * size);
    }
    int length = 0;
    while (length < report.length && report[length] != 0) length++;
    return new Links(bandwidth, latency, new String(report, 0, length, StandardCharsets.UTF_8));
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

  // ---- registered memory ---------------------------------------------------------------------

  /**
   * {@code count} zeroed elements of registered memory (see {@link RegisteredBuffer}).
   * Collective: every rank calls it with the same count and dtype, in the same order among its
   * other operations, and frees the buffer at the same point. INVALID_ARGUMENT for a count below
   * 1 or larger than any host has; OUT_OF_MEMORY; the communicator's failure once it failed.
   */
  public RegisteredBuffer alloc(long count, DType dtype) {
    String fn = "Comm.alloc";
    if (dtype == null) throw CohortException.invalid(fn, "dtype is null");
    long most = Long.MAX_VALUE / dtype.size();
    if (count < 0 || count > most) {
      throw CohortException.invalid(fn, "count must be 1.." + most + ", got " + count);
    }
    long bytes = count * dtype.size();
    long[] out = new long[1];
    CohortException.check(CohortC.cohort_comm_mem_alloc(ptr(), bytes, out));
    CohortC.cohortj_mem_zero(out[0], bytes);
    RegisteredBuffer b = new RegisteredBuffer(this, out[0], count, dtype);
    synchronized (registered) {
      registered.add(b);
    }
    return b;
  }

  /** A buffer of this communicator was freed. */
  void forget(RegisteredBuffer b) {
    synchronized (registered) {
      registered.remove(b);
    }
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

  // ---- the same collectives on registered memory: the dtype is the buffers' ------------------

  /** {@link #allReduce(Buffer, Buffer, long, DType, ReduceOp)} in registered memory. */
  public Work allReduce(RegisteredBuffer in, RegisteredBuffer out, long count, ReduceOp op) {
    return registered(cohortj_collective.COHORTJ_ALL_REDUCE, "cohort_comm_all_reduce", in, 1, out,
        1, count, op == null ? -1 : op.code, 0);
  }

  /** in: size x count elements; out: count. */
  public Work reduceScatter(RegisteredBuffer in, RegisteredBuffer out, long count, ReduceOp op) {
    return registered(cohortj_collective.COHORTJ_REDUCE_SCATTER, "cohort_comm_reduce_scatter", in,
        size, out, 1, count, op == null ? -1 : op.code, 0);
  }

  /** in: count elements; out: size x count. */
  public Work allGather(RegisteredBuffer in, RegisteredBuffer out, long count) {
    return registered(cohortj_collective.COHORTJ_ALL_GATHER, "cohort_comm_all_gather", in, 1, out,
        size, count, 0, 0);
  }

  public Work broadcast(RegisteredBuffer buf, long count, int root) {
    return registered(cohortj_collective.COHORTJ_BROADCAST, "cohort_comm_broadcast", null, 0, buf,
        1, count, 0, root);
  }

  /** in, out: size x count elements each, distinct buffers. */
  public Work allToAll(RegisteredBuffer in, RegisteredBuffer out, long count) {
    return registered(cohortj_collective.COHORTJ_ALL_TO_ALL, "cohort_comm_all_to_all", in, size,
        out, size, count, 0, 0);
  }

  public Work send(RegisteredBuffer buf, long count, int peer) {
    return registered(
        cohortj_collective.COHORTJ_SEND, "cohort_comm_send", buf, 1, null, 0, count, 0, peer);
  }

  public Work recv(RegisteredBuffer buf, long count, int peer) {
    return registered(
        cohortj_collective.COHORTJ_RECV, "cohort_comm_recv", null, 0, buf, 1, count, 0, peer);
  }

  /**
   * Checks the buffers (in: inBlocks x count elements, out: outBlocks x count; null where the
   * call has none), pins them for the Work's life and issues the collective.
   */
  private Work registered(int kind, String fn, RegisteredBuffer in, long inBlocks,
      RegisteredBuffer out, long outBlocks, long count, int op, int peer) {
    long[] work = new long[1];
    if (isClosed()) { // C names the closed communicator
      CohortException.check(CohortC.cohortj_comm_collective(kind, 0, 0, 0, 0, 0, 0, peer, work));
    }
    if (op < 0) throw CohortException.invalid(fn, "op is null");
    checkRegistered(fn, "in", in, inBlocks, count);
    checkRegistered(fn, kind == cohortj_collective.COHORTJ_ALL_REDUCE || in != null ? "out" : "buf",
        out, outBlocks, count);
    if (in != null && out != null && in.dtype() != out.dtype()) {
      throw CohortException.invalid(
          fn, "in holds " + in.dtype().cName() + " but out holds " + out.dtype().cName());
    }
    DType dtype = (in != null ? in : out).dtype();
    List<RegisteredBuffer> pinned = new ArrayList<>(2);
    try {
      long inAddress = 0;
      long outAddress = 0;
      if (in != null) {
        inAddress = in.pin(fn, "in");
        pinned.add(in);
      }
      if (out != null && out == in) { // in place: one buffer, pinned once
        outAddress = inAddress;
      } else if (out != null) {
        outAddress = out.pin(fn, in != null ? "out" : "buf");
        pinned.add(out);
      }
      CohortException.check(CohortC.cohortj_comm_collective(
          kind, ptr(), inAddress, outAddress, count, dtype.code(), op, peer, work));
    } catch (RuntimeException e) {
      for (RegisteredBuffer b : pinned) b.unpin();
      throw e;
    }
    return new Work(work[0], this, pinned.toArray(new RegisteredBuffer[0]));
  }

  /** A registered buffer given where blocks > 0 holds blocks x count elements. */
  private static void checkRegistered(
      String fn, String arg, RegisteredBuffer b, long blocks, long count) {
    if (blocks == 0) return;
    if (b == null) throw CohortException.invalid(fn, arg + " is null");
    if (count < 0 || count > b.count() / blocks) {
      throw CohortException.invalid(fn,
          arg + " holds " + b.count() + " " + b.dtype().cName() + " elements, so count must be 0.."
              + b.count() / blocks + (blocks > 1 ? " (" + blocks + " blocks of count)" : "")
              + ", got " + count);
    }
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
