/**
 * cohort from Java: the C API of {@code cohort.h} as AutoCloseable handles.
 *
 * <ul>
 *   <li><b>Handles</b> ({@link org.cohort.Graph}, {@link org.cohort.Trainer}, {@link
 * org.cohort.Comm},
 *       ...) own one C object each; close them (try-with-resources). A closed handle used again
 *       throws INVALID_HANDLE; it never touches freed memory.
 *   <li><b>Errors</b>: every failure is a {@link org.cohort.CohortException} with the C status and
 *       the C library's message.
 *   <li><b>Memory</b>: {@link org.cohort.Tensor} names caller memory for steps, evaluation,
 *       parameters and batches — direct buffers zero-copy, Java arrays copied. Collectives take
 *       direct buffers, kept reachable by their {@link org.cohort.Work} until it is closed.
 *   <li><b>Threads</b>: as in C, distinct handles may be used from distinct threads, one handle
 *       from one thread at a time.
 *   <li><b>Native libraries</b>: {@code libcohort_java_preload.so} and {@code libcohort_java.so},
 *       found in the directory named by the system property {@code cohort.library.path} or on
 *       {@code java.library.path}. The preload library keeps UCX from replacing the JVM's signal
 *       handlers, so the order is fixed (see NativeLibrary).
 * </ul>
 */
package org.cohort;
