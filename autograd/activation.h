// autograd/activation.h: the element-wise activations as one enum, for what
// takes "an activation" as a setting: the activation modules (layers/basic.h)
// and the transformer's options (layers/transformer.h).
//
// Each activation is listed once, in HEED_ACTIVATIONS: its enumerator and
// its name. The name is what summaries print (FeedForward's
// "activation=gelu", logged with every run) and what parse_activation reads,
// so a name, once released, is never changed. Adding an activation: its
// kernel op (kernel::Unary, core/cpu_elementwise.cpp: forward and
// derivative), its function in autograd/ops.h, a row here, its case in
// activation() (autograd/elementwise.cpp; the compiler names a missing one),
// its module's name in layers/basic.cpp, and a line in
// tests/autograd/test_gradcheck.cpp.
#pragma once

#include <string_view>

#include "core/tensor.h"

namespace heed {

// X(enumerator, name)
#define HEED_ACTIVATIONS(X)                                                                        \
  X(relu, "relu")           /* max(0, x) */                                                        \
  X(gelu, "gelu")           /* exact GELU, x Phi(x) */                                              \
  X(gelu_tanh, "gelu_tanh") /* GELU, tanh approximation */                                          \
  X(tanh, "tanh")                                                                                  \
  X(sigmoid, "sigmoid")                                                                            \
  X(silu, "silu")           /* x sigmoid(x) */

enum class Activation {
#define HEED_ACTIVATION_ENUMERATOR(id, name) id,
  HEED_ACTIVATIONS(HEED_ACTIVATION_ENUMERATOR)
#undef HEED_ACTIVATION_ENUMERATOR
};

// Every activation, in the order above.
inline constexpr Activation kActivations[] = {
#define HEED_ACTIVATION_VALUE(id, name) Activation::id,
    HEED_ACTIVATIONS(HEED_ACTIVATION_VALUE)
#undef HEED_ACTIVATION_VALUE
};

// "relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "silu".
const char* activation_name(Activation a);
// The activation of that name, or an error naming the value and listing the
// valid ones.
Activation parse_activation(std::string_view name);

// a applied element-wise: the same op as relu(x), gelu(x), gelu(x,
// GeluApprox::tanh), tanh(x), sigmoid(x) or silu(x) (autograd/ops.h), with
// the same values, gradient and op name.
Tensor activation(const Tensor& x, Activation a);

}  // namespace heed
