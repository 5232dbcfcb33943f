// autograd/autograd.h: define-by-run reverse-mode differentiation.
//
// Every differentiable op computes its result with core/ kernels and, when
// grad mode is on and an input requires grad, attaches a Node whose backward
// closure maps dL/d(output) to dL/d(inputs). backward() sorts the nodes
// reachable from the output (explicit stack, no recursion), walks them in
// reverse topological order accumulating gradients, and frees each closure
// after use unless retain_graph is set.
//
// How to add an op (one file, next to its family):
//   Tensor my_op(const Tensor& x) {
//     Tensor y = kernel::...(x);                       // forward
//     return autograd::record("my_op", y, {x},
//         [xs = autograd::saved(x)](const Tensor& g, autograd::Grads& gi) {
//           if (gi.needs(0)) gi.set(0, ...);              // dL/dx from g
//         });
//   }
// and one line in tests/autograd/test_gradcheck.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace heed {
namespace autograd {

// Gradients for the inputs of one node, filled by its backward closure.
//
// Fusing the sum: when input i feeds several ops, the engine adds their
// gradients up as they arrive. sum_target(i) hands an op the sum so far when
// nothing else holds it (contiguous, of input i's shape and dtype), so that
// the op can add its own gradient into it in place, as part of its kernel
// (the Linear layer's dX product accumulates into it, beta = 1), and report
// that with set_summed(i, target). The result is the engine's own sum,
// target + gradient, without the pass that forms it.
class Grads {
 public:
  explicit Grads(const std::vector<bool>& needed) : needed_(needed), grads_(needed.size()), summed_(needed.size()) {}
  bool needs(size_t i) const { return i < needed_.size() && needed_[i]; }
  void set(size_t i, Tensor g) { grads_.at(i) = std::move(g); }
  const Tensor& get(size_t i) const { return grads_.at(i); }
  size_t size() const { return grads_.size(); }

  // The gradient summed so far for input i, when an op may add into it in
  // place; undefined otherwise (then set() as usual).
  Tensor sum_target(size_t i) const;
  // Input i's gradient is target (from sum_target(i)), with the op's own
  // gradient added into it.
  void set_summed(size_t i, Tensor target) {
    grads_.at(i) = std::move(target);
    summed_.at(i) = true;
  }
  bool summed(size_t i) const { return summed_.at(i); }

  // True when the closure runs for the last time (backward without
  // retain_graph): the tensors it saved are then dropped after this call, and
  // one nothing else holds (autograd::sole_owner) may be overwritten in place.
  bool last_run() const { return last_run_; }
  void set_last_run(bool last) { last_run_ = last; }

  // (engine) Where the sums so far of each input live.
  void offer_sums(std::vector<const Tensor*> sums) { sums_ = std::move(sums); }

 private:
  const std::vector<bool>& needed_;
  std::vector<Tensor> grads_;
  std::vector<bool> summed_;
  std::vector<const Tensor*> sums_;
  bool last_run_ = false;
};

// t's data is reachable through t alone: no other tensor, view or graph
// shares its storage.
bool sole_owner(const Tensor& t);

using BackwardFn = std::function<void(const Tensor& grad_out, Grads& grads_in)>;

struct Node {
  std::string name;                         // the op, for error messages
  BackwardFn backward;                      // released after use unless retain_graph
  std::vector<std::shared_ptr<Node>> next;  // producer of input i; null when no grad flows there
  std::vector<Shape> input_shapes;          // to check every gradient a closure returns
  std::vector<DType> input_dtypes;
  std::weak_ptr<TensorImpl> leaf;           // set on a leaf's gradient accumulator
  bool is_accumulator = false;
  bool freed = false;
  Shape out_shape;
  // The views the closure saved (autograd::saved), which it holds, with
  // their storage's version at the save (Storage::version): backward refuses
  // to run the graph when one has changed in place since.
  struct Saved {
    std::weak_ptr<TensorImpl> view;
    uint64_t version;
  };
  std::vector<Saved> saved;

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Releases long chains iteratively: a 10^5-op graph dropped at once must not
  // recurse once per node.
  ~Node();
};

// ---- modes ----
bool is_grad_enabled();
void set_grad_enabled(bool on);

// RAII: no graph is recorded in this scope on this thread (evaluation,
// optimiser updates).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Anomaly mode: every op output and every gradient is checked for NaN/Inf and
// the first offender is named ("anomaly: log produced non-finite values ...").
// Costs one pass over each tensor, so it is off by default.
bool is_anomaly_enabled();
void set_anomaly_enabled(bool on);
class AnomalyGuard {
 public:
  explicit AnomalyGuard(bool on = true) : prev_(is_anomaly_enabled()) { set_anomaly_enabled(on); }
  ~AnomalyGuard() { set_anomaly_enabled(prev_); }
  AnomalyGuard(const AnomalyGuard&) = delete;
  AnomalyGuard& operator=(const AnomalyGuard&) = delete;

