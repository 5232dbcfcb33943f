// core/cpu_elementwise.cpp: broadcasting binary ops, unary ops and their
// derivatives, masked_fill / where. All run on detail::run (core/iter.h).
#include <cmath>
#include <type_traits>

#include "core/error.h"
#include "core/fast_math.h"
#include "core/iter.h"
#include "core/kernels.h"

namespace heed::kernel {

const char* binary_name(Binary op) {
  switch (op) {
    case Binary::add: return "add";
    case Binary::sub: return "sub";
    case Binary::mul: return "mul";
    case Binary::div: return "div";
    case Binary::pow: return "pow";
    case Binary::maximum: return "maximum";
    case Binary::minimum: return "minimum";
    case Binary::eq: return "eq";
    case Binary::ne: return "ne";
    case Binary::lt: return "lt";
    case Binary::le: return "le";
    case Binary::gt: return "gt";
    case Binary::ge: return "ge";
  }
  return "?";
}

const char* unary_name(Unary op) {
  switch (op) {
    case Unary::neg: return "neg";
    case Unary::exp: return "exp";
    case Unary::log: return "log";
    case Unary::sqrt: return "sqrt";
    case Unary::tanh: return "tanh";
    case Unary::sigmoid: return "sigmoid";
    case Unary::relu: return "relu";
    case Unary::gelu_tanh: return "gelu_tanh";
    case Unary::gelu_erf: return "gelu_erf";
    case Unary::silu: return "silu";
    case Unary::abs: return "abs";
    case Unary::square: return "square";
    case Unary::reciprocal: return "reciprocal";
    case Unary::sin: return "sin";
    case Unary::cos: return "cos";
  }
  return "?";
}

namespace {

template <class T>
inline T apply_binary(Binary op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // int64 arithmetic wraps around (two's complement, as PyTorch's does);
    // in signed arithmetic an overflow is undefined, and INT64_MIN / -1
    // stops the process (SIGFPE). A zero divisor is refused before this.
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case Binary::add: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case Binary::sub: return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
      case Binary::mul: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case Binary::div: return b == -1 ? static_cast<T>(U(0) - static_cast<U>(a)) : a / b;
      default: break;
    }
  }
  switch (op) {
    case Binary::add: return a + b;
    case Binary::sub: return a - b;
    case Binary::mul: return a * b;
    case Binary::div: return a / b;
    case Binary::pow: return static_cast<T>(std::pow(a, b));
    // NaN in either operand gives NaN (a != a only for NaN), as PyTorch's.
    case Binary::maximum: return a > b || a != a ? a : b;
    case Binary::minimum: return a < b || a != a ? a : b;
    case Binary::eq: return a == b;
    case Binary::ne: return a != b;
    case Binary::lt: return a < b;
    case Binary::le: return a <= b;
    case Binary::gt: return a > b;
    case Binary::ge: return a >= b;
  }
  return T(0);
}

// The switch is hoisted out of the loop by instantiating one loop per op, so
// each inner loop is a plain vectorisable body.
template <class T, Binary OP>
void binary_loop(T* o, const T* a, const T* b, const int64_t* off, int64_t n, const int64_t* st) {
  o += off[0];
  a += off[1];
  b += off[2];
  if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = apply_binary<T>(OP, a[i], b[i]);
  } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = apply_binary<T>(OP, a[i], bv);
  } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = apply_binary<T>(OP, av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i * st[0]] = apply_binary<T>(OP, a[i * st[1]], b[i * st[2]]);
  }
}

