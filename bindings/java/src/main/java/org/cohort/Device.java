package org.cohort;

/**
 * Where a trainer keeps its parameters, gradients and optimizer state and runs its steps
 * ({@code cohort_device}); see {@link TrainerOptions#device} and {@link Cohort#deviceUsable}.
 */
public enum Device {
  CPU(cohort_device.COHORT_DEVICE_CPU),
  /** The current CUDA device, in builds with the CUDA backend. */
  CUDA(cohort_device.COHORT_DEVICE_CUDA);

  final int code;

  Device(int code) {
    this.code = code;
  }

  static Device of(int code) {
    for (Device d : values()) {
      if (d.code == code) return d;
    }
    throw new CohortException(Status.INTERNAL, "cohort: unknown device " + code);
  }
}