 private:
  bool prev_;
};

// ---- op profiler ----
// When on, forward and backward time are summed per op name on this thread.
// An op's forward time runs from the previous op's record (or the last
// profile_mark) to its own record, so work done outside any op (a layer's
// loop, a kernel called directly) lands on the next op. Backward time is the
// node's closure plus summing its gradients into their slots; leaf gradient
// accumulation is reported as "(accumulate grad)". Two clock reads per op.
struct OpTiming {
  std::string op;
  double forward_s = 0, backward_s = 0;
  int64_t forward_calls = 0, backward_calls = 0;
};
void set_profiling(bool on);  // turning it on clears the table and marks
bool is_profiling();
void profile_mark();  // forward time of the next op starts now
// Adds time spent outside the graph (an optimiser step) under `what`.
void profile_add(const std::string& what, double seconds);
std::vector<OpTiming> profile_results();  // most total time first

// ---- leaf gradients as they become final ----
// While a GradReadyHook lives, backward() on this thread calls it with each
// leaf whose gradient this pass has finished (its last contribution summed),
// in the order backward finishes them: the last layers' first. Data-parallel
// training (optim/data_parallel.h) starts exchanging gradients there while
// backward still runs. One hook at a time per thread; it must not throw.
class GradReadyHook {
 public:
  explicit GradReadyHook(std::function<void(const Tensor& leaf)> fn);
  ~GradReadyHook();
  GradReadyHook(const GradReadyHook&) = delete;
  GradReadyHook& operator=(const GradReadyHook&) = delete;

 private:
  std::function<void(const Tensor&)> fn_;
  std::function<void(const Tensor&)>* prev_;
};

// ---- for op implementations ----
// True when grad mode is on and any input requires grad.
bool needs_graph(std::initializer_list<Tensor> inputs);
bool needs_graph(const std::vector<Tensor>& inputs);
// The data of t without its autograd fields, for closures to capture: saving
// an op's own output with its grad_fn would make a reference cycle. Also
// notes t's version for the node that the next record() on this thread
// makes, if t is one of that op's inputs or its output: backward then
// refuses the graph if t changes in place in between. A closure that keeps
// an input or the output captures it through saved(), never directly.
Tensor saved(const Tensor& t);
// Attaches a node computing `fn` to `out` when needs_graph(inputs); returns out.
Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs, BackwardFn fn);

}  // namespace autograd

// Parameters by dotted name ("3.conv_q.weight"), in registration order.
using NamedParams = std::vector<std::pair<std::string, Tensor>>;

// ---- user API ----
// Backpropagates from `output`. Without `grad`, output must hold exactly one
// element (a loss). The graph is freed afterwards unless retain_graph.
void backward(const Tensor& output, const Tensor& grad = Tensor(), bool retain_graph = false);

// Same data, cut from the graph (no grad_fn, requires_grad false).
Tensor detach(const Tensor& t);

}  // namespace heed