template <class T>
void binary_into(Binary op, const Tensor& out, const Tensor& a, const Tensor& b) {
  Shape sa = detail::broadcast_strides(a, out.shape());
  Shape sb = detail::broadcast_strides(b, out.shape());
  auto it = detail::make_iter<3>(out.shape(), {&out.strides(), &sa, &sb});
  T* o = out.data<T>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
#define HEED_BIN_CASE(NAME)                                                                       \
  case Binary::NAME:                                                                              \
    detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {                       \
      binary_loop<T, Binary::NAME>(o, pa, pb, off, n, st);                                        \
    });                                                                                           \
    break;
  switch (op) {
    HEED_BIN_CASE(add) HEED_BIN_CASE(sub) HEED_BIN_CASE(mul) HEED_BIN_CASE(div) HEED_BIN_CASE(pow)
    HEED_BIN_CASE(maximum) HEED_BIN_CASE(minimum) HEED_BIN_CASE(eq) HEED_BIN_CASE(ne) HEED_BIN_CASE(lt)
    HEED_BIN_CASE(le) HEED_BIN_CASE(gt) HEED_BIN_CASE(ge)
  }
#undef HEED_BIN_CASE
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype())
    fail("{}: dtype mismatch: {} with shape {} and {} with shape {}", op, dtype_name(a.dtype()),
         shape_str(a.shape()), dtype_name(b.dtype()), shape_str(b.shape()));
}

}  // namespace

Tensor binary(Binary op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  check_defined(a, name);
  check_defined(b, name);
  check_same_dtype(a, b, name);
  Shape s = broadcast_shapes(a.shape(), b.shape(), name);
  // Laid out like the full-shape operand (channels-last stays so).
  Tensor out = a.shape() == s   ? empty_like_dense(a)
               : b.shape() == s ? empty_like_dense(b, a.dtype())
                                : Tensor::empty(s, a.dtype());
  if (out.numel() == 0) return out;
  // Integer division by zero is undefined behaviour (SIGFPE on x86), not inf.
  if (op == Binary::div && a.dtype() == DType::i64 &&
      sum(binary(Binary::eq, b, Tensor::scalar(0.0, DType::i64)), {}).item() != 0)
    fail("div: integer division by zero (divisor of shape {} holds a 0)", shape_str(b.shape()));
  HEED_DISPATCH_ALL(a.dtype(), name, binary_into<T>(op, out, a, b));
  return out;
}

Tensor binary_scalar(Binary op, const Tensor& a, double s, bool scalar_first) {
  check_defined(a, binary_name(op));
  // With an int64 tensor the number is an int64 too: one that is not (0.5,
  // 1e30, NaN) would be cut to another number, and the result with it.
  if (a.dtype() == DType::i64 && !(s == std::trunc(s) && s >= -9223372036854775808.0 && s < 9223372036854775808.0))
    fail("{}: an int64 tensor of shape {} with the number {}, which is not an int64 value; expected an integer, or "
         "the tensor converted first (t.to(DType::f64))",
         binary_name(op), shape_str(a.shape()), s);
  Tensor st = Tensor::scalar(s, a.dtype());
  return scalar_first ? binary(op, st, a) : binary(op, a, st);
}

namespace {
// The iteration of an in-place dst op= src (src broadcast to dst), after
// checking the operands; false when there is nothing to do.
bool in_place_iter(const char* name, const Tensor& dst, const Tensor& src, detail::Iter<2>& it) {
  check_defined(dst, name);
  check_defined(src, name);
  check_same_dtype(dst, src, name);
  Shape b = broadcast_shapes(dst.shape(), src.shape(), name);
  if (b != dst.shape())
    fail("{}: source shape {} does not broadcast to destination shape {}", name, shape_str(src.shape()),
         shape_str(dst.shape()));
  if (dst.numel() == 0) return false;
  Shape ss = detail::broadcast_strides(src, dst.shape());
  it = detail::make_iter<2>(dst.shape(), {&dst.strides(), &ss});
  return true;
}
}  // namespace

void add_(const Tensor& dst, const Tensor& src, double alpha) {
  detail::Iter<2> it;
  if (!in_place_iter("add_", dst, src, it)) return;
  dst.bump_version();
  HEED_DISPATCH_ALL(dst.dtype(), "add_", {
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    const T al = static_cast<T>(alpha);
    detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
      T* dp = d + off[0];
      const T* sp = s + off[1];
      if (st[0] == 1 && st[1] == 1) {
        if (alpha == 1.0)
          for (int64_t i = 0; i < n; ++i) dp[i] += sp[i];
        else
          for (int64_t i = 0; i < n; ++i) dp[i] += al * sp[i];
      } else {
        for (int64_t i = 0; i < n; ++i) dp[i * st[0]] += al * sp[i * st[1]];
      }
    });
  });
}

