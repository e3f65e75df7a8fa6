// Reverse-mode automatic differentiation that writes the backward pass into the same graph, so
// communication nodes inserted later by parallel plans are differentiated like any operator.
#pragma once

#include <unordered_map>
#include <vector>

#include "core/graph/graph.h"

namespace cohort {

// Appends the nodes that compute d(loss)/d(v) for every v in wrt (parameters or inputs) and
// returns, for each, the id of its gradient value (same shape and dtype as v), or -1 when the
// loss does not depend on it. Throws kUnsupported naming the operator if a needed backward
// rule is missing.
std::vector<ValueId> build_backward(Graph& graph, ValueId loss, const std::vector<ValueId>& wrt);

}  // namespace cohort
