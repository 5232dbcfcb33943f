// core/dist.h: heed's processes for data-parallel training, on MPI (Open MPI).
// heed does no communication of its own: every exchange is an MPI collective.
//
// A program launched by mpirun (`mpirun -np 2 ./build/heed run charlm`) has
// several processes, each holding the whole model; without mpirun (or in a
// build without MPI) it is one process and every call here is trivial.
//
// Reductions are bit-reproducible: MPI_Allreduce promises no order of
// summation, so heed gathers every process's values (MPI_Allgather) and sums
// them in rank order on every process. Every rerun of an N-process job, and
// every process of it, gets the same bits. (The gather moves N x the bytes of
// the buffer into each process: the same traffic as a ring all-reduce at
// N = 2; docs/distributed.md has the model for larger N.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace heed::dist {

// Starts MPI when the process was started by mpirun (it sets
// OMPI_COMM_WORLD_SIZE), once; later calls do nothing. MPI is finalised at
// exit. Without mpirun, one process and no MPI at all. Every function below
// calls it first (so do heed::Run and optim::DataParallel through them): a
// program needs no call of its own, and none of them can see one process
// of a job as a job of one. Call it, if at all, after share_cores().
void init();
bool built_with_mpi();
int rank();   // 0 .. size() - 1
int size();   // 1 without mpirun
bool is_main();  // rank 0: writes logs and checkpoints, prints
// Whether this process has started MPI as one of a job of several (init()
// ran under mpirun with N > 1). Never starts it: a process of a command
// that uses no MPI (heed inspect under mpirun) must not wait in MPI's start
// for peers that never come.
bool in_job();

// Ends every process of the job at once with `status` (mpirun's own exit
// status), after printing "PROGRAM: rank R of N: why" (a process that fails
// must not leave the others waiting in a collective).
[[noreturn]] void abort_job(const std::string& why, int status = 1, const char* program = "heed");

// Every process's t, in rank order (t must have the same shape everywhere).
std::vector<Tensor> all_gather(const Tensor& t);
// t <- the sum over processes of t, added in rank order; float32 or float64.
void sum_(Tensor& t);
// The mean of a value over processes (rank-ordered sum / size()): e.g. the
// loss of a global batch from each process's share.
double mean(double value);
// This process's share of a global batch: rows [rank n/N, (rank + 1) n/N) of
// dim 0 (a view); n must be divisible by size() (else an error naming both).
Tensor shard(const Tensor& t);
// t <- rank root's t (same shape and dtype everywhere).
void broadcast_(Tensor& t, int root = 0);

// Where the processes of the job disagree (a collective): each describes
// what it holds as a list of items, in one order; compared by 64-bit hashes
// with rank 0's. The lowest rank that differs and the index of its first
// differing item (one past the shorter list when one list is longer), or
// rank -1 when every process agrees, as one process always does.
struct Difference {
  int rank = -1;
  int64_t item = -1;
};
Difference first_difference(const std::vector<std::string>& items);
// Every process's text, in rank order (a collective; any lengths).
std::vector<std::string> all_gather_text(const std::string& text);

// A sum in flight: started now (MPI_Iallgather), finished by wait(), which
// writes the rank-ordered sum into the tensor given to start.
class PendingSum {
 public:
  PendingSum();
  ~PendingSum();
  PendingSum(PendingSum&&) noexcept;
  PendingSum& operator=(PendingSum&&) noexcept;
  void start(const Tensor& t);  // contiguous float32 or float64; t must stay alive until wait()
  void wait();
  bool active() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace heed::dist