void mul_(const Tensor& dst, const Tensor& src) {
  detail::Iter<2> it;
  if (!in_place_iter("mul_", dst, src, it)) return;
  dst.bump_version();
  HEED_DISPATCH_ALL(dst.dtype(), "mul_", {
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
      T* dp = d + off[0];
      const T* sp = s + off[1];
      if (st[0] == 1 && st[1] == 1)
        for (int64_t i = 0; i < n; ++i) dp[i] *= sp[i];
      else
        for (int64_t i = 0; i < n; ++i) dp[i * st[0]] *= sp[i * st[1]];
    });
  });
}

void scale_(const Tensor& dst, double s) {
  check_defined(dst, "scale_");
  if (dst.numel() == 0) return;
  dst.bump_version();
  auto it = detail::make_iter<1>(dst.shape(), {&dst.strides()});
  HEED_DISPATCH_ALL(dst.dtype(), "scale_", {
    T* d = dst.data<T>();
    const T sv = static_cast<T>(s);
    detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
      for (int64_t i = 0; i < n; ++i) d[off[0] + i * st[0]] *= sv;
    });
  });
}

// ---- unary ----
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;   // 1/sqrt(2 pi)

// The GELUs from their shared part: erf(x / sqrt 2) (exact) or tanh(u) (the
// tanh form), so that f and f' computed together share it and each has the
// bits it has alone.
template <class T>
inline T gelu_erf_arg(T x) {
  if constexpr (std::is_same_v<T, float>) return fast::erf(x * static_cast<float>(kInvSqrt2));
  else return std::erf(x * T(kInvSqrt2));
}
template <class T>
inline T gelu_erf_from(T x, T e) {
  if constexpr (std::is_same_v<T, float>) return 0.5f * x * (1.0f + e);
  else return T(0.5) * x * (T(1) + e);
}
template <class T>
inline T gelu_erf_derivative_from(T s, T e) {
  // a b + c d with one fused multiply-add, written out: left to the
  // compiler, a vector loop's body and its scalar tail contracted different
  // products (1 ulp apart), so a value's bits depended on its position.
  if constexpr (std::is_same_v<T, float>)
#ifdef __FMA__
    return __builtin_fmaf(s * static_cast<float>(kInvSqrt2Pi), fast::exp_softmax(-0.5f * s * s), 0.5f * (1.0f + e));
#else
    return 0.5f * (1.0f + e) + s * static_cast<float>(kInvSqrt2Pi) * fast::exp_softmax(-0.5f * s * s);
#endif
  else
    return T(0.5) * (T(1) + e) + s * T(kInvSqrt2Pi) * std::exp(T(-0.5) * s * s);
}
template <class T>
inline T gelu_tanh_arg(T x) {
  return std::tanh(T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x));
}
template <class T>
inline T gelu_tanh_from(T x, T t) {
  return T(0.5) * x * (T(1) + t);
}
template <class T>
inline T gelu_tanh_derivative_from(T s, T t) {
  T du = T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * s * s);
  return T(0.5) * (T(1) + t) + T(0.5) * s * (T(1) - t * t) * du;
}

