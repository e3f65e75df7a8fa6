package org.cohort;

import java.nio.file.Path;

/**
 * Loads the binding's two JNI libraries, in the one order that keeps the JVM working:
 * {@code cohort_java_preload} first (it sets UCX's signal settings, see preload.c), then
 * {@code cohort_java} (the SWIG wrappers, which link libcohort and through it UCX).
 *
 * <p>The libraries are found in the directory named by the system property
 * {@code cohort.library.path} when it is set, else on {@code java.library.path}. The wrapper
 * library carries an rpath to libcohort, so only its own directory has to be given.
 */
final class NativeLibrary {
  private static boolean loaded;

  private NativeLibrary() {}

  static synchronized void load() {
    if (loaded) return;
    String dir = System.getProperty("cohort.library.path", "");
    if (dir.isEmpty()) {
      System.loadLibrary("cohort_java_preload");
      System.loadLibrary("cohort_java");
    } else {
      System.load(
          Path.of(dir, System.mapLibraryName("cohort_java_preload")).toAbsolutePath().toString());
      System.load(Path.of(dir, System.mapLibraryName("cohort_java")).toAbsolutePath().toString());
    }
    loaded = true;
    int signal = changedSignal();
    if (signal != 0) {
      // UCX was loaded before the preload library could configure it (by another library of this
      // process): its handlers now stand in for the JVM's, and a NullPointerException would kill
      // the process. Refuse to go on rather than crash later.
      throw new UnsatisfiedLinkError("cohort: the handler of signal " + signal
          + " changed while libcohort "
          + "loaded (was UCX loaded before org.cohort? set UCX_HANDLE_ERRORS=none, UCX_ERROR_SIGNALS= and "
          + "UCX_DEBUG_SIGNO=0 before starting the JVM)");
    }
    int library = CohortCJNI.cohort_abi_version();
    int header = CohortCJNI.cohortj_header_abi_version();
    if (library / 10000 != header / 10000) {
      throw new UnsatisfiedLinkError("cohort: libcohort has ABI version " + library
          + ", this binding was built for " + header + " (the major versions differ)");
    }
  }

  /**
   * The first of SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGHUP whose handler is no longer the one the
   * JVM had when the preload library loaded; 0 when every one is intact (preload.c).
   */
  static native int changedSignal();
}
