// Communication as operators of the OP-DAG (DESIGN.md, step 3): a parallel plan inserts them
// into a rank's graph like any node, autodiff differentiates through them, and the executor runs
// them asynchronously (a collective's kernel starts it and returns; the first node reading its
// result waits). Each names a grid axis ('axis' attribute: "x", "y", "z", ...) whose communicator
// the run supplies in a CommAxes.
//
//   copy_to_axis(x)        forward: the identity (a view).       backward: all_reduce of dy.
//   all_reduce(x)          forward: sum over the axis.           backward: dy unchanged.
//   all_gather(x; dim)     forward: the ranks' blocks concatenated along dim, in rank order.
//                                                                 backward: reduce_scatter of dy.
//   reduce_scatter(x; dim) forward: the sum over the axis, cut along dim; rank r keeps block r.
//                                                                 backward: all_gather of dy.
//   gather_from_axis(x; dim) forward: all_gather's.               backward: this rank's block of dy.
//   split_to_axis(x; dim)  forward: this rank's block along dim.  backward: gather_from_axis of dy.
//   all_to_all(x; split_dim, concat_dim)  forward: block q along split_dim to rank q, the blocks
//                          received laid along concat_dim in rank order (each dim in 'groups'
//                          groups, as ShardCut cuts them).  backward: all_to_all back.
//   pipe_send(x; peer)     forward: x to rank 'peer' of the axis; a scalar zero token out.
//                                                                 backward: pipe_recv over reverse_axis.
//   pipe_recv(; peer, shape, dtype)  forward: a tensor from rank 'peer'.  backward: pipe_send of dy
//                          over reverse_axis (pipeline stages, core/parallel/pipeline.h).
//   pipe_send_topk(x; peer, keep)  forward: the k = max(1, ceil(keep numel(x))) entries of largest
//                          |x| to 'peer' as one message (pipe_topk.h: indices, then values);
//                          outputs a scalar zero token, idx (i32 [k], the flat indices, ascending)
//                          and the packed message.     backward: pipe_recv_at(idx) over reverse_axis.
//   pipe_recv_topk(; peer, keep, shape, dtype)  forward: y, zeros but for the k entries received,
//                          idx (i32 [k]) and the message.  backward: pipe_send_at(dy, idx) over
//                          reverse_axis.
//   pipe_send_at(g, idx; peer)  forward: the k values g[idx] (no indices: the peer holds them) to
//                          'peer'; outputs a token and the gathered values. backward: pipe_recv_at.
//   pipe_recv_at(idx; peer, shape, dtype)  forward: k values from 'peer' scattered into zeros of
//                          'shape' at idx.                backward: pipe_send_at(dy, idx).
// The top-k pair is the compression step of FusionLLM's AdaTopK (Tang et al. 2024), which picks
// the ratio per slow link; here 'keep' is given. y = topk(x) with the selection fixed has the
// gradient dy restricted to the kept positions, so the way back carries k values and no indices,
// and the gradient is exact for the compressed forward (no error feedback). The 'message'
// outputs are the packed buffers on the wire: a node's outputs live while its operation is in
// flight (and with the send when a run leaves it unfinished); nothing needs to read them.
// all_gather and reduce_scatter carry the axis size as 'parts' (shape rules run before any
// communicator exists); the kernel checks it against the communicator.
//
// The one thing to know — which gradient each rule assumes (Megatron-LM's f and g, Shoeybi et
// al. 2019, section 3): every rank of an axis computes the same loss, and a value every rank
// holds alike and uses alike (replicated) has the same, complete gradient on every rank. So
// all_reduce, whose sum is used alike, passes its gradient through; copy_to_axis marks where
// replicated data enters per-rank computation (a column-parallel linear layer), so the ranks'
// gradients there are partial and are summed. all_gather's result is assumed to feed per-rank
// computation (partial gradients: summed, then cut); reduce_scatter's blocks are each rank's own.
// gather_from_axis and split_to_axis are the pair for replicated data instead: a gathered whole
// used alike by every rank has its complete gradient on each (so each keeps its block), and a
// replicated value split into per-rank blocks has each block's gradient on one rank (gathered).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/ops/pipe_topk.h"
#include "core/ops/schema.h"

namespace cohort {

namespace transport::coll {
class Communicator;
}

// The attributes of an all_to_all node (above).
Attrs all_to_all_attrs(const std::string& axis, int64_t parts, int64_t split_dim, int64_t split_groups,
                       int64_t concat_dim, int64_t concat_groups);

// The attributes of a pipe_send / pipe_recv node (above); pipe_recv also takes 'shape' and 'dtype'.
Attrs pipe_attrs(const std::string& axis, const std::string& reverse_axis, int64_t peer);
// The attributes of a pipe_send_topk / pipe_recv_topk node (above): pipe_attrs' and 'keep', the
// fraction of entries sent, in (0, 1]; pipe_recv_topk also takes 'shape' and 'dtype'.
Attrs pipe_topk_attrs(const std::string& axis, const std::string& reverse_axis, int64_t peer, double keep);

// The communicators of a run's grid axes, by name: "x", "y", "z" (tensor axes), "pipe" and
// "pipe_grad" (pipeline stages), "model" (every rank of one data-parallel replica: its stages
// and tensor ranks), "data", "tied.<parameter>" (the stages holding a tied parameter). Holding
// it keeps them alive.
class CommAxes {
 public:
  void set(const std::string& axis, std::shared_ptr<transport::coll::Communicator> comm);
  // nullptr when the axis is absent.
  transport::coll::Communicator* find(const std::string& axis) const;
  // Throws kInvalidState "<where>: no communicator for grid axis '<axis>' ..." when absent.
  transport::coll::Communicator& at(const std::string& axis, const std::string& where) const;
  // This rank's coordinate on `axis` (its rank in the axis communicator); 0 when absent.
  int coordinate(const std::string& axis) const;
  int size(const std::string& axis) const;  // 1 when absent
  bool empty() const { return axes_.empty(); }

 private:
  std::map<std::string, std::shared_ptr<transport::coll::Communicator>> axes_;
};

}  // namespace cohort
