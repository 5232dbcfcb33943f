// tests/core/test_errors.cpp: what the kernels say about bad input. Every
// message names the op, what was given (values, shapes, dtypes) and what was
// expected; these tests pin the fragments a user needs to act on.
#include "test_util.h"

using namespace heed;
namespace k = heed::kernel;
using test::check_error;

TEST_CASE("a shape mismatch names the op and both shapes") {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  check_error([&] { k::binary(k::Binary::add, a, b); }, {"add", "[2, 3]", "[4, 5]", "broadcast"});
  check_error([&] { k::binary(k::Binary::mul, a, Tensor::zeros({2})); }, {"mul", "[2, 3]", "[2]"});
  check_error([&] { k::add_(Tensor::zeros({3}), a); }, {"add_", "[2, 3]", "[3]"});
  check_error([&] { k::copy_(Tensor::zeros({3}), a); }, {"copy_", "[3]", "[2, 3]"});
  check_error([&] { k::where(Tensor::zeros({2}), a, a); }, {"where", "[2]", "[2, 3]"});
  check_error([&] { k::expand(a, {3, 4}); }, {"expand", "[2, 3]", "[3, 4]"});
}

TEST_CASE("matmul: inner and batch dim mismatches name both shapes") {
  check_error([] { k::matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); },
              {"matmul", "[2, 3]", "[4, 5]", "inner dims 3 and 4"});
  check_error([] { k::matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})); },
              {"matmul", "[2, 3, 4]", "[3, 4, 5]"});
  check_error([] { k::matmul(Tensor::zeros({3}), Tensor::zeros({3, 2})); }, {"matmul", "[3]", "rank"});
}

TEST_CASE("concat: a mismatched tensor is named with its shape and the dim that differs") {
  Tensor a = Tensor::zeros({3, 2}), b = Tensor::zeros({2, 4});
  check_error([&] { k::concat({a, b}, 1); }, {"concat", "tensor 1", "[2, 4]", "[3, 2]", "dim 0"});
  check_error([&] { k::concat({a, Tensor::zeros({3})}, 0); }, {"concat", "tensor 1", "[3]", "rank 2"});
  check_error([&] { k::concat({}, 0); }, {"concat", "at least one"});
  // Same shapes, another dtype: it said "expected rank 1 (float32)".
  check_error([&] { k::concat({Tensor::zeros({2}), Tensor::zeros({2}, DType::f64)}, 0); },
              {"concat: tensor 1 is float64, expected float32 like tensor 0"});
}

TEST_CASE("a dim out of range names the value and the valid range") {
  Tensor t = Tensor::zeros({2, 3});
  check_error([&] { k::sum(t, {3}); }, {"sum", "dim 3", "rank 2", "-2..1"});
  check_error([&] { k::amax(t, {-3}); }, {"max", "dim -3", "-2..1"});
  check_error([&] { k::mean(t, {2}); }, {"mean", "dim 2", "-2..1"});
  check_error([&] { k::softmax(t, 2); }, {"softmax", "dim 2", "-2..1"});
  check_error([&] { k::log_softmax(t, -5); }, {"log_softmax", "dim -5", "-2..1"});
  check_error([&] { k::transpose(t, 0, 2); }, {"transpose", "dim 2", "-2..1"});
  check_error([&] { k::narrow(t, 2, 0, 1); }, {"narrow", "dim 2", "-2..1"});
  check_error([&] { k::unsqueeze(t, 3); }, {"unsqueeze", "dim 3", "-3..2"});
  check_error([&] { k::squeeze(t, 2); }, {"squeeze", "dim 2", "-2..1"});
  check_error([&] { k::argmax(t, 2); }, {"argmax", "dim 2", "-2..1"});
  check_error([&] { k::index_select(t, 2, Tensor::from_i64({0}, {1})); }, {"index_select", "dim 2", "-2..1"});
  check_error([&] { k::concat({t, t}, 2); }, {"concat", "dim 2", "-2..1"});
  check_error([&] { k::permute(t, {0, 2}); }, {"permute", "dim 2", "-2..1"});
  check_error([&] { t.size(5); }, {"size", "dim 5", "-2..1"});
}

TEST_CASE("an index out of range names the value, its position and the valid range") {
  Tensor t = Tensor::zeros({3, 4});
  check_error([&] { k::index_select(t, 0, Tensor::from_i64({0, 7}, {2})); },
              {"index_select", "index 7", "position 1", "0..2"});
  check_error([&] { k::index_select(t, 1, Tensor::from_i64({-1}, {1})); }, {"index_select", "index -1", "0..3"});
  check_error([&] { k::index_add_(t, 0, Tensor::from_i64({3}, {1}), Tensor::zeros({1, 4})); },
              {"index_add_", "index 3", "0..2"});
  check_error([&] { k::index_select(t, 0, Tensor::from_i64({0, 1}, {1, 2})); }, {"index_select", "1-D", "[1, 2]"});
  check_error([&] { k::index_add_(t, 0, Tensor::from_i64({0}, {1}), Tensor::zeros({2, 4})); },
              {"index_add_", "[2, 4]", "[1, 4]"});
}

