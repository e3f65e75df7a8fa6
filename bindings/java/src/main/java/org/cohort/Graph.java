package org.cohort;

/**
 * A model under construction ({@code cohort_graph}): inputs, parameters, operators and the values
 * between them, identified by the int ids the add methods return and by their unique names. Shapes
 * and dtypes are checked as each node is added; a failed add leaves the graph unchanged. A
 * {@link Trainer} copies the graph, so it may be closed once trainers are made.
 */
public final class Graph extends Handle {
  /** The most outputs one operator has; {@link #addOpOutputs} returns all of them. */
  private static final int MAX_OUTPUTS = 16;

  /** An empty graph. */
  public Graph() {
    super(create(CohortC::cohort_graph_create));
  }

  private Graph(long ptr) {
    super(ptr);
  }

  @Override
  int destroy(long ptr) {
    return CohortC.cohort_graph_destroy(ptr);
  }

  /** Reads a graph file written by {@link #save}; CORRUPT for a damaged one. */
  public static Graph load(String path) {
    return new Graph(create(out -> CohortC.cohort_graph_load(path, out)));
  }

  /** The built-in MLP. */
  public static Graph mlp(MlpOptions options) {
    return new Graph(options.build());
  }

  /** The built-in small ResNet. */
  public static Graph cnn(CnnOptions options) {
    return new Graph(options.build());
  }

  /** The built-in GPT-2 style decoder. */
  public static Graph gpt(GptOptions options) {
    return new Graph(options.build());
  }

  /**
   * A value fed by the caller at every step. Rank 0..8, extents >= 1; dimension 0 is the batch
   * (evaluation may feed another batch size).
   */
  public int addInput(String name, DType dtype, long... shape) {
    int[] id = new int[1];
    CohortException.check(CohortC.cohort_graph_add_input(ptr(), name, dtype.code(), shape, id));
    return id[0];
  }

  /** A trainable tensor (f32 or bf16) and how it is initialised. */
  public int addParameter(String name, DType dtype, Initializer init, long... shape) {
    int[] id = new int[1];
    cohort_initializer n = init.toNative();
    try {
      CohortException.check(
          CohortC.cohort_graph_add_parameter(ptr(), name, dtype.code(), shape, n, id));
    } finally {
      n.delete();
    }
    return id[0];
  }

  /**
   * Adds operator {@code op} (see {@link Cohort#ops}) named {@code name} (null picks
   * "&lt;op&gt;_&lt;n&gt;") reading {@code inputs}; returns its result, output 0.
   */
  public int addOp(String op, String name, int... inputs) {
    return addOpOutputs(op, name, null, inputs)[0];
  }

  /** Like {@link #addOp(String, String, int...)} with attributes (null for none). */
  public int addOp(String op, String name, Attrs attrs, int... inputs) {
    return addOpOutputs(op, name, attrs, inputs)[0];
  }

  /**
   * Adds an operator and returns the ids of all its outputs: output 0 is the result, named
   * {@code name}; output k > 0 ("name:k") holds what the backward pass needs.
   */
  public int[] addOpOutputs(String op, String name, Attrs attrs, int... inputs) {
    long a = optional(attrs, "cohort_graph_add_op", "attrs");
    int[] outputs = new int[MAX_OUTPUTS];
    int[] count = new int[1];
    CohortException.check(CohortC.cohort_graph_add_op(ptr(), op, name, inputs, a, outputs, count));
    return java.util.Arrays.copyOf(outputs, Math.min(count[0], MAX_OUTPUTS));
  }

  /** Marks a value as a model output (evaluated by {@link Trainer#evaluate}). */
  public void markOutput(int value) {
    CohortException.check(CohortC.cohort_graph_mark_output(ptr(), value));
  }

  /** Sets the training loss: a float scalar value. */
  public void setLoss(int value) {
    CohortException.check(CohortC.cohort_graph_set_loss(ptr(), value));
  }

  /** The id of the value called {@code name}; NOT_FOUND if none. */
  public int find(String name) {
    int[] id = new int[1];
    CohortException.check(CohortC.cohort_graph_find(ptr(), name, id));
    return id[0];
  }

  /** The shape of a value. */
  public long[] shape(int value) {
    long[] shape = new long[8];
    int[] rank = new int[1];
    int[] dtype = new int[1];
    CohortException.check(CohortC.cohort_graph_value_shape(ptr(), value, shape, rank, dtype));
    return java.util.Arrays.copyOf(shape, rank[0]);
  }

  /** The element type of a value. */
  public DType dtype(int value) {
    int[] rank = new int[1];
    int[] dtype = new int[1];
    CohortException.check(CohortC.cohort_graph_value_shape(ptr(), value, null, rank, dtype));
    return DType.of(dtype[0]);
  }

  /** Counts of values, nodes, parameters and parameter elements. */
  public GraphStats stats() {
    int[] values = new int[1];
    int[] nodes = new int[1];
    int[] parameters = new int[1];
    long[] elements = new long[1];
    CohortException.check(CohortC.cohort_graph_stats(ptr(), values, nodes, parameters, elements));
    return new GraphStats(values[0], nodes[0], parameters[0], elements[0]);
  }

  /**
   * Writes the graph (structure, attributes, initializers; not trained values) to {@code path}
   * atomically.
   */
  public void save(String path) {
    CohortException.check(CohortC.cohort_graph_save(ptr(), path));
  }
}
