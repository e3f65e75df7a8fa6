/*
 * preload.c — libcohort_java_preload, the first native library the Java binding loads.
 *
 * libcohort links UCX, and libucs installs its own handlers for SIGSEGV, SIGBUS, SIGILL and
 * SIGFPE (UCX_HANDLE_ERRORS, UCX_ERROR_SIGNALS) and for SIGHUP (UCX_DEBUG_SIGNO) in its load
 * constructor. Inside a JVM that is fatal: HotSpot turns SIGSEGV from compiled code into
 * NullPointerException and stack-overflow checks, and SIGHUP into an orderly shutdown. UCX reads
 * its settings from the environment when libucs is loaded, so this library — which does not
 * link libcohort — sets them in JNI_OnLoad, before org.cohort loads the library that does.
 * It also records the JVM's handlers at that moment so the binding (and its tests) can check
 * that nothing replaced them afterwards.
 */
#define _POSIX_C_SOURCE 200809L
#include <jni.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* The signals the JVM relies on and UCX would take. */
static const int kWatched[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGHUP};
#define NUM_WATCHED ((int)(sizeof kWatched / sizeof kWatched[0]))

static struct sigaction g_before[NUM_WATCHED];
static int g_recorded;

/* Replaces any value the user had: a JVM never survives UCX's handlers. */
static void force_ucx_settings(void) {
  setenv("UCX_HANDLE_ERRORS", "none", 1);
  setenv("UCX_ERROR_SIGNALS", "", 1);
  setenv("UCX_DEBUG_SIGNO", "0", 1);
}

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM* vm, void* reserved) {
  (void)vm;
  (void)reserved;
  force_ucx_settings();
  for (int i = 0; i < NUM_WATCHED; ++i) sigaction(kWatched[i], NULL, &g_before[i]);
  g_recorded = 1;
  return JNI_VERSION_1_8;
}

static int same_handler(const struct sigaction* a, const struct sigaction* b) {
  if ((a->sa_flags & SA_SIGINFO) != (b->sa_flags & SA_SIGINFO)) return 0;
  if (a->sa_flags & SA_SIGINFO) return a->sa_sigaction == b->sa_sigaction;
  return a->sa_handler == b->sa_handler;
}

/* org.cohort.NativeLibrary.changedSignal(): the first watched signal whose handler is no longer
 * the one the JVM had when this library loaded, or 0 when all are intact. */
JNIEXPORT jint JNICALL Java_org_cohort_NativeLibrary_changedSignal(JNIEnv* env, jclass cls) {
  (void)env;
  (void)cls;
  if (!g_recorded) return -1;
  for (int i = 0; i < NUM_WATCHED; ++i) {
    struct sigaction now;
    memset(&now, 0, sizeof now);
    sigaction(kWatched[i], NULL, &now);
    if (!same_handler(&now, &g_before[i])) return kWatched[i];
  }
  return 0;
}
