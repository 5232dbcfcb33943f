// core/dnnl_context.h: heed's single oneDNN engine and stream (internal to
// core/). Every oneDNN kernel file shares them; each keeps its own cache of
// primitives by shape.
#pragma once

#include <dnnl.hpp>

#include <string>
#include <unordered_map>

#include "core/tensor.h"

namespace heed::kernel::detail {

dnnl::engine& dnnl_engine();
// A oneDNN view of t's data (no copy) with layout md.
dnnl::memory dnnl_mem(const dnnl::memory::desc& md, const Tensor& t);
// Runs p on heed's stream and waits for it.
void dnnl_run(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args);
// The same on a stream of the calling thread's own, for primitives that heed's
// threads run side by side (each built for one thread).
void dnnl_run_here(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args);
// Both run with the asynchronous signals blocked on the calling thread
// (core/dnnl_context.cpp says why). Brgemm matmuls, which keep a normal
// stack, may skip that (two system calls per run) with this one.
void dnnl_run_here_unshielded(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args);
// Whether a primitive of this implementation (primitive_desc::impl_info_str)
// needs the shield: all but oneDNN's brgemm kernels ("brg:...").
bool dnnl_needs_shield(const std::string& impl);

}  // namespace heed::kernel::detail
