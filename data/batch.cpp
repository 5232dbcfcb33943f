// data/batch.cpp: BatchSampler, gather_rows and slice_batch (see data/batch.h).
#include "data/batch.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/kernels.h"

namespace heed::data {

namespace {
constexpr size_t kStateSize = 8;
}  // namespace

BatchSampler::BatchSampler(int64_t n, const BatchSamplerOptions& opt) : n_(n), opt_(opt), gen_(opt.seed) {
  if (n < 1) fail("BatchSampler: expected n >= 1 samples, got {}", n);
  if (opt.batch_size < 1) fail("BatchSampler: expected batch_size >= 1, got {}", opt.batch_size);
  if (opt.drop_last && n < opt.batch_size)
    fail("BatchSampler: drop_last with n={} < batch_size={} leaves no batch in an epoch", n, opt.batch_size);
  start_epoch();
}

void BatchSampler::start_epoch() {
  epoch_offset_ = gen_.offset();
  order_.resize(static_cast<size_t>(n_));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (!opt_.shuffle) return;
  // Fisher-Yates (Durstenfeld's in-place form, Knuth TAOCP vol. 2, 3.4.2
  // algorithm P): n - 1 draws, one Generator block each, so epoch e's
  // permutation starts at offset e (n - 1).
  for (int64_t i = n_ - 1; i > 0; --i) std::swap(order_[i], order_[gen_.randint(0, i + 1)]);
}

int64_t BatchSampler::batches_per_epoch() const {
  const int64_t B = opt_.batch_size;
  return opt_.drop_last ? n_ / B : (n_ + B - 1) / B;
}

bool BatchSampler::next(std::vector<int64_t>& indices) {
  const int64_t remaining = n_ - position_;
  if (remaining == 0 || (opt_.drop_last && remaining < opt_.batch_size)) {
    indices.clear();
    ++epoch_;
    position_ = 0;
    start_epoch();
    return false;
  }
  const int64_t b = std::min(opt_.batch_size, remaining);
  indices.assign(order_.begin() + position_, order_.begin() + position_ + b);
  position_ += b;
  return true;
}

std::vector<int64_t> BatchSampler::next_batch() {
  std::vector<int64_t> indices;
  // Every epoch has a batch (the constructor makes sure), so the second call,
  // at the start of a fresh epoch, always succeeds.
  if (!next(indices)) (void)next(indices);
  return indices;
}

std::vector<int64_t> BatchSampler::state() const {
  // uint64 -> int64 is modular in C++20 and back again in set_state: bits survive.
  return {n_,
          opt_.batch_size,
          opt_.shuffle ? 1 : 0,
          opt_.drop_last ? 1 : 0,
          epoch_,
          position_,
          static_cast<int64_t>(gen_.seed()),
          static_cast<int64_t>(epoch_offset_)};
}

void BatchSampler::set_state(const std::vector<int64_t>& s) {
  if (s.size() != kStateSize)
    fail("BatchSampler::set_state: expected {} values {{n, batch_size, shuffle, drop_last, epoch, position, seed, "
         "offset}} as returned by state(), got {}",
         kStateSize, s.size());
  auto same = [&](const char* what, int64_t saved, int64_t mine) {
    if (saved != mine)
      fail("BatchSampler::set_state: the state is for {}={}, this sampler has {}={}", what, saved, what, mine);
  };
  same("n", s[0], n_);
  same("batch_size", s[1], opt_.batch_size);
  same("shuffle", s[2], opt_.shuffle ? 1 : 0);
  same("drop_last", s[3], opt_.drop_last ? 1 : 0);
  const int64_t epoch = s[4], position = s[5];
  if (epoch < 0) fail("BatchSampler::set_state: expected epoch >= 0, got {}", epoch);
  // next() only ever stops at multiples of B, or at n after a short last batch.
  if (position < 0 || position > n_ || (position % opt_.batch_size != 0 && position != n_))
    fail("BatchSampler::set_state: position {} is not a batch boundary for n={} batch_size={}", position, n_,
         opt_.batch_size);
  gen_.set_state({static_cast<uint64_t>(s[6]), static_cast<uint64_t>(s[7])});
  start_epoch();  // redraws the epoch's permutation from the saved generator state
  epoch_ = epoch;
  position_ = position;
}

Tensor BatchSampler::state_tensor() const {
  const std::vector<int64_t> s = state();
  return Tensor::from_i64(s, {static_cast<int64_t>(s.size())});
}

void BatchSampler::set_state_tensor(const Tensor& t) {
  check_defined(t, "BatchSampler::set_state_tensor");
  check_dtype(t, DType::i64, "BatchSampler::set_state_tensor");
  if (t.shape() != Shape{static_cast<int64_t>(kStateSize)})
    fail("BatchSampler::set_state_tensor: expected shape [{}] as returned by state_tensor(), got {}", kStateSize,
         shape_str(t.shape()));
  set_state(t.to_vector<int64_t>());
}

Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& idx) {
  check_defined(t, "gather_rows");
  if (t.dim() < 1) fail("gather_rows: expected a tensor with at least one dim, got shape {}", shape_str(t.shape()));
  for (size_t i = 0; i < idx.size(); ++i)
    if (idx[i] < 0 || idx[i] >= t.size(0))
      fail("gather_rows: index {} (at position {}) is out of range for {} rows (expected 0..{})", idx[i], i,
           t.size(0), t.size(0) - 1);
  return kernel::index_select(t, 0, Tensor::from_i64(idx, {static_cast<int64_t>(idx.size())}));
}

Tensor slice_batch(const Tensor& t, const std::vector<int64_t>& idx) {
  check_defined(t, "slice_batch");
  if (t.dim() < 1) fail("slice_batch: expected a tensor with at least one dim, got shape {}", shape_str(t.shape()));
  bool run = !idx.empty() && idx[0] >= 0 && idx.back() < t.size(0);
  for (size_t i = 1; run && i < idx.size(); ++i) run = idx[i] == idx[i - 1] + 1;
  if (run) return kernel::narrow(t, 0, idx[0], static_cast<int64_t>(idx.size()));
  return gather_rows(t, idx);
}

}  // namespace heed::data