template <class T>
inline T apply_unary(Unary op, T x) {
  switch (op) {
    case Unary::neg: return -x;
    case Unary::exp: return std::exp(x);
    case Unary::log: return std::log(x);
    case Unary::sqrt: return std::sqrt(x);
    case Unary::tanh: return std::tanh(x);
    case Unary::sigmoid: return T(1) / (T(1) + std::exp(-x));
    case Unary::relu: return x > T(0) || x != x ? x : T(0);  // NaN stays NaN
    // GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in sec. 2)
    case Unary::gelu_tanh: return gelu_tanh_from(x, gelu_tanh_arg(x));
    // GELU, exact: x * Phi(x)
    case Unary::gelu_erf: return gelu_erf_from(x, gelu_erf_arg(x));
    // SiLU (Elfwing et al. 2017; Ramachandran et al.'s swish): x sigmoid(x) =
    // x / (1 + e^-x). float32 on fast::exp so the loop vectorises; below
    // x = -88.7 e^-x is inf and y the limit, -0.
    case Unary::silu:
      if constexpr (std::is_same_v<T, float>) return x / (1.0f + fast::exp(-x));
      else return x / (T(1) + std::exp(-x));
    case Unary::abs: return std::abs(x);
    case Unary::square: return x * x;
    case Unary::reciprocal: return T(1) / x;
    case Unary::sin: return std::sin(x);
    case Unary::cos: return std::cos(x);
  }
  return x;
}

// f'(x) of the ops whose backward is g * f'(x) and whose forward can make
// f'(x) in the same pass (unary_with_derivative): the GELUs. apply_unary_grad
// multiplies g by this very value, so g * f'(x) from either has the same bits.
template <class T>
inline T apply_unary_derivative(Unary op, T s) {
  switch (op) {
    case Unary::gelu_tanh: return gelu_tanh_derivative_from(s, gelu_tanh_arg(s));
    case Unary::gelu_erf: return gelu_erf_derivative_from(s, gelu_erf_arg(s));
    default: return T(0);
  }
}

// f'(.) times g, from saved = y (uses_output) or x.
template <class T>
inline T apply_unary_grad(Unary op, T s, T g) {
  switch (op) {
    case Unary::neg: return -g;
    case Unary::exp: return g * s;
    case Unary::log: return g / s;
    case Unary::sqrt: return g * T(0.5) / s;
    case Unary::tanh: return g * (T(1) - s * s);
    case Unary::sigmoid: return g * s * (T(1) - s);
    case Unary::relu: return s > T(0) || s != s ? g : T(0);  // at NaN the gradient passes, as PyTorch's
    case Unary::gelu_tanh:
    case Unary::gelu_erf: return g * apply_unary_derivative<T>(op, s);
    // d/dx x sig(x) = sig(x) (1 + x (1 - sig(x))), with sig(x) recomputed from x.
    case Unary::silu: {
      T sg;
      if constexpr (std::is_same_v<T, float>) sg = 1.0f / (1.0f + fast::exp(-s));
      else sg = T(1) / (T(1) + std::exp(-s));
      return g * sg * (T(1) + s * (T(1) - sg));
    }
    case Unary::abs: return s > T(0) ? g : (s < T(0) ? -g : T(0));
    case Unary::square: return g * T(2) * s;
    case Unary::reciprocal: return -g * s * s;  // d(1/x) = -1/x^2 = -y^2
    case Unary::sin: return g * std::cos(s);
    case Unary::cos: return -g * std::sin(s);
  }
  return g;
}

template <class T, Unary OP>
void unary_loop(T* o, const T* x, const int64_t* off, int64_t n, const int64_t* st) {
  o += off[0];
  x += off[1];
  if (st[0] == 1 && st[1] == 1)
    for (int64_t i = 0; i < n; ++i) o[i] = apply_unary<T>(OP, x[i]);
  else
    for (int64_t i = 0; i < n; ++i) o[i * st[0]] = apply_unary<T>(OP, x[i * st[1]]);
}

// y = f(x) and d = f'(x) together (the GELUs: one erf or tanh for both).
template <class T, Unary OP>
void unary_derivative_loop(T* o, T* d, const T* x, const int64_t* off, int64_t n, const int64_t* st) {
  o += off[0];
  d += off[1];
  x += off[2];
  static_assert(OP == Unary::gelu_erf || OP == Unary::gelu_tanh);
  auto both = [](T v, T& y, T& dy) {
    if constexpr (OP == Unary::gelu_erf) {
      const T e = gelu_erf_arg(v);
      y = gelu_erf_from(v, e);
      dy = gelu_erf_derivative_from(v, e);
    } else {
      const T t = gelu_tanh_arg(v);
      y = gelu_tanh_from(v, t);
      dy = gelu_tanh_derivative_from(v, t);
    }
  };
  if (st[0] == 1 && st[1] == 1 && st[2] == 1)
    for (int64_t i = 0; i < n; ++i) both(x[i], o[i], d[i]);
  else
    for (int64_t i = 0; i < n; ++i) both(x[i * st[2]], o[i * st[0]], d[i * st[1]]);
}

