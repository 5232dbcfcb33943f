// core/tensor.cpp: storage, factories, metadata and element access.
#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/threads.h"

namespace heed {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i64: return "int64";
  }
  return "?";
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

Storage::Storage(size_t n) : bytes(n) { data = alloc::allocate(n); }

Storage::~Storage() { alloc::release(data, bytes); }

int64_t normalize_dim(int64_t d, int64_t rank, const char* op) {
  int64_t lo = -std::max<int64_t>(rank, 1), hi = std::max<int64_t>(rank, 1) - 1;
  if (d < lo || d > hi)
    fail("{}: dim {} out of range for a tensor of rank {} (expected {}..{})", op, d, rank, lo, hi);
  return d < 0 ? d + std::max<int64_t>(rank, 1) : d;
}

void check_has_dims(const Tensor& t, const char* op) {
  check_defined(t, op);
  if (t.dim() == 0) fail("{}: expected a tensor of rank >= 1, got shape []", op);
}

void check_defined(const Tensor& t, const char* op) {
  if (!t.defined())
    fail("{}: got an undefined tensor (a default-constructed Tensor, or the grad() of a tensor no backward has "
         "reached yet)",
         op);
}

void check_dtype(const Tensor& t, DType expected, const char* op) {
  check_defined(t, op);
  if (t.dtype() != expected)
    fail("{}: expected dtype {}, got {}", op, dtype_name(expected), dtype_name(t.dtype()));
}

// ---- factories ----
Tensor Tensor::empty(const Shape& shape, DType dtype) {
  int64_t numel = 1, bytes = 0;
  for (int64_t d : shape)
    if (d < 0) fail("empty: negative size {} in shape {}", d, shape_str(shape));
  // Sizes whose product wraps around would give a small storage for a huge
  // shape. Sizes 0 count as 1 here: the strides multiply the others anyway.
  bool wraps = false;
  for (int64_t d : shape) wraps = __builtin_mul_overflow(numel, std::max<int64_t>(d, 1), &numel) || wraps;
  if (wraps || __builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(dtype)), &bytes))
    fail("empty: shape {} of {} holds more bytes than a 64-bit size can count", shape_str(shape), dtype_name(dtype));
  detail::pace_threads();  // every op's output passes here: fewer threads while the cores are busy
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape) == 0 ? 0 : bytes));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  kernel::fill_(t, value);
  return t;
}
Tensor Tensor::zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }
Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

Tensor Tensor::arange(double start, double end, double step, DType dtype) {
  if (!(step != 0) || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    fail("arange: expected finite start, end and a nonzero step, got {}, {}, {}", start, end, step);
  const double count = std::ceil((end - start) / step);
  if (count > 1e12) fail("arange: {} .. {} by {} has too many values ({})", start, end, step, count);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<double>(i) * step;
  return kernel::to_dtype(from_f64(v, {n}), dtype);
}

Tensor Tensor::linspace(double start, double end, int64_t n, DType dtype) {
  if (n < 0 || !std::isfinite(start) || !std::isfinite(end))
    fail("linspace: expected finite ends and n >= 0, got {}, {}, {}", start, end, n);
  std::vector<double> v(static_cast<size_t>(n));
  const double step = n > 1 ? (end - start) / static_cast<double>(n - 1) : 0.0;
  // The second half counts back from end, so both ends are exact (as PyTorch does).
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = i < (n + 1) / 2 ? start + step * static_cast<double>(i) : end - step * static_cast<double>(n - 1 - i);
  return kernel::to_dtype(from_f64(v, {n}), dtype);
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  Tensor t = empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::f32: t.data<float>()[i] = static_cast<float>(i); break;
      case DType::f64: t.data<double>()[i] = static_cast<double>(i); break;
      case DType::i64: t.data<int64_t>()[i] = i; break;
    }
  }
  return t;
}

