package org.cohort;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

/**
 * The JVM keeps its own signal handlers with cohort (and so UCX) loaded: the preload library set
 * UCX_HANDLE_ERRORS=none, UCX_ERROR_SIGNALS= and UCX_DEBUG_SIGNO=0 before libucs was loaded.
 * Without that, the NullPointerException below — raised by HotSpot from a SIGSEGV in compiled
 * code — would end the process in UCX's handler instead.
 */
class SignalsTest {
  private static int[] maybe;

  /** Compiled with an implicit null check: a null array faults and HotSpot's handler throws NPE. */
  private static int length(int[] a) {
    return a.length;
  }

  @Test
  void handlersAreTheJvmsAfterUcxStarts() {
    assertEquals(0, NativeLibrary.changedSignal(), "no handler changed while libcohort loaded");
    // A communicator initialises UCX fully (ucp_init, worker, progress thread).
    try (Comm comm = Comm.fromEnv()) {
      assertEquals(1, comm.size());
      assertEquals(0, NativeLibrary.changedSignal(), "no handler changed by UCX at run time");
    }
  }

  @Test
  void nullPointerExceptionsStillWork() {
    try (Comm comm = Comm.fromEnv()) {
      maybe = new int[3];
      long sum = 0;
      for (int i = 0; i < 300_000; ++i) sum += length(maybe); // compiled by now
      assertEquals(900_000, sum);
      maybe = null;
      for (int i = 0; i < 50; ++i) assertThrows(NullPointerException.class, () -> length(maybe));
    }
  }
}
