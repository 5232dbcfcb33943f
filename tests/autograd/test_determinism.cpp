// tests/autograd/test_determinism.cpp: the same training step gives the same
// bits, run after run and whatever the thread count. heed's element-wise,
// reduction, softmax, index and loss kernels compute each output element on one
// thread in a fixed order (core/kernels.h), and GEMMs are cut into slabs of
// output rows or columns by shape alone, each one single-threaded library
// call (tests/core/test_matmul_threads.cpp), so the sums do not depend on
// how many threads share the work.
#include <cstring>

#include "test_util.h"

using namespace heed;

namespace {

struct StepResult {
  double loss = 0;
  std::vector<std::vector<float>> grads;  // one per parameter, in order
};

// A small model with sizes large enough for every parallel path: an embedding
// (index gather, scatter-add backward), a shared-weight projection [N, T, D] x
// [D, F] (one big GEMM, folded-batch backward), GELU, a LayerNorm built from
// reductions, causal attention (batched GEMMs, masked softmax), a row-block
// reduction over the batch, and cross-entropy.
StepResult mlp_step() {
  const int64_t N = 8, T = 64, D = 256, F = 512, V = 300, C = 64;
  Tensor emb = test::det_tensor({V, D}, 1, -0.5, 0.5);
  Tensor w1 = test::det_tensor({D, F}, 2, -0.06, 0.06);
  Tensor b1 = test::det_tensor({F}, 3, -0.1, 0.1);
  Tensor w2 = test::det_tensor({F, C}, 4, -0.04, 0.04);
  Tensor b2 = test::det_tensor({C}, 5, -0.1, 0.1);
  std::vector<Tensor> params = {emb, w1, b1, w2, b2};
  for (Tensor& p : params) p.set_requires_grad(true);

  std::vector<int64_t> id_v(N * T), tg_v(N * T);
  for (int64_t i = 0; i < N * T; ++i) {
    id_v[i] = (i * 37 + 11) % V;  // every row of the table is used, some many times
    tg_v[i] = (i * 13 + 5) % C;
  }
  Tensor ids = Tensor::from_i64(id_v, {N, T});
  Tensor targets = Tensor::from_i64(tg_v, {N, T});
  Tensor x = test::det_tensor({N, T, D}, 6, -1.0, 1.0);  // [N, T, D]: 512 x 256 rows

  Tensor h0 = embedding(emb, ids) + x;          // [N, T, D]
  Tensor h1 = gelu(matmul(h0, w1) + b1);        // [N, T, F]
  Tensor mu = mean(h1, {-1}, true);             // LayerNorm from primitives
  Tensor xc = h1 - mu;
  Tensor var = mean(xc * xc, {-1}, true);
  Tensor hn = xc / sqrt(var + 1e-5);            // [N, T, F]
  Tensor att = softmax(masked_fill(matmul(hn, transpose(hn, 1, 2)) / 22.6, causal_mask(T), -1e9), -1);  // [N, T, T]
  Tensor h2 = matmul(att, hn) + hn;             // [N, T, F]
  Tensor logits = matmul(h2, w2) + b2;          // [N, T, C]
  Tensor loss = cross_entropy(logits, targets) + 0.01 * sum(mean(reshape(h2, {N * T, F}), {0}) * mean(h1, {0, 1}));
  backward(loss);

  StepResult r;
  r.loss = loss.item();
  for (const Tensor& p : params) r.grads.push_back(p.grad().to_vector<float>());
  return r;
}

bool same_step(const StepResult& a, const StepResult& b, std::string& where) {
  if (std::memcmp(&a.loss, &b.loss, sizeof(double)) != 0) {
    where = "loss";
    return false;
  }
  for (size_t i = 0; i < a.grads.size(); ++i) {
    if (a.grads[i].size() != b.grads[i].size()) {
      where = "size of gradient " + std::to_string(i);
      return false;
    }
    for (size_t j = 0; j < a.grads[i].size(); ++j)
      if (std::memcmp(&a.grads[i][j], &b.grads[i][j], sizeof(float)) != 0) {
        where = "gradient of parameter " + std::to_string(i) + " at element " + std::to_string(j) + ": " +
                std::to_string(a.grads[i][j]) + " vs " + std::to_string(b.grads[i][j]);
        return false;
      }
  }
  return true;
}

}  // namespace

TEST_CASE("a training step is bit-identical across runs and across thread counts (1 vs 2)") {
  test::ThreadScope restore;
  heed::set_num_threads(2);
  StepResult a = mlp_step();
  StepResult b = mlp_step();
  std::string where;
  INFO("run 1 vs run 2 (2 threads) first differ at " << where);
  CHECK(same_step(a, b, where));
  CHECK(std::isfinite(a.loss));
  CHECK(a.loss > 0);

  heed::set_num_threads(1);
  StepResult c = mlp_step();
  std::string where1;
  INFO("2 threads vs 1 thread first differ at " << where1);
  CHECK(same_step(a, c, where1));
}
