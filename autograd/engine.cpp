// autograd/engine.cpp: graph recording, the backward walk, grad and anomaly modes.
#include <algorithm>
#include <chrono>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autograd.h"
#include "core/error.h"
#include "core/kernels.h"

namespace heed {
namespace autograd {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly_enabled = false;
}  // namespace

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }
bool is_anomaly_enabled() { return t_anomaly_enabled; }
void set_anomaly_enabled(bool on) { t_anomaly_enabled = on; }

// ---- op profiler ----
namespace {
using Clock = std::chrono::steady_clock;
thread_local bool t_profiling = false;
thread_local std::function<void(const Tensor&)>* t_grad_ready = nullptr;
thread_local Clock::time_point t_mark;
thread_local std::map<std::string, OpTiming> t_profile;

OpTiming& profile_entry(const std::string& op) {
  OpTiming& e = t_profile[op];
  e.op = op;
  return e;
}
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

void set_profiling(bool on) {
  t_profiling = on;
  if (on) {
    t_profile.clear();
    t_mark = Clock::now();
  }
}
bool is_profiling() { return t_profiling; }
void profile_mark() { t_mark = Clock::now(); }
void profile_add(const std::string& what, double seconds) {
  OpTiming& e = profile_entry(what);
  e.forward_s += seconds;
  ++e.forward_calls;
}
std::vector<OpTiming> profile_results() {
  std::vector<OpTiming> v;
  for (auto& [name, e] : t_profile) v.push_back(e);
  std::stable_sort(v.begin(), v.end(), [](const OpTiming& a, const OpTiming& b) {
    return a.forward_s + a.backward_s > b.forward_s + b.backward_s;
  });
  return v;
}

Node::~Node() {
  // Take over children that only this node keeps alive, and release them from
  // a loop instead of from their own destructors' recursion.
  std::vector<std::shared_ptr<Node>> stack;
  for (auto& n : next)
    if (n) stack.push_back(std::move(n));
  next.clear();
  backward = nullptr;
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n.use_count() == 1) {
      for (auto& c : n->next)
        if (c) stack.push_back(std::move(c));
      n->next.clear();
      n->backward = nullptr;  // closures may own tensors whose nodes chain on
    }
  }
}

static bool wants_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }

bool needs_graph(std::initializer_list<Tensor> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (wants_grad(t)) return true;
  return false;
}

bool needs_graph(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (wants_grad(t)) return true;
  return false;
}

namespace {
// The views saved() returned since the last record() on this thread. An op
// that throws between its saved() and its record() destroys its closure, and
// with it the views, so its entries show as expired to the next record().
thread_local std::vector<Node::Saved> t_saved;
}  // namespace

Tensor saved(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor v = Tensor::view_of(t, t.shape(), t.strides(), t.offset());
  if (t_grad_enabled) t_saved.push_back({v.impl_ptr(), v.version()});
  return v;
}

// The node that receives the gradient of input t: its producer, or for a
// leaf, an accumulator shared by all uses of that leaf.
static std::shared_ptr<Node> edge_for(const Tensor& t) {
  if (!wants_grad(t)) return nullptr;
  if (t.grad_fn()) return t.grad_fn();
  TensorImpl* impl = t.impl();
  if (auto acc = impl->grad_accumulator.lock()) return acc;
  auto acc = std::make_shared<Node>();
  acc->name = "accumulate_grad";
  acc->is_accumulator = true;
  acc->leaf = t.impl_ptr();
  acc->out_shape = t.shape();
  impl->grad_accumulator = acc;
  return acc;
}