namespace {
// A tensor of shape filled with values; fn, the function the caller called,
// names it in the error.
template <class T>
Tensor filled(const std::vector<T>& values, const Shape& shape, const char* fn) {
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    fail("{}: {} values do not fill shape {} ({} elements)", fn, values.size(), shape_str(shape), shape_numel(shape));
  Tensor t = Tensor::empty(shape, dtype_of<T>());
  if (!values.empty()) std::memcpy(t.data<T>(), values.data(), values.size() * sizeof(T));
  return t;
}
}  // namespace

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  return filled(values, shape, "Tensor::from_vector");
}
template Tensor Tensor::from_vector<float>(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector<double>(const std::vector<double>&, const Shape&);
template Tensor Tensor::from_vector<int64_t>(const std::vector<int64_t>&, const Shape&);

Tensor Tensor::from(std::initializer_list<float> values, const Shape& shape) {
  return filled(std::vector<float>(values), shape, "Tensor::from");
}
Tensor Tensor::from(const std::vector<float>& values, const Shape& shape) { return filled(values, shape, "Tensor::from"); }
Tensor Tensor::from_f64(const std::vector<double>& values, const Shape& shape) {
  return filled(values, shape, "Tensor::from_f64");
}
Tensor Tensor::from_i64(const std::vector<int64_t>& values, const Shape& shape) {
  return filled(values, shape, "Tensor::from_i64");
}

Tensor Tensor::view_of(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  check_defined(base, "view_of");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl_->storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.impl_->dtype;
  return Tensor(std::move(impl));
}

// ---- metadata ----
int64_t Tensor::size(int64_t d) const {
  check_has_dims(*this, "size");
  return impl_->shape[normalize_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  check_has_dims(*this, "stride");
  return impl_->strides[normalize_dim(d, dim(), "stride")];
}

void Tensor::undefined(const char* accessor) {
  fail("Tensor::{}: the tensor is undefined (a default-constructed Tensor, or the grad() of a tensor no backward "
       "has reached yet)",
       accessor);
}

bool Tensor::is_contiguous() const {
  use("is_contiguous");
  // No elements, no layout: like PyTorch, an empty tensor is contiguous
  // (contiguous_strides gives [3, 3, 1] for [2, 0, 3], which the loop below
  // would otherwise reject).
  if (numel() == 0) return true;
  int64_t expect = 1;
  for (size_t i = impl_->shape.size(); i-- > 0;) {
    if (impl_->shape[i] == 1) continue;
    if (impl_->strides[i] != expect) return false;
    expect *= impl_->shape[i];
  }
  return true;
}

bool Tensor::shares_storage(const Tensor& o) const {
  return defined() && o.defined() && impl_->storage == o.impl_->storage;
}

void* Tensor::raw_data() const {
  const TensorImpl* t = use("raw_data");
  return static_cast<char*>(t->storage->data) + t->offset * static_cast<int64_t>(dtype_size(t->dtype));
}

double Tensor::at(const std::vector<int64_t>& index) const {
  check_defined(*this, "at");
  if (static_cast<int64_t>(index.size()) != dim())
    fail("at: index has {} entries for a tensor of rank {}", index.size(), dim());
  int64_t off = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    int64_t k = index[i];
    if (k < 0 || k >= impl_->shape[i])
      fail("at: index {} out of range for dim {} of size {} (expected 0..{})", k, i, impl_->shape[i],
           impl_->shape[i] - 1);
    off += k * impl_->strides[i];
  }
  switch (dtype()) {
    case DType::f32: return static_cast<const float*>(impl_->storage->data)[impl_->offset + off];
    case DType::f64: return static_cast<const double*>(impl_->storage->data)[impl_->offset + off];
    case DType::i64:
      return static_cast<double>(static_cast<const int64_t*>(impl_->storage->data)[impl_->offset + off]);
  }
  return 0;
}

double Tensor::item() const {
  check_defined(*this, "item");
  if (numel() != 1) fail("item: expected a tensor with one element, got shape {}", shape_str(shape()));
  return at(std::vector<int64_t>(dim(), 0));
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  check_defined(*this, "to_vector");
  Tensor c = kernel::contiguous(*this);
  std::vector<T> out(static_cast<size_t>(numel()));
  // A float read as an integer: truncated toward zero, as static_cast does,
  // but only where that is defined (finite, inside int64's range).
  auto integer = [&](double v, size_t i) {
    if (!(v > -9223372036854775808.0 && v < 9223372036854775808.0))
      fail("to_vector<int64_t>: element {} of a {} tensor is {}, which is not an int64 value", i,
           dtype_name(dtype()), v);
    return static_cast<T>(v);
  };
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype()) {
      case DType::f32:
        out[i] = std::is_integral_v<T> ? integer(c.data<float>()[i], i) : static_cast<T>(c.data<float>()[i]);
        break;
      case DType::f64:
        out[i] = std::is_integral_v<T> ? integer(c.data<double>()[i], i) : static_cast<T>(c.data<double>()[i]);
        break;
      case DType::i64: out[i] = static_cast<T>(c.data<int64_t>()[i]); break;
    }
  }
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

Tensor& Tensor::set_requires_grad(bool on) {
  check_defined(*this, "set_requires_grad");
  if (on && !is_floating())
    fail("set_requires_grad: only floating-point tensors can require grad, got {}", dtype_name(dtype()));
  if (!is_leaf()) fail("set_requires_grad: only leaf tensors can be marked; this one comes from an op");
  impl_->requires_grad = on;
  return *this;
}

}  // namespace heed
