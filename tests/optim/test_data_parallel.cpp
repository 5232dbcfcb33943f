// tests/optim/test_data_parallel.cpp: optim::DataParallel in a program that
// starts MPI nowhere itself. In the suite it runs as one process; the
// distributed test (tests/experiments/test_distributed.py) runs this file's
// case again under `mpirun -np 2`.
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
