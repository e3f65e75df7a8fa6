// oneDNN convolution on plain NCHW / (G)OIHW buffers. Each primitive is created with its layouts
// left to oneDNN (format `any`), which picks its direct convolution on blocked layouts (nChw8c
// on AVX2), and the plain buffers are reordered into and out of those around the call: on plain
// layouts oneDNN runs its gemm-based convolution instead, which on the CNN's shapes (N 32, 16-64
// channels, 28 x 28 to 7 x 7, 1 thread, AMD EPYC AVX2) took 1.5-1.9x as long as blocked + both
// reorders. Its primitive cache makes the per-call primitive construction cheap next to a
// convolution's work.
//
// Threads split the batch: each of T threads runs the primitive on its own N / T samples (oneDNN
// runs a primitive single-threaded inside our parallel region, made for 1 thread there), and the
// weight gradient sums the threads' partial gradients. oneDNN's own threading of one call over the
// CNN's batch of 32 (28 x 28 to 7 x 7 planes, 16-64 channels) gained 1.54-1.58x from a second
// core on a 2-core Intel Xeon, the split 2.05-2.09x (COHORT_PROFILE, 120 steps), the reorders into
// and out of the blocked layouts included.
#include "kernels/cpu/conv.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/threads.h"

namespace cohort::kernels::cpu {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// src, weights and dst as our buffers hold them (plain) and as a primitive may choose them (any).
struct ConvDescs {
  memory::desc src, weights, bias, dst;
  memory::desc any_src, any_weights, any_dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

ConvDescs describe(const Conv2dGeometry& g, bool with_bias) {
  ConvDescs d;
  const memory::dims src = {g.N, g.C, g.H, g.W}, dst = {g.N, g.O, g.OH, g.OW};
  d.src = memory::desc(src, dt::f32, tag::nchw);
  d.dst = memory::desc(dst, dt::f32, tag::nchw);
  memory::dims weights;
  if (g.groups == 1) {
    weights = {g.O, g.C, g.KH, g.KW};
    d.weights = memory::desc(weights, dt::f32, tag::oihw);
  } else {  // [O, C/G, KH, KW] is goihw's memory order with O split as [G, O/G]
    weights = {g.groups, g.O / g.groups, g.C / g.groups, g.KH, g.KW};
    d.weights = memory::desc(weights, dt::f32, tag::goihw);
  }
  d.any_src = memory::desc(src, dt::f32, tag::any);
  d.any_dst = memory::desc(dst, dt::f32, tag::any);
  d.any_weights = memory::desc(weights, dt::f32, tag::any);
  if (with_bias) d.bias = memory::desc({g.O}, dt::f32, tag::x);
  d.strides = {g.stride[0], g.stride[1]};
  d.dilates = {g.dilation[0] - 1, g.dilation[1] - 1};  // oneDNN counts the gaps
  d.pad_l = {g.pad[0], g.pad[1]};
  d.pad_r = {g.pad[0], g.pad[1]};
  return d;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvDescs& d, bool with_bias) {
  auto& eng = dnnl_engine();
  if (with_bias)
    return {{dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, d.any_src, d.any_weights,
             d.bias, d.any_dst, d.strides, d.dilates, d.pad_l, d.pad_r},
            eng};
  return {{dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, d.any_src, d.any_weights,
           d.any_dst, d.strides, d.dilates, d.pad_l, d.pad_r},
          eng};
}

memory wrap(const memory::desc& md, const void* p) { return memory(md, dnnl_engine(), const_cast<void*>(p)); }

// Our plain input buffer p in the layout `want`: wrapped as it is when the layouts agree, else
// reordered into a buffer of its own.
memory input(const memory::desc& want, const memory::desc& plain, const void* p) {
  memory m = wrap(plain, p);
  if (want == plain) return m;
  memory w(want, dnnl_engine());
  dnnl::reorder(m, w).execute(dnnl_stream(), m, w);
  return w;
}

// The buffer a primitive writes its output to in the layout `want`: our plain buffer p itself,
// or one of its own that finish() reorders into p.
struct Output {
  memory plain, wanted;
  Output(const memory::desc& want, const memory::desc& plain_desc, void* p)
      : plain(wrap(plain_desc, p)), wanted(want == plain_desc ? plain : memory(want, dnnl_engine())) {}
  void finish() {
    if (wanted.get() != plain.get()) dnnl::reorder(wanted, plain).execute(dnnl_stream(), wanted, plain);
  }
};

void forward_one(const Conv2dGeometry& g, const float* x, const float* weight, const float* bias, float* y) {
  dnnl_call("convolution forward", [&] {
    ConvDescs d = describe(g, bias != nullptr);
    auto pd = forward_pd(d, bias != nullptr);
    Output out(pd.dst_desc(), d.dst, y);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, input(pd.src_desc(), d.src, x)},
                                            {DNNL_ARG_WEIGHTS, input(pd.weights_desc(), d.weights, weight)},
                                            {DNNL_ARG_DST, out.wanted}};
    if (bias) args[DNNL_ARG_BIAS] = wrap(d.bias, bias);
    dnnl::convolution_forward(pd).execute(dnnl_stream(), args);
    out.finish();
    dnnl_stream().wait();
  });
}

