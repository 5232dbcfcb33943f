// autograd/tensor_methods.cpp: Tensor's op methods (core/tensor.h), each the
// differentiable function of the same name in autograd/ops.h.
#include "autograd/autograd.h"
#include "autograd/ops.h"

namespace heed {

Tensor Tensor::matmul(const Tensor& other) const { return heed::matmul(*this, other); }
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return heed::sum(*this, dims, keepdim); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return heed::mean(*this, dims, keepdim); }
Tensor Tensor::reshape(const Shape& shape) const { return heed::reshape(*this, shape); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return heed::transpose(*this, d0, d1); }
Tensor Tensor::softmax(int64_t dim) const { return heed::softmax(*this, dim); }
Tensor Tensor::detach() const { return heed::detach(*this); }
void Tensor::backward() const { heed::backward(*this); }

}  // namespace heed
