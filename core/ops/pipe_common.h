// What the point-to-point pipeline operators share across their files (defined in
// collective.cpp, beside pipe_send and pipe_recv): the common schema, the check of axis /
// reverse_axis / peer, and the kernel's communicator. Internal to core/ops.
#pragma once

#include "core/ops/schema.h"
#include "transport/coll/types.h"

namespace cohort {

namespace transport::coll {
class Communicator;
}

// Inserted by the pipeline (internal), started by the kernel and left in flight (collective), on
// the host only, bf16 taken as it is; attributes axis, reverse_axis, peer.
OpSchema pipe_schema(const char* name);
// Throws kInvalidArgument for an empty axis or reverse_axis, or a negative peer.
void check_pipe_attrs(const Attrs& a);
// The communicator of the node's 'axis', checked to take host buffers and to hold 'peer'.
transport::coll::Communicator& pipe_comm(const KernelContext& k, const char* op);
// The transport's name for an f32 or bf16 tensor's dtype; kUnsupported for any other.
transport::coll::DataType comm_type(const Tensor& t);

}  // namespace cohort
