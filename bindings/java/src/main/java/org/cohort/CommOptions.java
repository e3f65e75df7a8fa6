package org.cohort;

/** Options of {@link Comm#fromEnv(CommOptions)} ({@code cohort_comm_options}); 0 means 60 s. */
public final class CommOptions {
  private long timeoutMs;
  private long connectTimeoutMs;

  public CommOptions() {
    cohort_comm_options d = CohortC.cohort_comm_options_default();
    try {
      timeoutMs = d.getTimeout_ms();
      connectTimeoutMs = d.getConnect_timeout_ms();
    } finally {
      d.delete();
    }
  }

  /** A peer silent this long fails the operation. */
  public CommOptions timeoutMs(long value) {
    timeoutMs = value;
    return this;
  }

  /** Joining the rendezvous. */
  public CommOptions connectTimeoutMs(long value) {
    connectTimeoutMs = value;
    return this;
  }

  public long timeoutMs() {
    return timeoutMs;
  }

  public long connectTimeoutMs() {
    return connectTimeoutMs;
  }

  cohort_comm_options toNative() {
    cohort_comm_options o = CohortC.cohort_comm_options_default();
    o.setTimeout_ms(timeoutMs);
    o.setConnect_timeout_ms(connectTimeoutMs);
    return o;
  }
}
