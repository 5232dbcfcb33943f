// core/random.h: heed's seeded, reproducible random numbers.
//
// The generator is counter-based: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11) turns a 128-bit
// counter and a 64-bit key into 128 random bits with no hidden state. A
// Generator is therefore just (seed, offset):
//
//   key     = the seed (64 bits, as two 32-bit words, low word first)
//   counter = {lo32(block), hi32(block), lane, 0}
//
// and the stream is block = offset, offset + 1, ... Every draw of a tensor
// fill or a scalar draw consumes whole blocks:
//
//   - a fill of n elements uses blocks offset .. offset + n - 1, one per
//     element in logical row-major order (element i <- block offset + i),
//     then advances offset by n;
//   - a scalar draw (next_u64, uniform, normal, randint) uses one block.
//
// Because element i's numbers depend only on (seed, offset + i), a fill can
// run on any number of threads and give bit-identical results. Each block's
// 128 bits are read as two 64-bit words w0 = c0 | c1 << 32, w1 = c2 | c3 << 32.
//
// randint rejects draws to stay unbiased (Lemire's multiply-shift method);
// on the rare rejection it continues with w1, then with the same block's
// later lanes (counter word 2 = 1, 2, ...), so a retry never steals numbers
// from another element and offset still advances by exactly one per element.
//
// A Generator is not thread-safe: share one across threads only with a lock.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace heed {

// One Philox4x32-10 block: 10 rounds, key bumped between rounds.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  // Restarts the stream: key = seed, offset = 0.
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  // Blocks consumed so far.
  uint64_t offset() const { return offset_; }

  // The exact state, {seed, offset}; set_state accepts only what state()
  // returns (two values) and throws otherwise.
  std::vector<uint64_t> state() const;
  void set_state(const std::vector<uint64_t>& s);
  // The same state as an int64 tensor of shape [2] (bits reinterpreted), so
  // checkpoints can store it next to the other tensors.
  Tensor state_tensor() const;
  void set_state_tensor(const Tensor& t);

  // ---- scalar draws (one block each) ----
  uint64_t next_u64();
  double uniform();  // [0, 1), 53 random bits
  double normal();   // standard normal, Box-Muller
  int64_t randint(int64_t lo, int64_t hi);  // [lo, hi), unbiased; needs lo < hi

  // Claims n blocks and returns the first: the fill then owns blocks
  // [first, first + n). Used by the tensor fills.
  uint64_t reserve(uint64_t n) {
    uint64_t first = offset_;
    offset_ += n;
    return first;
  }
  // Data-parallel training (optim::DataParallel): this process computes rows
  // [rank n/N, (rank + 1) n/N) of a global batch of n rows. A fill over its
  // share of a batch (dropout's masks: dim 0 is the batch) then claims the
  // blocks the same fill over the global batch would give those rows, and
  // the offset moves past the global fill: every process draws its rows'
  // masks of the one-process run, bit for bit, and the processes' states
  // stay equal. set_batch_shard(0, 1), the default, is one process.
  void set_batch_shard(int rank, int processes);
  int shard_rank() const { return shard_rank_; }
  int shard_processes() const { return shard_processes_; }
  // Claims a fill of n elements over this process's share of a batch (see
  // set_batch_shard; reserve(n) in one process) and returns its first block.
  uint64_t reserve_batch(uint64_t n) {
    const uint64_t first = offset_ + static_cast<uint64_t>(shard_rank_) * n;
    offset_ += static_cast<uint64_t>(shard_processes_) * n;
    return first;
  }
  // The 128 bits of block `index` in `lane` (see the header comment).
  std::array<uint32_t, 4> block(uint64_t index, uint32_t lane = 0) const;
  // The first 64 bits (w0 = word 0 | word 1 << 32) of lane 0 of blocks
  // first .. first + n - 1 into w0[0 .. n): block(first + j)'s, bit for bit,
  // computed kBatch blocks at a time, their rounds on vector lanes and
  // several vectors interleaved.
  static constexpr int kBatch = 32;
  void blocks_w0(uint64_t first, int n, uint64_t* w0) const;
  // A dropout mask drawn where it is used (fused attention): z[j] = kept
  // where element j of a bernoulli_(keep) fill whose first block is `first`
  // would be 1, else 0, for j in [0, n). The same draws, bit for bit, as
  // bernoulli_ (and so dropout) gives those elements.
  template <class T>
  void keep_mask(uint64_t first, int64_t n, double keep, T kept, T* z) const;

 private:
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
  int shard_rank_ = 0, shard_processes_ = 1;
};

// The process-wide generator, seeded with 0 at start-up so runs are
// reproducible by default. Not thread-safe (see Generator).
Generator& default_generator();
void manual_seed(uint64_t seed);

// Fresh contiguous tensors filled from g (the default generator when null).
Tensor randn(const Shape& shape, Generator* g = nullptr, DType dtype = DType::f32);  // N(0, 1)
Tensor rand(const Shape& shape, Generator* g = nullptr, DType dtype = DType::f32);   // U[0, 1)
Tensor randint(int64_t lo, int64_t hi, const Shape& shape, Generator* g = nullptr);  // i64 in [lo, hi)

}  // namespace heed
