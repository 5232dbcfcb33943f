// tests/autograd/test_in_place.cpp: the version counter. A tensor an op saved
// for its backward and then changed in place makes backward refuse the graph
// (PyTorch: "one of the variables needed for gradient computation has been
// modified by an inplace operation"), before any gradient changes; a change
// to a tensor no op saved does not.
#include <string>

#include "core/kernels.h"
#include "heed.h"
#include "test_util.h"

using namespace heed;

namespace {
// The message of the heed::Error f throws, or "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("in place: every in-place kernel and an optimiser step move the version") {
  Generator g(1);
  Tensor t = Tensor::zeros({2, 4});
  uint64_t v = t.version();
  auto moved = [&] {
    const bool m = t.version() > v;
    v = t.version();
    return m;
  };
  kernel::fill_(t, 1.0);
  CHECK(moved());
  kernel::copy_(t, Tensor::ones({4}));
  CHECK(moved());
  kernel::add_(t, Tensor::ones({2, 4}));
  CHECK(moved());
  kernel::mul_(t, Tensor::ones({2, 4}));
  CHECK(moved());
  kernel::scale_(t, 2.0);
  CHECK(moved());
  kernel::fwht_(t);
  CHECK(moved());
  kernel::normal_(t, 0.0, 1.0, g);
  CHECK(moved());
  kernel::uniform_(t, 0.0, 1.0, g);
  CHECK(moved());
  kernel::bernoulli_(t, 0.5, g);
  CHECK(moved());
  kernel::randint_(t, 0, 5, g);
  CHECK(moved());
  kernel::index_add_(t, 0, Tensor::from_i64({1}, {1}), Tensor::ones({1, 4}));
  CHECK(moved());
  // A view shares its storage's counter (as PyTorch's views share theirs).
  kernel::fill_(narrow(t, 0, 1, 1), 3.0);
  CHECK(moved());
  t.bump_version();
  CHECK(moved());
  // A refused change leaves the version as it was.
  CHECK_THROWS(kernel::add_(t, Tensor::ones({3})));
  CHECK_FALSE(moved());

  Tensor w = Tensor::ones({3}).set_requires_grad();
  optim::SGD opt({{"w", w}}, optim::SGDOptions(0.1));
  const uint64_t w0 = w.version();
  opt.step();  // no gradient: nothing changes
  CHECK(w.version() == w0);
  backward(sum(w * w));
  opt.step();
  CHECK(w.version() > w0);
}

TEST_CASE("in place: an optimiser step between a forward and its backward is refused, and nothing changes") {
  Tensor w = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad();
  Tensor b = Tensor::from({0.5f, -0.5f}, {2}).set_requires_grad();
  Tensor x = Tensor::from({1, -1, 2}, {1, 3});
  optim::SGD opt({{"w", w}, {"b", b}}, optim::SGDOptions(0.1));
  Tensor loss = sum(linear(x, w, b) * linear(x, w, b));
  backward(loss, Tensor(), /*retain_graph=*/true);
  const std::vector<float> gw = w.grad().to_floats(), gb = b.grad().to_floats();
  opt.step();  // changes w and b, which linear saved (w for dx; x's is not needed)
  const std::string e = error_of([&] { backward(loss); });
  CHECK(e.find("linear saved for its backward was changed in place") != std::string::npos);
  CHECK(e.find("shape [2, 3]") != std::string::npos);
  CHECK(e.find("optimiser step") != std::string::npos);
  // Refused before any gradient was summed into a leaf.
  CHECK(w.grad().to_floats() == gw);
  CHECK(b.grad().to_floats() == gb);
  // A new forward at the new weights runs.
  opt.zero_grad();
  backward(sum(linear(x, w, b) * linear(x, w, b)));
  CHECK(w.grad().defined());
}

TEST_CASE("in place: a change to a tensor no op saved is allowed, as in PyTorch") {
  // add saves neither operand: its gradient does not depend on them.
  Tensor a = Tensor::from({1, 2, 3}, {3}).set_requires_grad();
  Tensor c = Tensor::from({4, 5, 6}, {3});
  Tensor y = sum(add(a, c));
  kernel::fill_(c, 0.0);
  backward(y);
  CHECK(a.grad().to_floats() == std::vector<float>{1, 1, 1});
  // A tensor changed before the op that saves it: the op saved the new values.
  Tensor p = Tensor::from({1, 2, 3}, {3}).set_requires_grad();
  Tensor q = Tensor::from({1, 1, 1}, {3});
  kernel::fill_(q, 2.0);
  backward(sum(mul(p, q)));
  CHECK(p.grad().to_floats() == std::vector<float>{2, 2, 2});
}