TEST_CASE("cross_entropy kernel: a target out of range or a targets shape mismatch is named") {
  Tensor logits = Tensor::zeros({2, 5});
  check_error([&] { k::cross_entropy(logits, Tensor::from_i64({1, 9}, {2}), -100); },
              {"cross_entropy", "target 9", "row 1", "0..4", "-100"});
  check_error([&] { k::cross_entropy(logits, Tensor::from_i64({-5, 0}, {2}), -100); },
              {"cross_entropy", "target -5", "row 0", "0..4"});
  check_error([&] { k::cross_entropy(logits, Tensor::from_i64({1, 2, 3}, {3}), -100); },
              {"cross_entropy", "[3]", "[2, 5]", "[2]"});
  check_error([&] { k::cross_entropy(Tensor::zeros({5}), Tensor::from_i64({1}, {1}), -100); },
              {"cross_entropy", "[R, V]", "[5]"});
}

TEST_CASE("narrow out of range names start, length and the dim's size") {
  Tensor t = Tensor::zeros({5, 4});
  check_error([&] { k::narrow(t, 0, 3, 4); }, {"narrow", "start 3", "length 4", "size 5"});
  check_error([&] { k::narrow(t, 1, 0, -1); }, {"narrow", "length -1", "size 4"});
  // A negative start counts from the end; the message shows the start as given.
  check_error([&] { k::narrow(t, 0, -7, 2); }, {"narrow", "start -7", "size 5"});
}

TEST_CASE("reshape and view to an incompatible shape name the shape and the element count") {
  Tensor t = Tensor::zeros({2, 3});
  check_error([&] { k::reshape(t, {4, 2}); }, {"reshape", "[4, 2]", "6 elements"});
  check_error([&] { k::reshape(t, {4, -1}); }, {"reshape", "[4, -1]", "6 elements"});
  check_error([&] { k::reshape(t, {-1, -1}); }, {"reshape", "only one", "-1"});
  check_error([&] { k::reshape(t, {-2, 3}); }, {"reshape", "-2", "[-2, 3]"});
  check_error([&] { k::view(t, {7}); }, {"view", "[7]", "6 elements"});
}

TEST_CASE("a dtype mismatch names the op and both dtypes") {
  Tensor f = Tensor::zeros({2}), d = Tensor::zeros({2}, DType::f64);
  check_error([&] { k::binary(k::Binary::add, f, d); }, {"add", "dtype", "float32", "float64"});
  check_error([&] { k::matmul(Tensor::zeros({2, 2}), Tensor::zeros({2, 2}, DType::f64)); },
              {"matmul", "float32", "float64"});
  check_error([&] { f.data<double>(); }, {"expected dtype float64", "got float32"});
  check_error([&] { k::index_select(f, 0, Tensor::zeros({1})); }, {"index_select", "int64", "float32"});
  check_error([&] { k::cross_entropy(Tensor::zeros({2, 3}), Tensor::zeros({2}), -100); },
              {"cross_entropy", "int64", "float32"});
  check_error([&] { k::matmul(Tensor::zeros({2, 2}, DType::i64), Tensor::zeros({2, 2}, DType::i64)); },
              {"matmul", "floating", "int64"});
  check_error([&] { k::softmax(Tensor::zeros({2}, DType::i64), 0); }, {"softmax", "floating", "int64"});
}

TEST_CASE("an undefined tensor is named with the op that received it") {
  check_error([] { k::binary(k::Binary::add, Tensor(), Tensor::zeros({1})); }, {"add", "undefined"});
  check_error([] { k::sum(Tensor(), {}); }, {"sum", "undefined"});
  check_error([] { k::matmul(Tensor::zeros({1, 1}), Tensor()); }, {"matmul", "undefined"});
  // The usual way to meet one: reading a gradient before any backward.
  check_error([] { (void)Tensor::ones({3}).set_requires_grad().grad().to_floats(); },
              {"undefined", "grad() of a tensor no backward has reached"});
}

TEST_CASE("an undefined tensor's accessors throw naming the accessor, not crash") {
  Tensor u;  // as a parameter's grad() before any backward
  CHECK_FALSE(nn::Linear(3, 2).weight.grad().defined());
  const std::vector<std::pair<const char*, std::function<void()>>> uses = {
      {"Tensor::shape", [&] { (void)u.shape(); }},
      {"Tensor::strides", [&] { (void)u.strides(); }},
      {"Tensor::offset", [&] { (void)u.offset(); }},
      {"Tensor::dim", [&] { (void)u.dim(); }},
      {"Tensor::numel", [&] { (void)u.numel(); }},
      {"Tensor::dtype", [&] { (void)u.dtype(); }},
      {"Tensor::is_floating", [&] { (void)u.is_floating(); }},
      {"Tensor::is_contiguous", [&] { (void)u.is_contiguous(); }},
      {"Tensor::raw_data", [&] { (void)u.raw_data(); }},
      {"Tensor::version", [&] { (void)u.version(); }},
      {"Tensor::bump_version", [&] { u.bump_version(); }},
      {"Tensor::requires_grad", [&] { (void)u.requires_grad(); }},
      {"Tensor::grad", [&] { (void)u.grad(); }},
      {"Tensor::set_grad", [&] { u.set_grad(Tensor::zeros({1})); }},
      {"Tensor::zero_grad", [&] { u.zero_grad(); }},
      {"Tensor::grad_fn", [&] { (void)u.grad_fn(); }},
      {"Tensor::is_leaf", [&] { (void)u.is_leaf(); }},
      {"Tensor::shape", [] { (void)nn::Linear(3, 2).weight.grad().shape(); }},
  };
  for (const auto& [name, f] : uses) {
    INFO(name);
    check_error(f, {name, "undefined"});
  }
  check_error([&] { (void)u.size(0); }, {"size", "undefined"});
  check_error([&] { (void)u.item(); }, {"undefined"});
}