static void check_finite(const Tensor& t, const std::string& what) {
  if (t.defined() && !kernel::all_finite(t))
    fail("anomaly: {} (shape {}) contains NaN or Inf", what, shape_str(t.shape()));
}

Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs, BackwardFn fn) {
  if (t_profiling) {
    const auto now = Clock::now();
    // Keyed by op and output shape: a model's convolutions differ by far.
    OpTiming& e = profile_entry(fmt::format("{} {}", name, shape_str(out.shape())));
    e.forward_s += std::chrono::duration<double>(now - t_mark).count();
    ++e.forward_calls;
    t_mark = now;
  }
  if (t_anomaly_enabled) check_finite(out, fmt::format("the output of {}", name));
  if (!needs_graph(inputs)) {
    t_saved.clear();
    return out;
  }
  auto node = std::make_shared<Node>();
  // The versions saved() noted for this op, whose views its closure holds:
  // those of its inputs and output. An entry left by an op that threw before
  // its record() has expired.
  for (Node::Saved& s : t_saved) {
    const std::shared_ptr<TensorImpl> v = s.view.lock();
    if (!v) continue;
    bool mine = out.defined() && v->storage == out.impl()->storage;
    for (const Tensor& t : inputs) mine = mine || (t.defined() && v->storage == t.impl()->storage);
    if (mine) node->saved.push_back(std::move(s));
  }
  t_saved.clear();
  node->name = name;
  node->backward = std::move(fn);
  node->out_shape = out.shape();
  node->next.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    node->next.push_back(edge_for(t));
    node->input_shapes.push_back(t.defined() ? t.shape() : Shape{});
    node->input_dtypes.push_back(t.defined() ? t.dtype() : DType::f32);
  }
  // `out` may be a kernel result that aliases an input's storage (a view); it
  // still gets its own impl, so its autograd fields are its own.
  Tensor res = Tensor::view_of(out, out.shape(), out.strides(), out.offset());
  res.impl()->grad_fn = std::move(node);
  res.impl()->requires_grad = true;
  return res;
}

GradReadyHook::GradReadyHook(std::function<void(const Tensor&)> fn) : fn_(std::move(fn)), prev_(t_grad_ready) {
  t_grad_ready = &fn_;
}
GradReadyHook::~GradReadyHook() { t_grad_ready = prev_; }

}  // namespace autograd

using autograd::Node;

