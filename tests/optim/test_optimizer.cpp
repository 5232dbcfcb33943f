// tests/optim/test_optimizer.cpp: the Optimizer base: which parameters it
// accepts, step() and zero_grad(), and state dicts (keys, exact
// continuation after a restore, and refusal of mismatched state).
#include <functional>
#include <memory>
#include <string>

#include "quadratic.h"

using namespace heed;
namespace quad = heed::test::quad;
using namespace heed::optim;

namespace {

using StateDict = std::map<std::string, Tensor>;

Tensor leaf(const Shape& s, DType dtype = DType::f32) {
  Tensor t = Tensor::zeros(s, dtype);
  if (dtype != DType::i64) t.set_requires_grad(true);
  return t;
}

std::vector<std::vector<float>> values(const NamedParams& p) {
  std::vector<std::vector<float>> out;
  for (const auto& [_, t] : p) out.push_back(t.to_floats());
  return out;
}

// Every entry of a state dict as doubles (exact for float32 and the counts).
std::map<std::string, std::vector<double>> contents(const StateDict& sd) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [k, t] : sd) out[k] = t.to_vector<double>();
  return out;
}

NamedParams copy_params(const NamedParams& p) {
  NamedParams out;
  for (const auto& [n, t] : p) {
    Tensor c = kernel::clone(t);
    c.set_requires_grad(true);
    out.emplace_back(n, c);
  }
  return out;
}

using Factory = std::function<std::unique_ptr<Optimizer>(const NamedParams&)>;

const std::vector<std::pair<std::string, Factory>> kOptimisers{
    {"SGD nesterov", [](const NamedParams& p) {
       return std::make_unique<SGD>(p, SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0.01));
     }},
    {"SGD dampening", [](const NamedParams& p) {
       return std::make_unique<SGD>(p, SGDOptions(0.05).momentum(0.8).dampening(0.2));
     }},
    {"Adam", [](const NamedParams& p) { return std::make_unique<Adam>(p, AdamOptions().lr(0.02).weight_decay(0.1)); }},
    {"AdamW", [](const NamedParams& p) { return std::make_unique<AdamW>(p, AdamWOptions().lr(0.02)); }},
};

// One training iteration; the schedule sets the rate from the step count, so
// a restored optimiser continues the schedule. On odd steps b gets no
// gradient, so per-parameter step counts diverge from the global one.
void iterate(Optimizer& opt, const LRSchedule& schedule) {
  schedule.apply(opt);
  opt.zero_grad();
  const NamedParams& p = opt.params();
  if (opt.step_count() % 2 == 1) {
    backward(sum(p[0].second * p[0].second));
  } else {
    backward(quad::loss(p));
  }
  opt.step();
}

}  // namespace

TEST_CASE("optim: state_dict holds step, lr and named per-parameter state with exact dtypes") {
  NamedParams p = quad::make_params();
  Adam opt(p, AdamOptions().lr(0.01));
  quad::compute_grads(opt);
  opt.step();
  StateDict sd = opt.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, _] : sd) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"a/exp_avg", "a/exp_avg_sq", "a/step", "b/exp_avg", "b/exp_avg_sq", "b/step",
                                         "c/exp_avg", "c/exp_avg_sq", "c/step", "lr", "step"});
  CHECK(sd.at("step").dtype() == DType::i64);
  CHECK(sd.at("step").shape() == Shape{});
  CHECK(sd.at("step").item() == 1);
  CHECK(sd.at("lr").dtype() == DType::f64);
  CHECK(sd.at("lr").item() == 0.01);
  CHECK(sd.at("a/step").dtype() == DType::i64);
  CHECK(sd.at("c/step").item() == 0);
  CHECK(sd.at("b/exp_avg").shape() == Shape{2, 2});
  CHECK(sd.at("b/exp_avg").dtype() == DType::f32);
  // A snapshot: further steps do not change it.
  auto before = contents(sd);
  quad::compute_grads(opt);
  opt.step();
  CHECK(contents(sd) == before);
  CHECK(contents(opt.state_dict()) != before);
}

TEST_CASE("optim: restoring a state_dict then stepping is bit-identical to never having saved") {
  const int before_save = 5, after_save = 6;
  for (const auto& [name, make] : kOptimisers) {
    INFO("optimiser " << name);
    // A runs straight through.
    NamedParams pa = quad::make_params();
    auto a = make(pa);
    WarmupCosineLR sched(a->lr(), 3, 10, 0.1 * a->lr());
    for (int t = 0; t < before_save + after_save; ++t) iterate(*a, sched);

    // B stops, saves parameters and optimiser state; C, a new optimiser on new
    // parameters holding B's values, loads the state and carries on.
    NamedParams pb = quad::make_params();
    auto b = make(pb);
    for (int t = 0; t < before_save; ++t) iterate(*b, sched);
    StateDict sd = b->state_dict();
    NamedParams pc = copy_params(pb);
    auto c = make(pc);
    c->load_state_dict(sd);
    CHECK(c->step_count() == before_save);
    CHECK(c->lr() == b->lr());
    CHECK(contents(c->state_dict()) == contents(sd));
    for (int t = 0; t < after_save; ++t) iterate(*c, sched);

    CHECK(values(pc) == values(pa));
    CHECK(contents(c->state_dict()) == contents(a->state_dict()));
    CHECK(c->step_count() == a->step_count());
  }
}

