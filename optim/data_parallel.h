// optim/data_parallel.h: data-parallel training over MPI processes
// (core/dist.h). Every process holds the whole model and computes the
// gradient of its share of the global batch; DataParallel averages the
// gradients over processes, bucket by bucket, starting each bucket's exchange
// as soon as backward has finished its parameters (the last layers' first),
// so communication overlaps the rest of backward, as PyTorch's DDP does.
// The exchanges start in bucket order on every process: a bucket finished
// before an earlier one (whose parameter this process's rows did not use,
// say) waits for it.
// Sums are added in rank order: a job is bit-identical to itself on rerun.
//
//   optim::DataParallel ddp(model.named_parameters());
//   ddp.broadcast_parameters();          // rank 0's initial weights everywhere
//   ...
//   opt.zero_grad();
//   ddp.backward(loss_of_my_rows);       // gradients = mean over processes
//   opt.step();
//
// In one process (no mpirun) backward is plain heed::backward.
//
// While one lives, the default generator draws dropout's masks as rows of the
// global batch (Generator::set_batch_shard): each process gets its rows'
// masks of the one-process run. Several may live at once (one per model);
// when the last one goes, the generator's shard is what it was before the
// first. Dropout drawn from a generator of the
// program's own needs gen.set_batch_shard(dist::rank(), dist::size()).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "autograd/autograd.h"
#include "core/dist.h"

namespace heed::optim {

class DataParallel {
 public:
  explicit DataParallel(NamedParams params, int64_t bucket_bytes = int64_t{1} << 20);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  void broadcast_parameters();
  // backward(loss), then every parameter's gradient is the mean over
  // processes (a parameter that got no gradient counts as zeros). One that
  // got no gradient on any process keeps none (its gradient stays undefined,
  // as backward leaves it in one process, and an optimiser skips it).
  void backward(const Tensor& loss);
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // Seconds spent waiting for exchanges after backward ended (communication
  // not hidden behind computation), summed since construction.
  double exposed_seconds() const { return exposed_; }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    Tensor flat;                 // [values + params.size()], float32 or float64
    int64_t values = 0;          // the gradients' elements; then one used-flag per parameter
    int64_t ready = 0;
    dist::PendingSum sum;
  };
  void ready(const Tensor& leaf);
  void launch(Bucket& b);
  void launch_ready();
  NamedParams params_;
  std::vector<Bucket> buckets_;
  size_t next_ = 0;  // the next bucket to send: they go in index order on every process
  std::vector<int64_t> bucket_of_, offset_;  // per parameter
  std::vector<bool> seen_;
  std::unordered_map<const void*, size_t> index_;  // a parameter's TensorImpl -> its index
  double exposed_ = 0;
};

}  // namespace heed::optim