void backward(const Tensor& output, const Tensor& grad, bool retain_graph) {
  check_defined(output, "backward");
  if (!output.requires_grad())
    fail("backward: the output (shape {}) does not require grad: no input of the computation requires grad, "
         "or it ran under NoGradGuard",
         shape_str(output.shape()));
  Tensor g0 = grad;
  if (!g0.defined()) {
    if (output.numel() != 1)
      fail("backward: output of shape {} is not a scalar; pass an explicit output gradient of that shape",
           shape_str(output.shape()));
    g0 = Tensor::ones(output.shape(), output.dtype());
  } else if (g0.shape() != output.shape()) {
    fail("backward: output gradient shape {} does not match output shape {}", shape_str(g0.shape()),
         shape_str(output.shape()));
  } else if (g0.dtype() != output.dtype()) {
    fail("backward: output gradient dtype {} does not match output dtype {}", dtype_name(g0.dtype()),
         dtype_name(output.dtype()));
  }

  // Gradients flowing through the engine never need a graph of their own.
  autograd::NoGradGuard no_grad;

  std::shared_ptr<Node> root = autograd::edge_for(output);

  // 1. Dependency counts over the reachable graph (explicit stack).
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{root.get()};
  std::unordered_set<Node*> seen{root.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n->freed)
      fail("backward: the graph through '{}' was already freed by an earlier backward; keep it with the first "
           "one to run it twice: heed::backward(loss, Tensor(), /*retain_graph=*/true)",
           n->name);
    // Before any gradient is computed, so that a refusal changes nothing.
    for (const Node::Saved& s : n->saved)
      if (const std::shared_ptr<TensorImpl> v = s.view.lock(); v && v->storage->version != s.version)
        fail("backward: a tensor of shape {} that {} saved for its backward was changed in place since (its version "
             "is {}, expected {}): an optimiser step, copy_, fill_ or another in-place kernel wrote to it between "
             "the forward and this backward, so the gradient would not be that of the forward's values. Run the "
             "forward again after the change, or change a copy (clone) instead",
             shape_str(v->shape), n->name, v->storage->version, s.version);
    for (auto& c : n->next) {
      if (!c) continue;
      ++deps[c.get()];
      if (seen.insert(c.get()).second) stack.push_back(c.get());
    }
  }

  // 2. Kahn's walk: a node runs once all its consumers have sent their
  // gradients. The ready list is a stack, so the order is deterministic.
  std::unordered_map<Node*, Tensor> pending;
  pending[root.get()] = g0;
  std::vector<std::shared_ptr<Node>> ready{root};
  while (!ready.empty()) {
    std::shared_ptr<Node> n = std::move(ready.back());
    ready.pop_back();
    Tensor g = std::move(pending[n.get()]);
    pending.erase(n.get());

    const bool prof = autograd::t_profiling;
    const auto t0 = prof ? autograd::Clock::now() : autograd::Clock::time_point();
    if (n->is_accumulator) {
      auto leaf = n->leaf.lock();
      if (leaf && g.defined()) {
        if (!leaf->grad) {
          // Own the storage: g may alias another tensor (add passes g through)
          // and is then copied; a g nothing else holds (a fresh product, the
          // usual weight gradient) becomes .grad as it is.
          const std::shared_ptr<TensorImpl>& gimpl = g.impl_ptr();
          const bool sole = gimpl.use_count() == 1 && gimpl->storage.use_count() == 1 && gimpl->offset == 0 &&
                            !gimpl->grad_fn && !gimpl->requires_grad && g.is_contiguous();
          leaf->grad = sole ? gimpl : kernel::clone(g).impl_ptr();
        } else {
          kernel::add_(Tensor(leaf->grad), g);
        }
        if (autograd::is_anomaly_enabled())
          autograd::check_finite(Tensor(leaf->grad), "the gradient accumulated into a leaf");
        // An accumulator runs once per pass, after every use of its leaf.
        if (autograd::t_grad_ready) (*autograd::t_grad_ready)(Tensor(leaf));
      }
      if (prof) {
        autograd::OpTiming& e = autograd::profile_entry("(accumulate grad)");
        e.backward_s += autograd::since(t0);
        ++e.backward_calls;
      }
      continue;
    }

    std::vector<bool> needed(n->next.size());
    for (size_t i = 0; i < n->next.size(); ++i) needed[i] = n->next[i] != nullptr;
    autograd::Grads gi(needed);
    {
      std::vector<const Tensor*> sums(n->next.size(), nullptr);
      for (size_t i = 0; i < n->next.size(); ++i) {
        if (!n->next[i]) continue;
        auto it = pending.find(n->next[i].get());
        if (it != pending.end()) sums[i] = &it->second;
      }
      gi.offer_sums(std::move(sums));
      gi.set_last_run(!retain_graph);
    }
    if (g.defined() && n->backward) n->backward(g, gi);

    for (size_t i = 0; i < n->next.size(); ++i) {
      auto& c = n->next[i];
      if (!c) continue;
      const Tensor& gin = gi.get(i);
      if (gin.defined()) {
        if (gin.shape() != n->input_shapes[i])
          fail("backward of {}: gradient for input {} has shape {}, expected {}", n->name, i, shape_str(gin.shape()),
               shape_str(n->input_shapes[i]));
        // Otherwise a float64 gradient would be summed into (or become) a
        // float32 leaf's .grad without a word.
        if (gin.dtype() != n->input_dtypes[i])
          fail("backward of {}: gradient for input {} has dtype {}, expected {}", n->name, i,
               dtype_name(gin.dtype()), dtype_name(n->input_dtypes[i]));
        if (autograd::is_anomaly_enabled())
          autograd::check_finite(gin, fmt::format("the gradient that {} sent to its input {}", n->name, i));
        Tensor& slot = pending[c.get()];
        // Sum without writing into either operand: both may alias live tensors
        // (an op that summed into the slot itself checked that it may).
        if (gi.summed(i)) slot = gin;
        else slot = slot.defined() ? kernel::binary(kernel::Binary::add, slot, gin) : gin;
      }
      if (--deps[c.get()] == 0) ready.push_back(c);
    }
    if (prof) {
      autograd::OpTiming& e = autograd::profile_entry(fmt::format("{} {}", n->name, shape_str(n->out_shape)));
      e.backward_s += autograd::since(t0);
      ++e.backward_calls;
    }
    if (!retain_graph) {
      n->backward = nullptr;  // drops every tensor the closure saved
      n->saved.clear();
      n->next.clear();
      n->freed = true;
    }
  }
}

Tensor autograd::Grads::sum_target(size_t i) const {
  if (i >= sums_.size() || !sums_[i] || summed_.at(i) || !needs(i)) return Tensor();
  const Tensor& t = *sums_[i];
  if (!t.defined()) return Tensor();
  // Held by the engine's sum alone: no other tensor, view or saved copy sees
  // the add. (The sum of an input always has that input's shape and dtype:
  // every gradient summed into it was checked against them.)
  if (!sole_owner(t) || t.impl_ptr()->offset != 0 || !t.is_contiguous()) return Tensor();
  return t;
}

bool autograd::sole_owner(const Tensor& t) {
  if (!t.defined()) return false;
  const std::shared_ptr<TensorImpl>& impl = t.impl_ptr();
  return impl.use_count() == 1 && impl->storage.use_count() == 1 && !impl->grad_fn && !impl->requires_grad;
}

Tensor detach(const Tensor& t) {
  if (!t.defined()) return t;
  return Tensor::view_of(t, t.shape(), t.strides(), t.offset());
}

}  // namespace heed
