// data/batch.h: mini-batches over a data set held in tensors.
//
// A BatchSampler hands out the sample indices of one batch at a time, epoch
// after epoch: in order (0..n-1, as the reference toy experiment trains) or
// shuffled by a Fisher-Yates permutation drawn afresh each epoch from the
// sampler's own seeded Generator. Its state (configuration, epoch, position
// and the generator state at the start of the epoch) is a short int64 vector,
// so a training run can save it with its checkpoint and continue with exactly
// the batches it would have seen.
//
//   BatchSampler sampler(train.size(), {.batch_size = 100});
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     std::vector<int64_t> idx;
//     while (sampler.next(idx)) {                // false once, at the end of each epoch
//       Tensor x = slice_batch(train_x, idx);  // [B, C, L]: a view for in-order batches
//       ...
//     }
//   }
//
// or, counting steps, `idx = sampler.next_batch()` batches_per_epoch() times
// per epoch (next_batch() rolls over to the next epoch by itself).
//
// Legend: n samples, B batch size.
#pragma once

#include <cstdint>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace heed::data {

// An aggregate: BatchSamplerOptions{.batch_size = 100, .shuffle = true, .seed = 1}.
struct BatchSamplerOptions {
  int64_t batch_size = 100;  // B
  bool shuffle = false;      // a fresh permutation every epoch (else 0..n-1 in order)
  bool drop_last = false;    // drop the last batch when it has fewer than B samples
  uint64_t seed = 0;         // seeds the sampler's own Generator (used only when shuffling)
};

class BatchSampler {
 public:
  // Throws unless n >= 1 and batch_size >= 1, and when drop_last would leave
  // an epoch without batches (n < batch_size).
  explicit BatchSampler(int64_t n, const BatchSamplerOptions& opt = {});

  // The next batch of the current epoch into indices (B values, or fewer for
  // a kept last batch) and true; or, once the epoch is exhausted, clears
  // indices, starts the next epoch (epoch() + 1, a fresh permutation when
  // shuffling) and returns false. So `while (sampler.next(idx))` is one epoch,
  // and an epoch takes batches_per_epoch() + 1 calls: a loop that counts
  // batches_per_epoch() steps must call next_batch() instead.
  [[nodiscard]] bool next(std::vector<int64_t>& indices);

  // The next batch, starting the next epoch first when the current one is
  // exhausted: never empty, and exactly batches_per_epoch() calls per epoch.
  //   for (int64_t b = 0; b < sampler.batches_per_epoch(); ++b) { idx = sampler.next_batch(); ... }
  std::vector<int64_t> next_batch();

  int64_t size() const { return n_; }                // n
  int64_t batch_size() const { return opt_.batch_size; }
  int64_t batches_per_epoch() const;                 // ceil(n / B), or floor with drop_last
  int64_t epoch() const { return epoch_; }           // 0-based index of the current epoch
  int64_t position() const { return position_; }     // samples served so far in this epoch
  const BatchSamplerOptions& options() const { return opt_; }
  // The current epoch's order of the n indices (0..n-1 when not shuffling).
  const std::vector<int64_t>& order() const { return order_; }

  // The exact state, {n, batch_size, shuffle, drop_last, epoch, position,
  // generator seed, generator offset at the start of the epoch} (the seed and
  // offset are uint64 bits stored as int64). set_state accepts a state from a
  // sampler with the same n, batch_size, shuffle and drop_last, and throws a
  // message naming the mismatch otherwise.
  std::vector<int64_t> state() const;
  void set_state(const std::vector<int64_t>& s);
  // The same as an i64 tensor of shape [8], to store next to a checkpoint's tensors.
  Tensor state_tensor() const;
  void set_state_tensor(const Tensor& t);

 private:
  void start_epoch();  // draws order_ for epoch_ from gen_ (when shuffling)

  int64_t n_;
  BatchSamplerOptions opt_;
  Generator gen_;
  uint64_t epoch_offset_ = 0;  // gen_.offset() when the current epoch's permutation was drawn
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> order_;  // [n]
};

// Rows idx of t along dim 0 (a fresh tensor [idx.size(), ...]); indices are
// bounds-checked with a message naming the bad one.
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& idx);

// Like gather_rows, but when idx is a run of consecutive rows (k, k+1, ...),
// as in-order batches are, returns narrow(t, 0, k, size): a view sharing t's
// storage, with no copy. Writing into the result may then write into t.
Tensor slice_batch(const Tensor& t, const std::vector<int64_t>& idx);

}  // namespace heed::data
