// Graph files: the forward part of an OP-DAG (values, nodes with their attributes, outputs, loss)
// as a size-prefixed FlatBuffer with file identifier "CHGF" (bytes 8..11) and a format version
// (schema: graph.fbs), followed by a 4-byte trailer: the CRC32C (core/base/checksum.h,
// little-endian) of every byte before it. Nodes of the backward pass are not stored: whoever
// trains runs autodiff again. Tensor data never lives here (parameters are described by their
// initializer; checkpoints hold the numbers).
//
// Loading trusts nothing: the length is checked, then the checksum — so a changed byte is refused
// before anything is parsed, even one that would still decode as a different, valid model (a
// renamed parameter, another ignore_index) — then the FlatBuffers verifier runs, every field is
// range-checked, and the graph is rebuilt through Graph::add_input / add_parameter / add_op so
// that shape inference validates it again. A failed load returns nothing. Files written before
// the trailer existed (same format version, 4 bytes shorter) cannot be verified and are refused
// with kCorrupt saying so: save the graph again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/graph/graph.h"

namespace cohort {

// The format version written by this build; files with a larger version are rejected.
constexpr uint32_t kGraphFormatVersion = 1;
// Bytes of the checksum trailer after the FlatBuffer.
constexpr size_t kGraphChecksumBytes = 4;

// The FlatBuffer alone (no trailer): what checkpoints hash to recognise their model, unchanged by
// the trailer so that checkpoints written before it still match. Throws as serialize_graph.
std::vector<uint8_t> encode_graph(const Graph& graph);

// Appends the checksum trailer to encoded bytes (encode_graph's, or a hand-made FlatBuffer).
void append_graph_checksum(std::vector<uint8_t>& bytes);

// The bytes of a graph file: encode_graph plus the checksum trailer. Encodes the forward nodes of graph (backward == false) and the values they use. Outputs and a
// loss produced by the backward pass are left out. Forward values keep their order; their ids
// in the reloaded graph differ only if forward nodes were added after a backward pass. Throws kInvalidArgument when a forward node
// reads a value of the backward pass (such a graph cannot be rebuilt without autodiff).
std::vector<uint8_t> serialize_graph(const Graph& graph);

// Rebuilds a graph from the bytes of a graph file (serialize_graph's). `what` names the source in
// messages ("graph file 'x.cgraph'"). Throws kCorrupt (bad length, no or a wrong checksum, failed
// verification, out-of-range fields, dangling or forward
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