void backward_data_one(const Conv2dGeometry& g, const float* dy, const float* weight, float* dx) {
  dnnl_call("convolution backward data", [&] {
    ConvDescs d = describe(g, false);
    auto hint = forward_pd(d, false);
    dnnl::convolution_backward_data::primitive_desc pd({dnnl::algorithm::convolution_direct, d.any_src,
                                                        d.any_weights, d.any_dst, d.strides, d.dilates, d.pad_l,
                                                        d.pad_r},
                                                       dnnl_engine(), hint);
    Output out(pd.diff_src_desc(), d.src, dx);
    dnnl::convolution_backward_data(pd).execute(dnnl_stream(),
                                                {{DNNL_ARG_DIFF_DST, input(pd.diff_dst_desc(), d.dst, dy)},
                                                 {DNNL_ARG_WEIGHTS, input(pd.weights_desc(), d.weights, weight)},
                                                 {DNNL_ARG_DIFF_SRC, out.wanted}});
    out.finish();
    dnnl_stream().wait();
  });
}

void backward_weights_one(const Conv2dGeometry& g, const float* x, const float* dy, float* dweight) {
  dnnl_call("convolution backward weights", [&] {
    ConvDescs d = describe(g, false);
    auto hint = forward_pd(d, false);
    dnnl::convolution_backward_weights::primitive_desc pd({dnnl::algorithm::convolution_direct, d.any_src,
                                                           d.any_weights, d.any_dst, d.strides, d.dilates,
                                                           d.pad_l, d.pad_r},
                                                          dnnl_engine(), hint);
    Output out(pd.diff_weights_desc(), d.weights, dweight);
    dnnl::convolution_backward_weights(pd).execute(dnnl_stream(),
                                                   {{DNNL_ARG_SRC, input(pd.src_desc(), d.src, x)},
                                                    {DNNL_ARG_DIFF_DST, input(pd.diff_dst_desc(), d.dst, dy)},
                                                    {DNNL_ARG_DIFF_WEIGHTS, out.wanted}});
    out.finish();
    dnnl_stream().wait();
  });
}

// Threads for a batch of g.N: the OpenMP threads a call may use (loop_threads), at most one sample
// each.
int batch_threads(const Conv2dGeometry& g) { return static_cast<int>(std::min<int64_t>(loop_threads(), g.N)); }

// Runs chunk(c, first, count) for c in [0, T), samples [first, first + count) each, on up to T
// threads (a team the runtime makes smaller runs several chunks a thread: the same chunks, the same
// results); an exception in any chunk is rethrown (the first, by chunk) after all have finished.
template <typename F>
void over_batch(const Conv2dGeometry& g, int T, F&& chunk) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(T));
#pragma omp parallel num_threads(T)
  {
    // oneDNN sizes a primitive's work split by omp_get_max_threads() when it is made, and some
    // kernels (the weight gradient's reduction) wait at barriers for that many threads: inside
    // this region it must read 1, the threads it will get.
    omp_set_num_threads(1);
    for (int c = omp_get_thread_num(); c < T; c += omp_get_num_threads()) {
      const int64_t first = g.N * c / T, last = g.N * (c + 1) / T;
      try {
        chunk(c, first, last - first);
      } catch (...) {
        errors[static_cast<size_t>(c)] = std::current_exception();
      }
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

Conv2dGeometry with_batch(Conv2dGeometry g, int64_t n) {
  g.N = n;
  return g;
}

}  // namespace

void conv2d_forward(const Conv2dGeometry& g, const float* x, const float* weight, const float* bias, float* y) {
  const int T = batch_threads(g);
  if (T <= 1) return forward_one(g, x, weight, bias, y);
  over_batch(g, T, [&](int, int64_t first, int64_t count) {
    forward_one(with_batch(g, count), x + first * g.C * g.H * g.W, weight, bias, y + first * g.O * g.OH * g.OW);
  });
}

void conv2d_backward_data(const Conv2dGeometry& g, const float* dy, const float* weight, float* dx) {
  const int T = batch_threads(g);
  if (T <= 1) return backward_data_one(g, dy, weight, dx);
  over_batch(g, T, [&](int, int64_t first, int64_t count) {
    backward_data_one(with_batch(g, count), dy + first * g.O * g.OH * g.OW, weight, dx + first * g.C * g.H * g.W);
  });
}

void conv2d_backward_weights(const Conv2dGeometry& g, const float* x, const float* dy, float* dweight) {
  const int T = batch_threads(g);
  if (T <= 1) return backward_weights_one(g, x, dy, dweight);
  // Chunk 0 writes dweight, the others a partial each, added to it in chunk order (the same sum
  // for the same thread count).
  const int64_t size = g.O * (g.C / g.groups) * g.KH * g.KW;
  std::vector<float> partial(static_cast<size_t>(size * (T - 1)));
  over_batch(g, T, [&](int c, int64_t first, int64_t count) {
    float* out = c == 0 ? dweight : partial.data() + (c - 1) * size;
    backward_weights_one(with_batch(g, count), x + first * g.C * g.H * g.W, dy + first * g.O * g.OH * g.OW, out);
  });
  for (int t = 1; t < T; ++t) {
    const float* p = partial.data() + (t - 1) * size;
    for (int64_t i = 0; i < size; ++i) dweight[i] += p[i];
  }
}

void conv2d_bias_grad(const float* dy, int64_t N, int64_t O, int64_t plane, float* db) {
  parallel_for(O, O * N * plane > 32768, [&](int64_t o) {
    double s = 0;  // planes can be long; a double keeps the sum order-insensitive enough
    for (int64_t n = 0; n < N; ++n) {
      const float* p = dy + (n * O + o) * plane;
      float part = 0;
      for (int64_t i = 0; i < plane; ++i) part += p[i];
      s += part;
    }
    db[o] = static_cast<float>(s);
  });
}

}  // namespace cohort::kernels::cpu