template <class T, Unary OP>
void unary_grad_loop(T* o, const T* s, const T* g, const int64_t* off, int64_t n, const int64_t* st) {
  o += off[0];
  s += off[1];
  g += off[2];
  if (st[0] == 1 && st[1] == 1 && st[2] == 1)
    for (int64_t i = 0; i < n; ++i) o[i] = apply_unary_grad<T>(OP, s[i], g[i]);
  else
    for (int64_t i = 0; i < n; ++i) o[i * st[0]] = apply_unary_grad<T>(OP, s[i * st[1]], g[i * st[2]]);
}

#define HEED_UNARY_CASES(MACRO)                                                                    \
  MACRO(neg) MACRO(exp) MACRO(log) MACRO(sqrt) MACRO(tanh) MACRO(sigmoid) MACRO(relu) MACRO(gelu_tanh) \
  MACRO(gelu_erf) MACRO(silu) MACRO(abs) MACRO(square) MACRO(reciprocal) MACRO(sin) MACRO(cos)

}  // namespace

bool unary_backward_uses_output(Unary op) {
  return op == Unary::exp || op == Unary::tanh || op == Unary::sigmoid || op == Unary::sqrt ||
         op == Unary::reciprocal;
}

namespace {

template <class T>
void unary_typed(Unary op, const Tensor& out, const Tensor& x, const detail::Iter<2>& it) {
  T* o = out.data<T>();
  const T* px = x.data<T>();
#define HEED_UN_CASE(NAME)                                                                         \
  case Unary::NAME:                                                                                \
    detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {                        \
      unary_loop<T, Unary::NAME>(o, px, off, n, st);                                               \
    });                                                                                            \
    break;
  switch (op) { HEED_UNARY_CASES(HEED_UN_CASE) }
#undef HEED_UN_CASE
}

template <class T>
void unary_grad_typed(Unary op, const Tensor& out, const Tensor& saved, const Tensor& g, const detail::Iter<3>& it) {
  T* o = out.data<T>();
  const T* ps = saved.data<T>();
  const T* pg = g.data<T>();
#define HEED_UNG_CASE(NAME)                                                                        \
  case Unary::NAME:                                                                                \
    detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {                        \
      unary_grad_loop<T, Unary::NAME>(o, ps, pg, off, n, st);                                      \
    });                                                                                            \
    break;
  switch (op) { HEED_UNARY_CASES(HEED_UNG_CASE) }
#undef HEED_UNG_CASE
}

}  // namespace

Tensor unary(Unary op, const Tensor& x) {
  const char* name = unary_name(op);
  check_defined(x, name);
  Tensor out = empty_like_dense(x);
  if (out.numel() == 0) return out;
  auto it = detail::make_iter<2>(x.shape(), {&out.strides(), &x.strides()});
  HEED_DISPATCH_FLOAT(x.dtype(), name, unary_typed<T>(op, out, x, it));
  return out;
}

bool unary_has_derivative_pass(Unary op) { return op == Unary::gelu_erf || op == Unary::gelu_tanh; }

