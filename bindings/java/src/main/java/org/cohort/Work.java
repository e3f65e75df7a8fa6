package org.cohort;

import java.nio.Buffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;

/**
 * One asynchronous collective ({@code cohort_work}). Until it is closed, the Work keeps its
 * buffers reachable — from a static registry, so even a Work (and Comm) the program dropped can
 * never let the garbage collector free memory a transfer still writes — and its registered memory
 * from being freed. {@link #close()} waits for an operation still in flight (bounded by the
 * communicator's timeout); closing the communicator closes its works. Typical use:
 * {@code try (Work w = comm.allReduce(...)) { w.await(); }}.
 */
public final class Work extends Handle {
  /** Every Work not yet closed. */
  private static final Set<Work> OPEN = Collections.newSetFromMap(new IdentityHashMap<>());

  private final Comm comm;
  private Buffer[] buffers;
  /** Registered memory the operation uses, pinned (it cannot be freed) until close(). */
  private RegisteredBuffer[] registered;

  Work(long ptr, Comm comm, Buffer... buffers) {
    this(ptr, comm, buffers, new RegisteredBuffer[0]);
  }

  Work(long ptr, Comm comm, RegisteredBuffer... registered) {
    this(ptr, comm, new Buffer[0], registered);
  }

  private Work(long ptr, Comm comm, Buffer[] buffers, RegisteredBuffer[] registered) {
    super(ptr);
    this.comm = comm;
    this.buffers = buffers;
    this.registered = registered;
    synchronized (OPEN) {
      OPEN.add(this);
    }
  }

  /** Waits until the operation finishes; throws its failure (PEER_FAILED, TIMEOUT, ...). */
  public void await() {
    CohortException.check(CohortC.cohort_work_wait(ptr(), -1));
  }

  /**
   * Waits at most {@code timeoutMs} (>= 0) milliseconds: TIMEOUT when the operation is still
   * running then — the Work stays valid and may be waited on again.
   */
  public void await(long timeoutMs) {
    CohortException.check(CohortC.cohort_work_wait(ptr(), timeoutMs));
  }

  /** Whether the operation has finished; a finished operation's failure is thrown. */
  public boolean isDone() {
    int[] done = new int[1];
    CohortException.check(CohortC.cohort_work_test(ptr(), done));
    return done[0] != 0;
  }

  /** The communicator that issued this operation. */
  public Comm comm() {
    return comm;
  }

  /**
   * Waits for the operation if it is still in flight, releases the handle and the buffers (and
   * the registered memory, which may be freed afterwards). Once the communicator has failed, the
   * buffers are handed to it instead and stay reachable until it is closed: a send to a rank
   * that froze cannot be cancelled, and the rank may read the buffer when it wakes.
   */
  @Override
  public void close() {
    try {
      super.close();
    } finally {
      Buffer[] held = buffers;
      buffers = null;
      if (held != null && held.length > 0) comm.keepIfFailed(held);
      RegisteredBuffer[] pinned = registered;
      registered = null;
      if (pinned != null) {
        for (RegisteredBuffer b : pinned) b.unpin();
      }
      synchronized (OPEN) {
        OPEN.remove(this);
      }
    }
  }

  @Override
  int destroy(long ptr) {
    return CohortC.cohort_work_destroy(ptr);
  }

  /** The open works issued on {@code owner}. */
  static List<Work> openOn(Comm owner) {
    List<Work> mine = new ArrayList<>();
    synchronized (OPEN) {
      for (Work w : OPEN) {
        if (w.comm == owner) mine.add(w);
      }
    }
    return mine;
  }
}
