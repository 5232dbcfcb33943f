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
Tensor Tensor::log_softmax(int64_t dim) const { return heed::log_softmax(*this, dim); }
Tensor Tensor::max(const std::vector<int64_t>& dims, bool keepdim) const { return heed::max(*this, dims, keepdim); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return heed::argmax(*this, dim, keepdim); }
Tensor Tensor::view(const Shape& shape) const { return heed::view(*this, shape); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const { return heed::flatten(*this, start_dim, end_dim); }
Tensor Tensor::permute(const std::vector<int64_t>& dims) const { return heed::permute(*this, dims); }
Tensor Tensor::unsqueeze(int64_t dim) const { return heed::unsqueeze(*this, dim); }
Tensor Tensor::squeeze(int64_t dim) const { return heed::squeeze(*this, dim); }
Tensor Tensor::contiguous() const { return heed::contiguous(*this); }
Tensor Tensor::pow(double exponent) const { return heed::pow(*this, exponent); }
Tensor Tensor::exp() const { return heed::exp(*this); }
Tensor Tensor::log() const { return heed::log(*this); }
Tensor Tensor::sqrt() const { return heed::sqrt(*this); }
Tensor Tensor::abs() const { return heed::abs(*this); }
Tensor Tensor::clamp(double min, double max) const { return heed::clamp(*this, min, max); }
Tensor Tensor::relu() const { return heed::relu(*this); }
Tensor Tensor::tanh() const { return heed::tanh(*this); }
Tensor Tensor::sigmoid() const { return heed::sigmoid(*this); }
Tensor Tensor::to(DType dtype) const { return heed::to(*this, dtype); }
Tensor Tensor::detach() const { return heed::detach(*this); }
void Tensor::backward() const { heed::backward(*this); }

}  // namespace heed