TEST_CASE("optim: load_state_dict names the missing, unexpected or mismatched entry and changes nothing") {
  NamedParams p = quad::make_params();
  Adam opt(p, AdamOptions().lr(0.01));
  quad::compute_grads(opt);
  opt.step();
  opt.step();
  const StateDict good = opt.state_dict();
  const auto unchanged = contents(good);

  // Every entry altered (so a partial load would show), plus one fault.
  auto altered = [&] {
    StateDict sd;
    for (const auto& [k, t] : good) {
      Tensor c = kernel::clone(t);
      if (c.dtype() == DType::i64)
        c.data<int64_t>()[0] += 7;
      else
        kernel::fill_(c, 0.125);
      sd[k] = c;
    }
    return sd;
  };
  auto expect_refused = [&](const StateDict& sd, const std::vector<std::string>& fragments) {
    test::check_error([&] { opt.load_state_dict(sd); }, fragments);
    CHECK(contents(opt.state_dict()) == unchanged);
    CHECK(opt.lr() == 0.01);
    CHECK(opt.step_count() == 2);
  };

  SUBCASE("missing entry") {
    StateDict sd = altered();
    sd.erase("step");  // sorted last: everything before it was valid
    expect_refused(sd, {"Adam", "missing", "'step'"});
    sd = altered();
    sd.erase("b/exp_avg_sq");
    expect_refused(sd, {"missing", "'b/exp_avg_sq'", "[2, 2]"});
  }
  SUBCASE("unexpected entry") {
    StateDict sd = altered();
    sd["zz/exp_avg"] = Tensor::zeros({3});
    expect_refused(sd, {"unexpected", "'zz/exp_avg'", "[3]"});
    sd = altered();
    sd["a/momentum_buffer"] = Tensor::zeros({3});  // an SGD checkpoint's key
    expect_refused(sd, {"unexpected", "'a/momentum_buffer'"});
  }
  SUBCASE("wrong shape") {
    StateDict sd = altered();
    sd["b/exp_avg"] = Tensor::zeros({4});
    expect_refused(sd, {"'b/exp_avg'", "shape [4]", "expects [2, 2]"});
    sd = altered();
    sd["step"] = Tensor::zeros({1}, DType::i64);
    expect_refused(sd, {"'step'", "shape [1]", "expects []"});
  }
  SUBCASE("wrong dtype") {
    StateDict sd = altered();
    sd["lr"] = Tensor::scalar(0.5, DType::f32);
    expect_refused(sd, {"'lr'", "float32", "float64"});
    sd = altered();
    sd["a/exp_avg"] = Tensor::zeros({3}, DType::f64);
    expect_refused(sd, {"'a/exp_avg'", "float64", "float32"});
    sd = altered();
    sd["c/step"] = Tensor::zeros({}, DType::f32);
    expect_refused(sd, {"'c/step'", "float32", "int64"});
  }
  SUBCASE("undefined or invalid values") {
    StateDict sd = altered();
    sd["a/exp_avg"] = Tensor();
    expect_refused(sd, {"'a/exp_avg'", "undefined"});
    sd = altered();
    sd["a/step"] = Tensor::from_i64({-1}, {});
    expect_refused(sd, {"'a/step'", "-1"});
    sd = altered();
    sd["lr"] = Tensor::scalar(-0.5, DType::f64);
    expect_refused(sd, {"'lr'", "-0.5"});
  }
  SUBCASE("every fault in one message, not only the first") {
    StateDict sd = altered();
    sd.erase("a/exp_avg");
    sd.erase("c/exp_avg_sq");
    sd["zz/exp_avg"] = Tensor::zeros({3});
    sd["b/exp_avg"] = Tensor::zeros({4});
    expect_refused(sd, {"2 missing", "'a/exp_avg'", "'c/exp_avg_sq'", "1 unexpected", "'zz/exp_avg'",
                        "'b/exp_avg' has shape [4]"});
  }
  SUBCASE("another optimiser's state is said to be one") {
    StateDict sd;  // what an SGD with momentum over the same parameters writes
    for (const auto& [k, t] : good) {
      const size_t slash = k.find('/');
      if (slash == std::string::npos) sd[k] = kernel::clone(t);
      else if (k.substr(slash + 1) == "exp_avg") sd[k.substr(0, slash) + "/momentum_buffer"] = kernel::clone(t);
    }
    expect_refused(sd, {"missing", "unexpected", "'a/momentum_buffer'",
                        "the state keeps momentum_buffer per parameter where Adam keeps", "exp_avg, exp_avg_sq",
                        "another optimiser's"});
  }
  SUBCASE("the altered dict itself loads") {
    opt.load_state_dict(altered());
    CHECK(opt.step_count() == 9);
    CHECK(opt.lr() == 0.125);
    CHECK(opt.state("b", "exp_avg").to_floats() == std::vector<float>(4, 0.125f));
  }
}

