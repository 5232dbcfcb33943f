// tests/optim/test_data_parallel.cpp: optim::DataParallel in a program that
// starts MPI nowhere itself. In the suite it runs as one process; the
// distributed test (tests/experiments/test_distributed_quick.py) runs this
// file's cases again under `mpirun -np 2`.
#include <cstdlib>
#include <memory>

#include "heed.h"
#include "test_util.h"

using namespace heed;

TEST_CASE("DataParallel: with no Run and no dist::init, a process of an mpirun job sees the job") {
  const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* rank_env = std::getenv("OMPI_COMM_WORLD_RANK");
  const int expected = launched && dist::built_with_mpi() ? std::max(1, std::atoi(launched)) : 1;
  // Each process draws its own initial weights (a generator seeded by its rank).
  Generator g(static_cast<uint64_t>(rank_env ? 1 + std::atoi(rank_env) : 1));
  nn::Linear model(nn::LinearOptions(3, 2).generator(&g));
  optim::DataParallel ddp(model.named_parameters());
  ddp.broadcast_parameters();  // the first dist call: it starts MPI under mpirun
  CHECK(dist::size() == expected);
  CHECK(dist::rank() == (expected > 1 && rank_env ? std::atoi(rank_env) : 0));
  // rank 0's weights everywhere; then one averaged step keeps them equal.
  for (const auto& [name, p] : model.named_parameters()) {
    CAPTURE(name);
    const std::vector<Tensor> all = dist::all_gather(p);
    REQUIRE(static_cast<int>(all.size()) == expected);
    for (const Tensor& t : all) CHECK(test::same_bits(t, all[0]));
  }
  Tensor x = randn({4, 3}, &g);  // a different batch on every process
  ddp.backward(sum(model.forward(x)));
  for (const auto& [name, p] : model.named_parameters()) {
    CAPTURE(name);
    const std::vector<Tensor> all = dist::all_gather(p.grad());
    for (const Tensor& t : all) CHECK(test::same_bits(t, all[0]));
  }
}

TEST_CASE("DataParallel: with no Run, several alive at once keep the batch shard until the last one goes") {
  // The suite runs this as one process and tests/experiments/test_distributed.py
  // under mpirun -np 2: the shard must be (rank, processes) of the job while
  // any DataParallel lives, whichever goes first.
  Generator& g = default_generator();
  g.set_batch_shard(1, 3);  // a program's own setting from before
  Generator init(7);
  nn::Linear m1(nn::LinearOptions(3, 2).generator(&init)), m2(nn::LinearOptions(2, 2).generator(&init));
  auto shard_is_the_jobs = [&] {
    CHECK(g.shard_rank() == dist::rank());
    CHECK(g.shard_processes() == dist::size());
  };
  {
    optim::DataParallel outer(m1.named_parameters());
    shard_is_the_jobs();
    { optim::DataParallel inner(m2.named_parameters()); }  // gone while `outer` lives
    shard_is_the_jobs();
  }
  CHECK(g.shard_rank() == 1);  // the last one gone: the program's setting again
  CHECK(g.shard_processes() == 3);
  // Not destroyed in the order made: the first made goes first.
  auto a = std::make_unique<optim::DataParallel>(m1.named_parameters());
  auto b = std::make_unique<optim::DataParallel>(m2.named_parameters());
  a.reset();
  shard_is_the_jobs();
  b.reset();
  CHECK(g.shard_rank() == 1);
  CHECK(g.shard_processes() == 3);
  g.set_batch_shard(0, 1);
}

namespace {
// y = a(x) + (use_b ? b(x) : 0), and a head c that no process uses.
struct Branchy {
  Generator g{11};
  nn::Linear a{nn::LinearOptions(4, 4).generator(&g)}, b{nn::LinearOptions(4, 4).generator(&g)},
      c{nn::LinearOptions(4, 4).generator(&g)};
  NamedParams params() {
    NamedParams all;
    const std::vector<std::pair<std::string, nn::Linear*>> layers{{"a.", &a}, {"b.", &b}, {"c.", &c}};
    for (const auto& [prefix, layer] : layers)
      for (auto& [name, p] : layer->named_parameters()) all.emplace_back(prefix + name, p);
    return all;
  }
  Tensor loss(const Tensor& x, bool use_b) {
    Tensor y = a.forward(x);
    if (use_b) y = y + b.forward(x);
    return sum(y * y);
  }
};
}  // namespace

TEST_CASE("DataParallel: with no Run, a parameter used on some processes only gets the mean over all") {
  // Under mpirun -np 2 (tests/experiments/test_distributed_quick.py) b is used by
  // rank 1's rows alone. Its buckets are finished during rank 1's backward
  // and after rank 0's: the exchanges must still pair bucket with bucket
  // (they paired b's with a's, equal in size: rank 1's gradients of a were
  // off by ~3, silently). One bucket per parameter, all of one size.
  Branchy m;
  const bool use_b = dist::rank() == 1;
  optim::DataParallel ddp(m.params(), /*bucket_bytes=*/1);
  ddp.broadcast_parameters();
  CHECK(ddp.buckets() == 6);
  Generator data(static_cast<uint64_t>(100 + dist::rank()));
  Tensor x = randn({3, 4}, &data);  // each process's own rows
  // Expected: each process's plain gradient (zeros where it has none), meaned.
  backward(m.loss(x, use_b));
  std::vector<Tensor> expected;
  for (auto& [name, p] : m.params()) {
    Tensor t = p.grad().defined() ? clone(p.grad()) : zeros_like(p);
    dist::sum_(t);
    expected.push_back(t * (1.0 / dist::size()));
    p.set_grad(Tensor());
  }
  ddp.backward(m.loss(x, use_b));
  size_t i = 0;
  for (auto& [name, p] : m.params()) {
    CAPTURE(name);
    CAPTURE(dist::rank());
    // c, used nowhere, has none (test below); b, used on rank 1, has the mean.
    const bool used_somewhere = name[0] == 'a' || (name[0] == 'b' && dist::size() > 1);
    REQUIRE(p.grad().defined() == used_somewhere);
    if (used_somewhere) CHECK(test::max_abs(p.grad() - expected[i]) < 1e-5);
    ++i;
  }
  // Every process holds the same gradients.
  for (auto& [name, p] : m.params())
    if (p.grad().defined())
      for (const Tensor& t : dist::all_gather(p.grad())) CHECK(test::same_bits(t, p.grad()));
}

TEST_CASE("DataParallel: with no Run, a parameter no process uses keeps no gradient, as in one process") {
  // N processes train as 1: AdamW's weight decay moved the unused head c
  // under mpirun (it got a gradient of zeros) and not in one process, where
  // it got none and the optimiser skipped it.
  Branchy m;
  optim::AdamW opt(m.params(), optim::AdamWOptions(1e-2).weight_decay(0.1));
  optim::DataParallel ddp(m.params());
  ddp.broadcast_parameters();
  const Tensor c0 = clone(m.c.weight), a0 = clone(m.a.weight);
  Generator data(static_cast<uint64_t>(200 + dist::rank()));
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    ddp.backward(m.loss(randn({2, 4}, &data), false));
    CHECK_FALSE(m.c.weight.grad().defined());
    CHECK_FALSE(m.b.bias.grad().defined());
    CHECK(m.a.weight.grad().defined());
    opt.step();
  }
  CHECK(test::same_bits(m.c.weight, c0));
  CHECK(test::max_abs(m.a.weight - a0) > 1e-3);  // the used layer did train
}