Tensor unary_with_derivative(Unary op, const Tensor& x, Tensor& derivative) {
  const char* name = unary_name(op);
  check_defined(x, name);
  if (!unary_has_derivative_pass(op)) fail("{}: no derivative pass for this op (unary_has_derivative_pass)", name);
  Tensor out = empty_like_dense(x);
  derivative = empty_like_dense(x);
  if (out.numel() == 0) return out;
  auto it = detail::make_iter<3>(x.shape(), {&out.strides(), &derivative.strides(), &x.strides()});
  auto typed = [&](auto zero) {
    using T = decltype(zero);
    T* o = out.data<T>();
    T* d = derivative.data<T>();
    const T* px = x.data<T>();
    if (op == Unary::gelu_erf)
      detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
        unary_derivative_loop<T, Unary::gelu_erf>(o, d, px, off, n, st);
      });
    else
      detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
        unary_derivative_loop<T, Unary::gelu_tanh>(o, d, px, off, n, st);
      });
  };
  if (x.dtype() == DType::f64) typed(double{});
  else if (x.dtype() == DType::f32) typed(float{});
  else fail("{}: expected a floating-point tensor, got {}", name, dtype_name(x.dtype()));
  return out;
}

Tensor unary_backward(Unary op, const Tensor& saved, const Tensor& g) {
  const char* name = unary_name(op);
  check_defined(saved, name);
  check_defined(g, name);
  check_same_dtype(saved, g, name);
  if (saved.shape() != g.shape())
    fail("{} backward: gradient shape {} does not match saved shape {}", name, shape_str(g.shape()),
         shape_str(saved.shape()));
  Tensor out = empty_like_dense(g);
  if (out.numel() == 0) return out;
  auto it = detail::make_iter<3>(g.shape(), {&out.strides(), &saved.strides(), &g.strides()});
  HEED_DISPATCH_FLOAT(g.dtype(), name, unary_grad_typed<T>(op, out, saved, g, it));
  return out;
}

// ---- masks ----
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined(cond, "where");
  check_defined(a, "where");
  check_defined(b, "where");
  check_same_dtype(a, b, "where");
  Shape s = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  // Decide "nonzero" in the condition's own dtype: converting first would
  // turn 0.5 into int64 0, or 1e-300 into float32 0, and flip the choice.
  Tensor c = cond.dtype() == a.dtype()
                 ? cond
                 : to_dtype(binary(Binary::ne, cond, Tensor::scalar(0.0, cond.dtype())), a.dtype());
  Tensor out = Tensor::empty(s, a.dtype());
  if (out.numel() == 0) return out;
  Shape sc = detail::broadcast_strides(c, s), sa = detail::broadcast_strides(a, s),
        sb = detail::broadcast_strides(b, s);
  auto it = detail::make_iter<4>(s, {&out.strides(), &sc, &sa, &sb});
  HEED_DISPATCH_ALL(a.dtype(), "where", {
    T* o = out.data<T>();
    const T* pc = c.data<T>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
      for (int64_t i = 0; i < n; ++i)
        o[off[0] + i * st[0]] = pc[off[1] + i * st[1]] != T(0) ? pa[off[2] + i * st[2]] : pb[off[3] + i * st[3]];
    });
  });
  return out;
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, double value) {
  check_defined(t, "masked_fill");
  check_defined(mask, "masked_fill");
  Shape s = broadcast_shapes(t.shape(), mask.shape(), "masked_fill");
  if (s != t.shape())
    fail("masked_fill: mask shape {} does not broadcast to tensor shape {}", shape_str(mask.shape()),
         shape_str(t.shape()));
  return where(mask, Tensor::scalar(value, t.dtype()), t);
}

namespace {
template <class T>
bool finite_typed(const Tensor& t, const detail::Iter<1>& it) {
  const T* p = t.data<T>();
  int bad = 0;
  detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
    bool local = true;
    for (int64_t i = 0; i < n; ++i) local &= std::isfinite(p[off[0] + i * st[0]]);
    if (!local) {
#pragma omp atomic write
      bad = 1;
    }
  });
  return bad == 0;
}
}  // namespace

bool all_finite(const Tensor& t) {
  check_defined(t, "all_finite");
  if (t.dtype() == DType::i64 || t.numel() == 0) return true;
  auto it = detail::make_iter<1>(t.shape(), {&t.strides()});
  bool ok = true;
  HEED_DISPATCH_FLOAT(t.dtype(), "all_finite", ok = finite_typed<T>(t, it));
  return ok;
}

}  // namespace heed::kernel
