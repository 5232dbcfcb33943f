// core/dnnl_context.cpp
#include "core/dnnl_context.h"

#include "core/kernels.h"

namespace heed::kernel::detail {

namespace {
struct Context {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
};
Context& ctx() {
  // HEED_CPU_ISA caps oneDNN before it creates anything (core/cpu_isa.cpp).
  apply_isa_settings();
  static Context c;
  return c;
}
}  // namespace

dnnl::engine& dnnl_engine() { return ctx().eng; }

dnnl::memory dnnl_mem(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, ctx().eng, t.raw_data());
}

void dnnl_run(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args) {
  p.execute(ctx().stream, args);
  ctx().stream.wait();
}

void dnnl_run_here(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args) {
  thread_local dnnl::stream stream{ctx().eng};
  p.execute(stream, args);
  stream.wait();
}

}  // namespace heed::kernel::detail