TEST_CASE("optim: an optimiser refuses parameters it cannot update, naming them") {
  auto adam = [](NamedParams p) { Adam opt(std::move(p)); };
  test::check_error([&] { adam({}); }, {"Adam", "empty parameter list"});
  test::check_error([&] { adam({{"w", leaf({2})}, {"w", leaf({2})}}); }, {"'w'", "more than once"});
  Tensor shared = leaf({2});
  test::check_error([&] { adam({{"w", shared}, {"v", shared}}); }, {"'w'", "'v'", "same tensor"});
  test::check_error([&] { adam({{"x", leaf({2}) * 2.0}}); }, {"'x'", "not a leaf"});
  test::check_error([&] { adam({{"idx", Tensor::zeros({2}, DType::i64)}}); }, {"'idx'", "int64", "floating"});
  test::check_error([&] { adam({{"frozen", Tensor::zeros({2})}}); }, {"'frozen'", "does not require grad"});
  test::check_error([&] { adam({{"u", Tensor()}}); }, {"'u'", "undefined"});
  test::check_error([&] { adam({{"a/b", leaf({2})}}); }, {"'a/b'", "'/'"});
  test::check_error([&] { adam({{"", leaf({2})}}); }, {"invalid parameter name"});
  Tensor base = leaf({3, 2});
  Tensor transposed = Tensor::view_of(base, {2, 3}, {1, 2}, 0);
  transposed.set_requires_grad(true);
  test::check_error([&] { adam({{"t", transposed}}); }, {"'t'", "not contiguous"});
}

TEST_CASE("optim: step checks every gradient before changing any parameter") {
  NamedParams p = quad::make_params();
  SGD opt(p, SGDOptions(0.1));
  quad::compute_grads(opt);
  auto before = values(p);
  // b's gradient made non-contiguous: a (checked first) must not move either.
  Tensor g = kernel::clone(p[1].second.grad());
  p[1].second.set_grad(kernel::transpose(g, 0, 1));
  test::check_error([&] { opt.step(); }, {"SGD", "'b'", "not contiguous"});
  p[1].second.set_grad(Tensor::zeros({4}));
  test::check_error([&] { opt.step(); }, {"'b'", "shape [4]", "[2, 2]"});
  p[1].second.set_grad(Tensor::zeros({2, 2}, DType::f64));
  test::check_error([&] { opt.step(); }, {"'b'", "float64", "float32"});
  CHECK(values(p) == before);
  CHECK(opt.step_count() == 0);
  CHECK(opt.state("a", "step").item() == 0);
}

TEST_CASE("optim: step skips parameters without a gradient; zero_grad drops or zeroes gradients") {
  NamedParams p = quad::make_params();
  Adam opt(p, AdamOptions().lr(0.1));
  auto before = values(p);
  opt.step();  // no gradients at all: nothing moves, the count still advances
  CHECK(values(p) == before);
  CHECK(opt.step_count() == 1);
  quad::compute_grads(opt);
  CHECK(p[0].second.grad().defined());
  CHECK(!p[2].second.grad().defined());
  opt.step();
  quad::check_c_untouched(p);
  CHECK(opt.state("a", "step").item() == 1);
  CHECK(opt.state("c", "step").item() == 0);
  opt.zero_grad(false);
  CHECK(p[0].second.grad().to_floats() == std::vector<float>(3, 0.0f));
  CHECK(!p[2].second.grad().defined());
  opt.zero_grad();
  CHECK(!p[0].second.grad().defined());
  CHECK(!p[1].second.grad().defined());
}

TEST_CASE("optim: step records no graph and set_lr validates") {
  NamedParams p = quad::make_params();
  SGD opt(p, SGDOptions(0.1).momentum(0.9));
  quad::compute_grads(opt);
  opt.step();
  CHECK(p[0].second.is_leaf());
  CHECK(p[0].second.requires_grad());
  CHECK(autograd::is_grad_enabled());
  opt.set_lr(0.5);
  CHECK(opt.lr() == 0.5);
  test::check_error([&] { opt.set_lr(-1); }, {"SGD", "learning rate", "-1"});
  test::check_error([&] { opt.set_lr(std::nan("")); }, {"learning rate", "nan"});
  test::check_error([&] { (void)opt.state("a", "exp_avg"); }, {"'a'", "no state 'exp_avg'", "momentum_buffer"});
  test::check_error([&] { (void)opt.state("zz", "step"); }, {"no parameter named 'zz'"});
}
