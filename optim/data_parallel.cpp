// optim/data_parallel.cpp
#include "optim/data_parallel.h"

#include <chrono>
#include <mutex>

#include "core/error.h"
#include "core/kernels.h"

namespace heed::optim {

namespace {
// The default generator's batch shard belongs to every DataParallel alive:
// the first one sets it, the last one to go puts back what was there before
// the first (destroying one of two models' DataParallel must not leave the
// other's dropout drawing the same masks on every process).
std::mutex shard_mutex;
int shard_holders = 0;
int shard_before_rank = 0, shard_before_processes = 1;
}  // namespace

DataParallel::DataParallel(NamedParams params, int64_t bucket_bytes) : params_(std::move(params)) {
  if (params_.empty()) fail("DataParallel: expected at least one parameter");
  if (bucket_bytes < 1) fail("DataParallel: expected bucket_bytes >= 1, got {}", bucket_bytes);
  bucket_of_.assign(params_.size(), -1);
  offset_.assign(params_.size(), 0);
  // Backward finishes the last parameters first: buckets are filled in
  // reverse registration order, each of one dtype.
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k].second;
    check_defined(p, "DataParallel");
    if (!p.is_floating()) fail("DataParallel: parameter '{}' is {}, expected floating", params_[k].first,
                               dtype_name(p.dtype()));
    const int64_t bytes = p.numel() * static_cast<int64_t>(p.dtype() == DType::f64 ? 8 : 4);
    if (buckets_.empty() || buckets_.back().flat.dtype() != p.dtype() ||
        buckets_.back().flat.numel() * (p.dtype() == DType::f64 ? 8 : 4) + bytes > bucket_bytes) {
      buckets_.emplace_back();
      buckets_.back().flat = Tensor::zeros({0}, p.dtype());
    }
    Bucket& b = buckets_.back();
    bucket_of_[k] = static_cast<int64_t>(buckets_.size() - 1);
    offset_[k] = b.flat.numel();
    b.params.push_back(k);
    b.flat = Tensor::zeros({b.flat.numel() + p.numel()}, p.dtype());
  }
  // After the gradients, one element per parameter: 1 where this process
  // has its gradient, else 0. Summed with them, it tells every process
  // whether any had one.
  for (Bucket& b : buckets_) {
    b.values = b.flat.numel();
    b.flat = Tensor::zeros({b.values + static_cast<int64_t>(b.params.size())}, b.flat.dtype());
  }
  seen_.assign(params_.size(), false);
  for (size_t k = 0; k < params_.size(); ++k)
    if (!index_.emplace(params_[k].second.impl(), k).second)
      fail("DataParallel: parameter '{}' is listed twice", params_[k].first);
  // Dropout draws each process's rows of the global batch's masks (core/random.h):
  // the same masks as one process, not one mask repeated on every process.
  const int rank = dist::rank(), processes = dist::size();
  std::lock_guard<std::mutex> lock(shard_mutex);
  Generator& g = default_generator();
  if (shard_holders == 0) {
    shard_before_rank = g.shard_rank();
    shard_before_processes = g.shard_processes();
  }
  g.set_batch_shard(rank, processes);
  ++shard_holders;
}

DataParallel::~DataParallel() {
  std::lock_guard<std::mutex> lock(shard_mutex);
  if (--shard_holders == 0) default_generator().set_batch_shard(shard_before_rank, shard_before_processes);
}

void DataParallel::broadcast_parameters() {
  autograd::NoGradGuard ng;
  // Every process must hold the same parameters for the broadcast to fit
  // (a model built from another corpus or other options would not).
  std::vector<std::string> described;
  for (const auto& [name, p] : params_)
    described.push_back(fmt::format("{} {} {}", name, shape_str(p.shape()), dtype_name(p.dtype())));
  const dist::Difference d = dist::first_difference(described);
  if (d.rank >= 0) {
    const size_t i = static_cast<size_t>(d.item);
    fail("DataParallel: the processes' models differ: rank {}'s parameter #{} is not rank 0's (rank {} has {}); "
         "every process must build the same model (the same command, on the same files)",
         d.rank, d.item, dist::rank(), i < described.size() ? "'" + described[i] + "'" : "no more parameters");
  }
  for (auto& [name, p] : params_) {
    Tensor c = kernel::contiguous(p);
    dist::broadcast_(c, 0);
    if (c.impl() != p.impl()) kernel::copy_(p, c);
  }
}

void DataParallel::launch(Bucket& b) {
  for (size_t j = 0; j < b.params.size(); ++j) {
    const Tensor& p = params_[b.params[j]].second;
    Tensor dst = kernel::narrow(b.flat, 0, offset_[b.params[j]], p.numel());
    const bool has = p.grad().defined();
    if (has) kernel::copy_(dst, kernel::reshape(p.grad(), {p.numel()}));
    else kernel::fill_(dst, 0.0);
    kernel::fill_(kernel::narrow(b.flat, 0, b.values + static_cast<int64_t>(j), 1), has ? 1.0 : 0.0);
  }
  b.sum.start(b.flat);
}

void DataParallel::launch_ready() {
  // In bucket order on every process: MPI pairs the processes' collectives
  // by their order, and a parameter used on one process only (a branch
  // taken by its rows alone) finishes its bucket there and not elsewhere.
  // A bucket finished early waits for the ones before it.
  while (next_ < buckets_.size() && buckets_[next_].ready == static_cast<int64_t>(buckets_[next_].params.size()))
    launch(buckets_[next_++]);
}

void DataParallel::ready(const Tensor& leaf) {
  auto it = index_.find(leaf.impl());
  if (it == index_.end() || seen_[it->second]) return;  // not one of ours
  seen_[it->second] = true;
  Bucket& b = buckets_[static_cast<size_t>(bucket_of_[it->second])];
  if (++b.ready == static_cast<int64_t>(b.params.size())) launch_ready();
}

void DataParallel::backward(const Tensor& loss) {
  if (dist::size() == 1) {
    heed::backward(loss);
    return;
  }
  for (auto& b : buckets_) b.ready = 0;
  next_ = 0;
  seen_.assign(params_.size(), false);
  {
    autograd::GradReadyHook hook([this](const Tensor& leaf) { ready(leaf); });
    heed::backward(loss);
  }
  const auto t0 = std::chrono::steady_clock::now();
  // The buckets not yet sent (with a parameter that got no gradient on this
  // process, or after one) go now, in order: every process takes part in
  // every exchange, in the same order.
  while (next_ < buckets_.size()) launch(buckets_[next_++]);
  autograd::NoGradGuard ng;
  const double inv = 1.0 / static_cast<double>(dist::size());
  for (auto& b : buckets_) {
    b.sum.wait();
    kernel::scale_(b.flat, inv);
    const std::vector<double> used =
        kernel::narrow(b.flat, 0, b.values, static_cast<int64_t>(b.params.size())).to_vector<double>();
    for (size_t j = 0; j < b.params.size(); ++j) {
      Tensor& p = params_[b.params[j]].second;
      // No gradient on any process: none here either, as in one process
      // (an optimiser skips the parameter: weight decay does not move it).
      if (!(used[j] > 0)) continue;
      Tensor mean = kernel::reshape(kernel::narrow(b.flat, 0, offset_[b.params[j]], p.numel()), p.shape());
      if (p.grad().defined()) kernel::copy_(p.grad(), mean);
      else p.set_grad(kernel::clone(mean));
    }
  }
  exposed_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace heed::optim
