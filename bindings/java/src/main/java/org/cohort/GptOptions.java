package org.cohort;

/**
 * Options of the built-in GPT-2 style decoder ({@code cohort_model_gpt_options};
 * {@link Graph#gpt}). Inputs "tokens" and "targets" i32 [batch, context]; output "logits"
 * [batch, context, vocab]. Starts at C's defaults: batch 8, context 128, vocab 256, 4 layers,
 * width 256, 4 heads, tied weights, no dropout, eps 1e-5.
 */
public final class GptOptions {
  private long batch;
  private long context;
  private long vocab;
  private long layers;
  private long width;
  private long heads;
  private boolean tieWeights;
  private double dropout;
  private double eps;

  public GptOptions() {
    cohort_model_gpt_options d = CohortC.cohort_model_gpt_options_default();
    try {
      batch = d.getBatch();
      context = d.getContext();
      vocab = d.getVocab();
      layers = d.getLayers();
      width = d.getWidth();
      heads = d.getHeads();
      tieWeights = d.getTie_weights() != 0;
      dropout = d.getDropout();
      eps = d.getEps();
    } finally {
      d.delete();
    }
  }

  public GptOptions batch(long value) {
    batch = value;
    return this;
  }

  /** T, the tokens per sequence. */
  public GptOptions context(long value) {
    context = value;
    return this;
  }

  /** V, the vocabulary size. */
  public GptOptions vocab(long value) {
    vocab = value;
    return this;
  }

  /** L, the number of blocks. */
  public GptOptions layers(long value) {
    layers = value;
    return this;
  }

  /** C, the model width. */
  public GptOptions width(long value) {
    width = value;
    return this;
  }

  /** Attention heads; must divide the width. */
  public GptOptions heads(long value) {
    heads = value;
    return this;
  }

  /** Whether logits = ln_f(x) wte^T (no separate lm_head). */
  public GptOptions tieWeights(boolean value) {
    tieWeights = value;
    return this;
  }

  /** In [0, 1); 0 adds no dropout node. */
  public GptOptions dropout(double value) {
    dropout = value;
    return this;
  }

  public GptOptions eps(double value) {
    eps = value;
    return this;
  }

  public long batch() {
    return batch;
  }

  public long context() {
    return context;
  }

  public long vocab() {
    return vocab;
  }

  public long layers() {
    return layers;
  }

  public long width() {
    return width;
  }

  public long heads() {
    return heads;
  }

  public boolean tieWeights() {
    return tieWeights;
  }

  public double dropout() {
    return dropout;
  }

  public double eps() {
    return eps;
  }

  long build() {
    cohort_model_gpt_options o = CohortC.cohort_model_gpt_options_default();
    try {
      o.setBatch(batch);
      o.setContext(context);
      o.setVocab(vocab);
      o.setLayers(layers);
      o.setWidth(width);
      o.setHeads(heads);
      o.setTie_weights(tieWeights ? 1 : 0);
      o.setDropout(dropout);
      o.setEps(eps);
      return Handle.create(out -> CohortC.cohort_graph_create_gpt(o, out));
    } finally {
      o.delete();
    }
  }
}
