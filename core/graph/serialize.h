// Graph files: the forward part of an OP-DAG (values, nodes with their attributes, outputs, loss)
// as a size-prefixed FlatBuffer with file identifier "CHGF" (bytes 8..11) and a format version
// (schema: graph.fbs). Nodes of
// the backward pass are not stored: whoever trains runs autodiff again. Tensor data never lives
// here (parameters are described by their initializer; checkpoints hold the numbers).
//
// Loading trusts nothing: the length is checked, the FlatBuffers verifier runs, every field is
// range-checked, and the graph is rebuilt through Graph::add_input / add_parameter / add_op so
// that shape inference validates it again. A failed load returns nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/graph/graph.h"

namespace cohort {

// The format version written by this build; files with a larger version are rejected.
constexpr uint32_t kGraphFormatVersion = 1;

// Encodes the forward nodes of graph (backward == false) and the values they use. Outputs and a
// loss produced by the backward pass are left out. Forward values keep their order; their ids
// in the reloaded graph differ only if forward nodes were added after a backward pass. Throws kInvalidArgument when a forward node
// reads a value of the backward pass (such a graph cannot be rebuilt without autodiff).
std::vector<uint8_t> serialize_graph(const Graph& graph);

// Rebuilds a graph from bytes. `what` names the source in messages ("graph file 'x.cgraph'").
// Throws kCorrupt (bad length, failed verification, out-of-range fields, dangling or forward
// references, inconsistent outputs), kUnsupported (a newer format version), kNotFound (unknown
// operator) or kShapeMismatch (shape inference rejected a node); every message starts "<what>: ".
Graph deserialize_graph(const uint8_t* data, size_t size, const std::string& what);

// Writes atomically: a temporary file in the same directory is written, fsync'ed and renamed
// over path, so path holds either the old contents or the complete new file. Throws kIo naming
// the path, the failing call and strerror; kInvalidArgument as serialize_graph.
void save_graph(const Graph& graph, const std::string& path);

// Reads and rebuilds path. Throws kIo (open/read failed) or as deserialize_graph with
// what = "graph file '<path>'".
Graph load_graph(const std::string& path);

}  // namespace cohort
