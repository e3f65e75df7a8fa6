// oneDNN engine and per-thread stream.
#include "kernels/cpu/dnnl_util.h"

namespace cohort::kernels::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

}  // namespace cohort::kernels::cpu
