package org.cohort;

/** Counts of a graph ({@code cohort_graph_stats}). */
public record GraphStats(int values, int nodes, int parameters, long parameterElements) {}
