package org.cohort;

/**
 * Receives cohort's log lines (see {@link Cohort#setLogHandler}). It is called from any thread,
 * cohort's own included, and must not call into cohort; whatever it throws is dropped.
 */
@FunctionalInterface
public interface LogHandler {
  /**
   * @param level 0 error, 1 warning, 2 info, 3 debug
   * @param message the line with its rank prefix, without a trailing newline
   */
  void log(int level, String message);
}
