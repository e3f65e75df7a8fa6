package org.cohort;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Objects;

/** Process-wide settings and facts of the loaded libcohort. */
public final class Cohort {
  private Cohort() {}

  /** "major.minor.patch" of the loaded libcohort. */
  public static String version() {
    return CohortC.cohort_version_string();
  }

  /** The ABI version of the loaded libcohort (major * 10000 + minor * 100 + patch). */
  public static int abiVersion() {
    return CohortC.cohort_abi_version();
  }

  /** The ABI version of the cohort.h this binding was built against. */
  public static int bindingAbiVersion() {
    return CohortC.cohortj_header_abi_version();
  }

  /** Drops log lines above {@code level} (0 error .. 3 debug). */
  public static void setLogLevel(int level) {
    CohortException.check(CohortC.cohort_set_log_level(level));
  }

  /**
   * Threads used by this process's CPU math (n >= 1). With several ranks on one machine give each
   * rank cores / ranks threads.
   */
  public static void setNumThreads(int n) {
    CohortException.check(CohortC.cohort_set_num_threads(n));
  }

  /**
   * Sends every log line to {@code handler} instead of stderr; null restores stderr. The handler
   * runs on cohort's threads (attached to the JVM as daemons) and must not call into cohort.
   */
  public static void setLogHandler(LogHandler handler) {
    LogBridge.set(handler);
  }

  /**
   * Whether this process can use a device ({@link #deviceUsable}): {@code reason} is "" when it
   * can, otherwise why not ("this build has no CUDA backend", the driver's message, ...).
   */
  public record Usability(boolean usable, String reason) {}

  /** Whether this process can use {@code device}, and why not. */
  public static Usability deviceUsable(Device device) {
    Objects.requireNonNull(device, "device");
    int[] usable = new int[1];
    byte[] reason = new byte[1024];
    CohortException.check(CohortC.cohort_device_usable(device.code, usable, reason));
    int end = 0;
    while (end < reason.length && reason[end] != 0) ++end;
    return new Usability(usable[0] != 0, new String(reason, 0, end, StandardCharsets.UTF_8));
  }

  /** Names of the public operators accepted by {@link Graph#addOp}. */
  public static List<String> ops() {
    long[] needed = new long[1];
    byte[] buf = new byte[4096];
    int status = CohortC.cohort_op_list(buf, needed);
    if (status != cohort_status.COHORT_OK && needed[0] > buf.length) {
      buf = new byte[(int) needed[0]];
      status = CohortC.cohort_op_list(buf, needed);
    }
    CohortException.check(status);
    String all = new String(buf, 0, (int) needed[0] - 1, StandardCharsets.UTF_8);
    return all.isEmpty() ? List.of() : Collections.unmodifiableList(Arrays.asList(all.split(",")));
  }

  /**
   * The inputs, outputs and attributes of the public operator {@code op} (one of {@link #ops}),
   * from cohort's operator registry. NOT_FOUND naming it for any other name.
   */
  public static OpInfo describeOp(String op) {
    cohort_op_info info = new cohort_op_info();
    try {
      CohortException.check(CohortC.cohort_op_describe(op, info));
      List<String> inputs = new ArrayList<>();
      for (int k = 0; k < info.getMax_inputs(); ++k) inputs.add(info.input_name(k));
      List<String> outputs = new ArrayList<>();
      for (int k = 0; k < Math.max(info.getNum_outputs(), 1); ++k) outputs.add(info.output_name(k));
      List<OpInfo.Attr> attrs = new ArrayList<>();
      for (int k = 0; k < info.getNum_attrs(); ++k) attrs.add(describeAttr(op, k));
      return new OpInfo(info.getName(), List.copyOf(inputs), info.getMin_inputs(),
          List.copyOf(outputs), info.getOutputs_attr(), List.copyOf(attrs));
    } finally {
      info.delete();
    }
  }

  private static OpInfo.Attr describeAttr(String op, int index) {
    cohort_op_attr_info a = new cohort_op_attr_info();
    try {
      CohortException.check(CohortC.cohort_op_describe_attr(op, index, a));
      OpInfo.AttrType type = OpInfo.AttrType.values()[a.getType()];
      boolean required = a.getRequired() != 0;
      Object value = null;
      if (!required) {
        switch (type) {
          case INT -> value = a.getDefault_int();
          case FLOAT -> value = a.getDefault_float();
          case STRING -> value = a.getDefault_string();
          case INTS -> {
            List<Long> list = new ArrayList<>();
            for (int k = 0; k < a.getDefault_count(); ++k) list.add(a.default_int_at(k));
            value = List.copyOf(list);
          }
          case FLOATS -> {
            List<Double> list = new ArrayList<>();
            for (int k = 0; k < a.getDefault_count(); ++k) list.add(a.default_float_at(k));
            value = List.copyOf(list);
          }
        }
      }
      return new OpInfo.Attr(a.getName(), type, required, value);
    } finally {
      a.delete();
    }
  }
}
