// core/tensor.h: heed's tensor, a strided view over shared, aligned storage.
//
// Dimension letters used in shape comments throughout heed:
//   N batch, T time/positions, S source positions (cross-attention),
//   C channels, D model width, H heads, K head width, V vocabulary.
//
// A Tensor is a cheap handle (a shared pointer): copying it aliases the same
// data, like PyTorch. Views (reshape, permute, narrow, expand) share storage
// and differ only in shape, strides and offset.
//
// The autograd fields (requires_grad, grad, grad_fn) live here so that every
// tensor can take part in a graph, but nothing in core/ interprets them: the
// engine in autograd/ does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace heed {

enum class DType : uint8_t { f32, f64, i64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);

// Bytes with 64-byte alignment (one cache line, and AVX-512-safe). Shared by
// every view of a tensor.
//
// version counts the in-place changes to the bytes (PyTorch's version
// counter): every in-place kernel (copy_, fill_, add_, the random fills...)
// and every optimiser step adds one, and so does Tensor::bump_version() for
// code that writes through data<T>(). An op that saves a tensor for its
// backward notes the version, and backward refuses to run it if the version
// moved: the gradient would be computed from values the forward never saw.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  uint64_t version = 0;
  explicit Storage(size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

namespace autograd { struct Node; }

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;

  // autograd (interpreted by autograd/)
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;            // accumulated dL/dthis
  std::shared_ptr<autograd::Node> grad_fn;     // op that produced this (non-leaf)
  std::weak_ptr<autograd::Node> grad_accumulator;  // a leaf's gradient sink, shared by all its uses
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (all contiguous, no grad) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  static Tensor scalar(double value, DType dtype = DType::f32);  // shape []
  static Tensor arange(int64_t n, DType dtype = DType::f32);
  // start, start + step, ... while below end (above it for a negative step), as PyTorch's arange.
  static Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32);
  // n values from start to end, both included, evenly spaced (computed in float64), as PyTorch's linspace.
  static Tensor linspace(double start, double end, int64_t n, DType dtype = DType::f32);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // Convenience: float data, shape checked against the number of values.
  static Tensor from(std::initializer_list<float> values, const Shape& shape);
  static Tensor from(const std::vector<float>& values, const Shape& shape);
  static Tensor from_f64(const std::vector<double>& values, const Shape& shape);
  static Tensor from_i64(const std::vector<int64_t>& values, const Shape& shape);
  // A view over existing storage.
  static Tensor view_of(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return use("shape")->shape; }
  const Shape& strides() const { return use("strides")->strides; }
  int64_t offset() const { return use("offset")->offset; }
  int64_t dim() const { return static_cast<int64_t>(use("dim")->shape.size()); }
  // size(d) accepts negative d (from the end); out of range throws naming d and the range.
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(use("numel")->shape); }
  DType dtype() const { return use("dtype")->dtype; }
  bool is_contiguous() const;
  bool is_floating() const { return use("is_floating")->dtype != DType::i64; }

  // ---- data access ----
  // Pointer to element [0,...,0] (offset applied). Checks the dtype.
  template <class T> T* data() const;
  void* raw_data() const;
  double item() const;  // exactly one element
  // Element by index (slow; for tests and printing).
  double at(const std::vector<int64_t>& index) const;
  // All elements in logical (row-major) order, converted to T.
  template <class T> std::vector<T> to_vector() const;
  std::vector<float> to_floats() const { return to_vector<float>(); }
  // The storage's count of in-place changes (Storage::version), shared by
  // every view of it. After writing through data<T>() into a tensor that a
  // recorded op may have saved, call bump_version(): the next backward
  // through that op is then refused instead of using the new values.
  uint64_t version() const { return use("version")->storage->version; }
  void bump_version() const { ++use("bump_version")->storage->version; }

  // ---- autograd fields ----
  bool requires_grad() const { return use("requires_grad")->requires_grad; }
  // Only floating leaves may require grad; throws otherwise.
  Tensor& set_requires_grad(bool on = true);
  // Accumulated gradient (undefined until a backward pass reaches this tensor).
  Tensor grad() const { return Tensor(use("grad")->grad); }
  void set_grad(const Tensor& g) { use("set_grad")->grad = g.impl_; }
  void zero_grad() { use("zero_grad")->grad.reset(); }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return use("grad_fn")->grad_fn; }
  bool is_leaf() const { return use("is_leaf")->grad_fn == nullptr; }

  // ---- the differentiable ops as methods, libtorch's spelling ----
  // x.matmul(w).softmax(-1).sum().backward() is matmul, softmax, sum and
  // backward of autograd/ops.h (declared here, defined with the ops in
  // autograd/tensor_methods.cpp): they record gradients like the functions.
  Tensor matmul(const Tensor& other) const;
  Tensor sum(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor mean(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor max(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;  // int64, no gradient
  Tensor view(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor contiguous() const;
  Tensor pow(double exponent) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor clamp(double min, double max) const;
  Tensor relu() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor to(DType dtype) const;  // differentiable between f32 and f64
  Tensor detach() const;
  void backward() const;

  // ---- identity ----
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }
  bool shares_storage(const Tensor& o) const;

  // A printable summary in PyTorch's style: values (truncated), shape, dtype.
  std::string str() const;

 private:
  // impl_, or a heed::Error naming the accessor when this tensor is undefined
  // (default-constructed, or grad() before a backward reached it).
  TensorImpl* use(const char* accessor) const {
    if (!impl_) [[unlikely]]
      undefined(accessor);
    return impl_.get();
  }
  [[noreturn]] static void undefined(const char* accessor);
  std::shared_ptr<TensorImpl> impl_;
};

// Normalises a possibly negative dim against rank; throws
// "<op>: dim D out of range for a tensor of rank R (expected -R..R-1)".
int64_t normalize_dim(int64_t d, int64_t rank, const char* op);

// normalize_dim lets a rank-0 tensor take dim 0 or -1 (reducing a scalar over
// "its" dim is the identity). Ops that index a dim's size or stride call this
// first; it throws "<op>: expected a tensor of rank >= 1, got shape []".
void check_has_dims(const Tensor& t, const char* op);

// Throws an error naming op when t is undefined.
void check_defined(const Tensor& t, const char* op);

// Throws "<op>: expected dtype X, got Y".
void check_dtype(const Tensor& t, DType expected, const char* op);

// ---- implementation of templates ----
template <class T>
T* Tensor::data() const {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int64_t>);
  check_dtype(*this, dtype_of<T>(), "data");
  return static_cast<T*>(impl_->storage->data) + impl_->offset;
}

}  // namespace heed
