package org.cohort;

import java.util.List;

/**
 * What {@link Graph#addOp} accepts for one public operator, read from cohort's operator registry
 * ({@link Cohort#describeOp}).
 *
 * @param name the operator
 * @param inputs the input names in order; the first {@code minInputs} must be given, the rest
 *     may be left out (a bias, concat's parts after the second)
 * @param outputs the output names: output 0 is the result, later ones hold what the backward pass
 *     needs; with {@code outputsFrom} one name that every output shares
 * @param outputsFrom null, or the list attribute with one output per entry (split's "sizes")
 * @param attrs the attributes
 */
public record OpInfo(String name, List<String> inputs, int minInputs, List<String> outputs,
    String outputsFrom, List<OpInfo.Attr> attrs) {
  /** What an attribute holds: the {@link Attrs} setter that gives it. */
  public enum AttrType {
    /** {@code setInt} */
    INT,
    /** {@code setFloat} (an int is accepted too) */
    FLOAT,
    /** {@code setString} */
    STRING,
    /** {@code setInts} */
    INTS,
    /** {@code setFloats} (a list of ints is accepted too) */
    FLOATS
  }

  /**
   * One attribute.
   *
   * @param required whether addOp fails without it
   * @param defaultValue the value used when it is not given: a Long, Double, String,
   *     {@code List<Long>} or {@code List<Double>} by type; null when required
   */
  public record Attr(String name, AttrType type, boolean required, Object defaultValue) {}
}
