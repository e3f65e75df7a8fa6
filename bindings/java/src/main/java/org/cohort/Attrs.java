package org.cohort;

/**
 * Named, typed attributes for one operator ({@code cohort_attrs}). Reusable:
 * {@link Graph#addOp} copies them. The setters return this for chaining.
 */
public final class Attrs extends Handle {
  public Attrs() {
    super(create(CohortC::cohort_attrs_create));
  }

  @Override
  int destroy(long ptr) {
    return CohortC.cohort_attrs_destroy(ptr);
  }

  public Attrs setInt(String name, long value) {
    CohortException.check(CohortC.cohort_attrs_set_int(ptr(), name, value));
    return this;
  }

  public Attrs setFloat(String name, double value) {
    CohortException.check(CohortC.cohort_attrs_set_float(ptr(), name, value));
    return this;
  }

  public Attrs setString(String name, String value) {
    CohortException.check(CohortC.cohort_attrs_set_string(ptr(), name, value));
    return this;
  }

  public Attrs setInts(String name, long... values) {
    CohortException.check(CohortC.cohort_attrs_set_ints(ptr(), name, values));
    return this;
  }

  public Attrs setFloats(String name, double... values) {
    CohortException.check(CohortC.cohort_attrs_set_floats(ptr(), name, values));
    return this;
  }
}
