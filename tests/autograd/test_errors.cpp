// tests/autograd/test_errors.cpp: bad input to the differentiable ops is
// reported with the op the user called, the values or shapes given, and what
// was expected. (Kernel-level messages: tests/core/test_errors.cpp.)
#include "test_util.h"

using namespace heed;
using test::check_error;

TEST_CASE("element-wise ops name themselves and both shapes") {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  a.set_requires_grad(true);
  check_error([&] { a + b; }, {"add", "[2, 3]", "[4, 5]"});
  check_error([&] { a - b; }, {"sub", "[2, 3]", "[4, 5]"});
  check_error([&] { a * b; }, {"mul", "[2, 3]", "[4, 5]"});
  check_error([&] { a / b; }, {"div", "[2, 3]", "[4, 5]"});
  check_error([&] { a + Tensor::zeros({2, 3}, DType::f64); }, {"add", "float32", "float64"});
}

TEST_CASE("matmul names both shapes and the inner dims, vectors included") {
  check_error([] { matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); }, {"matmul", "[2, 3]", "[4, 5]", "3 and 4"});
  check_error([] { matmul(Tensor::zeros({3}), Tensor::zeros({4, 5})); }, {"matmul", "[3]", "[4, 5]", "3 and 4"});
  check_error([] { matmul(Tensor::zeros({2, 3}), Tensor::zeros({4})); }, {"matmul", "[2, 3]", "[4]", "3 and 4"});
  check_error([] { matmul(Tensor::scalar(1.0), Tensor::zeros({1})); }, {"matmul", "rank", "[]"});
}

TEST_CASE("mse_loss refuses to broadcast and names both shapes") {
  check_error([] { mse_loss(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})); }, {"mse_loss", "[2, 3]", "[3, 2]"});
  check_error([] { mse_loss(Tensor::zeros({2, 3}), Tensor::zeros({3})); }, {"mse_loss", "[2, 3]", "[3]"});
}

TEST_CASE("mse_loss names itself and both dtypes when they differ") {
  // Once reported by the subtraction inside, as "sub".
  check_error([] { mse_loss(Tensor::zeros({3}), Tensor::zeros({3}, DType::f64)); },
              {"mse_loss", "input float32 [3]", "target float64 [3]", "dtype"});
  check_error([] { mse_loss(Tensor::zeros({2, 2}, DType::f64), Tensor::zeros({2, 2})); },
              {"mse_loss", "input float64 [2, 2]", "target float32 [2, 2]"});
}

TEST_CASE("cross_entropy: targets shape, dtype and range are checked against the logits") {
  Tensor logits = Tensor::zeros({2, 3, 5});
  check_error([&] { cross_entropy(logits, Tensor::zeros({2, 4}, DType::i64)); },
              {"cross_entropy", "[2, 4]", "[2, 3, 5]", "[2, 3]"});
  check_error([&] { cross_entropy(logits, Tensor::zeros({2, 3})); }, {"cross_entropy", "int64", "float32"});
  check_error([&] { cross_entropy(logits, Tensor::from_i64({0, 1, 2, 3, 4, 5}, {2, 3})); },
              {"cross_entropy", "target 5", "0..4"});
  check_error([&] { cross_entropy(Tensor::scalar(1.0), Tensor::zeros({}, DType::i64)); },
              {"cross_entropy", "[.., V]", "[]"});
}

TEST_CASE("cross_entropy: a vocabulary of size 0 is named as such, not by a reshape") {
  for (const Shape& s : {Shape{3, 0}, Shape{0, 0}, Shape{2, 3, 0}}) {
    INFO("logits " << shape_str(s));
    const Shape lead(s.begin(), s.end() - 1);
    check_error([&] { cross_entropy(Tensor::zeros(s), Tensor::zeros(lead, DType::i64)); },
                {"cross_entropy", shape_str(s), "V >= 1"});
  }
}

TEST_CASE("embedding names out-of-range ids with the table's size") {
  Tensor w = Tensor::zeros({4, 3});
  check_error([&] { embedding(w, Tensor::from_i64({1, 0, 4}, {1, 3})); }, {"embedding", "id 4", "0..3"});
  check_error([&] { embedding(w, Tensor::from_i64({-1}, {1})); }, {"embedding", "id -1", "0..3"});
  check_error([&] { embedding(w, Tensor::zeros({2})); }, {"embedding", "int64", "float32"});
  check_error([&] { embedding(Tensor::zeros({4}), Tensor::from_i64({0}, {1})); }, {"embedding", "[V, D]", "[4]"});
}

TEST_CASE("shape ops: index, dim and size errors name the op and the values") {
  Tensor t = Tensor::zeros({4, 2});
  check_error([&] { index_select(t, 0, Tensor::from_i64({7}, {1})); }, {"index_select", "index 7", "0..3"});
  check_error([&] { sum(t, {3}); }, {"sum", "dim 3", "-2..1"});
  check_error([&] { mean(t, {-3}); }, {"mean", "dim -3", "-2..1"});
  check_error([&] { softmax(t, 2); }, {"softmax", "dim 2", "-2..1"});
  check_error([&] { narrow(t, 0, 2, 3); }, {"narrow", "start 2", "length 3", "size 4"});
  check_error([&] { reshape(t, {3, 3}); }, {"reshape", "[3, 3]", "8 elements"});
  check_error([&] { view(transpose(t, 0, 1), {8}); }, {"view", "[2, 4]", "[8]"});
  check_error([&] { concat({t, Tensor::zeros({3, 3})}, 0); }, {"concat", "[3, 3]", "[4, 2]"});
  check_error([&] { split(t, std::vector<int64_t>{1, 2}, 0); }, {"split", "[1, 2]", "sum to 3", "4"});
  check_error([&] { split(t, 0, 0); }, {"split", "positive", "0"});
  check_error([&] { flatten(Tensor::zeros({2, 3, 4}), 2, 1); }, {"flatten", "start_dim 2", "end_dim 1"});
  check_error([&] { expand(t, {4, 3}); }, {"expand", "[4, 2]", "[4, 3]"});
  check_error([&] { permute(t, {0}); }, {"permute", "rank 2"});
}
