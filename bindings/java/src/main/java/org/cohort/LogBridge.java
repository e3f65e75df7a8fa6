package org.cohort;

import java.nio.charset.StandardCharsets;

/**
 * The Java end of the log callback: the JNI layer calls {@link #deliver} for every line
 * (cohort_java.i, cohortj_log). Kept free of other classes' static state, because JNI_OnLoad
 * initialises it while the native library is still loading.
 */
final class LogBridge {
  private static volatile LogHandler handler;
  private static boolean hookInstalled;

  private LogBridge() {}

  static synchronized void set(LogHandler h) {
    handler = h;
    CohortException.check(CohortC.cohortj_forward_log(h != null ? 1 : 0));
    if (h != null && !hookInstalled) {
      // Lines logged while the JVM shuts down go back to stderr, not into a dying JVM.
      Runtime.getRuntime().addShutdownHook(
          new Thread(() -> CohortC.cohortj_forward_log(0), "cohort-log-reset"));
      hookInstalled = true;
    }
  }

  /** Called from native code on any thread. Bytes, not a jstring: messages may hold any UTF-8. */
  static void deliver(int level, byte[] message) {
    LogHandler h = handler;
    if (h == null) return;
    try {
      h.log(level, new String(message, StandardCharsets.UTF_8));
    } catch (Throwable ignored) {
      // A handler's failure must not unwind into cohort's threads.
    }
  }
}