TEST_CASE("in place: saved outputs, saved integer inputs and views of saved tensors") {
  SUBCASE("exp's output") {  // exp's backward is g * y
    Tensor a = Tensor::from({0, 1}, {2}).set_requires_grad();
    Tensor y = exp(a);
    Tensor l = sum(y);
    kernel::scale_(y, 2.0);
    const std::string e = error_of([&] { backward(l); });
    CHECK(e.find("exp saved") != std::string::npos);
    CHECK_FALSE(a.grad().defined());
  }
  SUBCASE("cross_entropy's targets") {
    Tensor logits = Tensor::from({1, 2, 3, 3, 2, 1}, {2, 3}).set_requires_grad();
    Tensor t = Tensor::from_i64({0, 2}, {2});
    Tensor l = cross_entropy(logits, t);
    kernel::fill_(t, 1.0);  // a batch buffer refilled before the backward
    CHECK(error_of([&] { backward(l); }).find("cross_entropy saved") != std::string::npos);
  }
  SUBCASE("an embedding's index") {
    Tensor table = Tensor::from({1, 2, 3, 4}, {2, 2}).set_requires_grad();
    Tensor idx = Tensor::from_i64({0, 1, 1}, {3});
    Tensor l = sum(index_select(table, 0, idx));
    kernel::fill_(idx, 0.0);
    CHECK(error_of([&] { backward(l); }).find("index_select saved") != std::string::npos);
  }
  SUBCASE("another view of the same storage") {  // PyTorch: views share one version counter
    Tensor base = Tensor::from({1, 2, 3, 4}, {4});
    Tensor a = Tensor::from({1, 1}, {2}).set_requires_grad();
    Tensor l = sum(mul(a, narrow(base, 0, 0, 2)));
    kernel::fill_(narrow(base, 0, 2, 2), 0.0);
    CHECK(error_of([&] { backward(l); }).find("mul saved") != std::string::npos);
  }
  SUBCASE("written through data() and marked with bump_version") {
    Tensor a = Tensor::from({1, 2}, {2}).set_requires_grad();
    Tensor c = Tensor::from({3, 4}, {2});
    Tensor l = sum(mul(a, c));
    c.data<float>()[0] = 5;
    c.bump_version();
    CHECK(error_of([&] { backward(l); }).find("mul saved") != std::string::npos);
  }
}

TEST_CASE("in place: an op that threw leaves nothing for the next op to check") {
  // linear's closure saves x before its kernel refuses the shapes; the next
  // op on x (add, which saves nothing) must not inherit that save.
  Tensor x = Tensor::from({1, 2, 3}, {1, 3}).set_requires_grad();
  Tensor w_bad = Tensor::ones({2, 4}).set_requires_grad();
  CHECK_THROWS_WITH_AS(linear(x, w_bad), doctest::Contains("linear"), Error);
  Tensor c = Tensor::ones({1, 3});
  Tensor y = sum(add(x, c));
  kernel::fill_(x, 0.0);  // x is no longer what add saw, but add saved nothing
  backward(y);
  CHECK(x.grad().to_floats() == std::vector<float>{1, 1, 1});
}

TEST_CASE("in place: a training loop (forward, backward, step) runs for many steps") {
  Generator g(3);
  nn::Linear lin(nn::LinearOptions(4, 2).generator(&g));
  optim::AdamW opt(lin.named_parameters(), optim::AdamWOptions().lr(0.01));
  Tensor x = randn({8, 4}, &g), t = Tensor::from_i64({0, 1, 0, 1, 1, 0, 0, 1}, {8});
  double first = 0, last = 0;
  for (int s = 0; s < 20; ++s) {
    opt.zero_grad();
    Tensor l = cross_entropy(lin.forward(x), t);
    backward(l);
    opt.step();
    (s == 0 ? first : last) = l.item();
  }
  CHECK(last < first);
}

TEST_CASE("in place: changing a clone of a saved tensor leaves the graph valid, and the clone passes gradients") {
  Tensor w = Tensor::from({1, 2, 3}, {3}).set_requires_grad();
  Tensor x = Tensor::from({4, 5, 6}, {3}).set_requires_grad();
  Tensor c = clone(x);
  CHECK_FALSE(c.same(x));
  Tensor loss = (w * x).sum() + (c * c).sum();  // mul saved x and c
  Tensor copy = clone(x);                       // a fresh copy: x's version is untouched
  copy.data<float>()[0] = 100;
  copy.bump_version();
  REQUIRE(error_of([&] { loss.backward(); }).empty());
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1 + 8, 2 + 10, 3 + 12});  // w + 2 c
  CHECK(x.to_vector<double>() == std::vector<double>{4, 5, 6});
}
