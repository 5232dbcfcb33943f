// core/cpu_block_gemm.cpp: the float32 block GEMM of core/block_gemm.h (and
// heed's GEMM for whole products, core/cpu_sgemm_simd.inc, and fused
// attention's row kernels, core/attention_rows.h, built the same way), a
// register-tiled outer product (the BLIS micro-kernel shape without its
// packing: A is read an element at a time, in any layout, and B's rows are
// read as they lie). Written once (core/cpu_block_gemm_simd.inc) and
// compiled for AVX-512 and for AVX2 + FMA, chosen at run time by
// heed::cpu_isa(); built for baseline x86-64 like the Winograd convolution
// (CMakeLists.txt), so its AVX2 code is an AVX2 CPU's. Both widths run the
// same float32 operations per element: the same bits on either.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/allocator.h"
#include "core/attention_rows.h"
#include "core/block_gemm.h"
#include "core/runtime.h"
#include "core/simd_vec.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

namespace heed::kernel::block {

bool claim_tiles(std::atomic<uint64_t>& taken, int64_t tiles, int side, int64_t& lo, int64_t& hi) {
  uint64_t old = taken.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t top = int64_t(old & 0xffffffffu), bottom = int64_t(old >> 32), left = tiles - top - bottom;
    if (left <= 0) return false;
    // A first chunk of 3/8 of the tiles each, then a third of what is left:
    // about a dozen claims for a GPT layer's 128 tiles.
    const bool first = side == 0 ? top == 0 : bottom == 0;
    const int64_t take = std::min(left, std::max<int64_t>(1, first ? tiles * 3 / 8 : left / 3));
    const uint64_t next = side == 0 ? old + uint64_t(take) : old + (uint64_t(take) << 32);
    if (taken.compare_exchange_weak(old, next, std::memory_order_relaxed)) {
      lo = side == 0 ? top : tiles - bottom - take;
      hi = lo + take;
      return true;
    }
  }
}

namespace {

// Under AddressSanitizer, the register tiles of sgemm and of the block GEMM
// are checked a range at a time instead of a load at a time: before each
// tile, every row of A, B, C and the bias, addend and multiplier that the
// tile reads or writes, as its arguments give them; the tiles themselves
// (HEED_TILE, cpu_sgemm_simd.inc and cpu_block_gemm_simd.inc) are not
// instrumented. Checked per load, a tile ran ~50x slower than in the
// Release build, and the sanitized suite's training runs were its time
// (charlm under ASan: 57% of the run in sgemm's tile; the shapes CNN: 41% in
// the block GEMM's, which runs the Winograd convolutions). An out-of-range row is
// reported as ASan reports a bad load: the read below of its first poisoned
// address, from the tile's caller. (A tile computing the wrong element of a
// range is a wrong result, which the GEMM tests catch bit for bit.)
#ifdef __SANITIZE_ADDRESS__
#define HEED_TILE __attribute__((no_sanitize("address", "undefined")))
void check_range(const float* p, int64_t n) {
  if (n <= 0) return;
  if (void* bad = __asan_region_is_poisoned(const_cast<float*>(p), size_t(n) * sizeof(float)))
    (void)*static_cast<volatile const char*>(bad);
}
// Rows [0, rows) of `cols` floats, `ld` apart.
void check_rows(const float* p, int64_t rows, int64_t ld, int64_t cols) {
  if (p == nullptr) return;
  for (int64_t r = 0; r < rows; ++r) check_range(p + r * ld, cols);
}
// A's rows [0, mr) and inner indices [0, np): A(r, p) at a[r * ars + p * aps].
void check_a(const float* a, int64_t mr, int64_t np, int64_t ars, int64_t aps) {
  if (aps == 1) check_rows(a, mr, ars, np);
  else if (ars == 1) check_rows(a, np, aps, mr);
  else
    for (int64_t r = 0; r < mr; ++r) check_rows(a + r * ars, np, aps, 1);
}
#else
#define HEED_TILE
#endif

#ifdef HEED_SIMD_X86
struct Avx512 : simd::Avx512 {
  static constexpr int kNR = 4;                      // 64 columns
  static constexpr int kMaxMR[5] = {0, 16, 12, 8, 6};  // of 32 registers
  static constexpr bool kPackRows = false;           // sgemm: B's unit-stride rows read in place
};
struct Avx2 : simd::Avx2 {
  static constexpr int kNR = 2;               // 16 columns
  static constexpr int kMaxMR[3] = {0, 12, 6};  // of 16 registers
  static constexpr bool kPackRows = true;       // sgemm: B and a transposed A copied (kPackMin*)
};

namespace avx512 {
#define HEED_SIMD __attribute__((target("avx512f,fma")))
using Vec = Avx512;
#include "core/cpu_block_gemm_simd.inc"
#include "core/cpu_sgemm_simd.inc"
#include "core/cpu_attention_rows_simd.inc"
#undef HEED_SIMD
}  // namespace avx512

namespace avx2 {
#define HEED_SIMD __attribute__((target("avx2,fma")))
using Vec = Avx2;
#include "core/cpu_block_gemm_simd.inc"
#include "core/cpu_sgemm_simd.inc"
#include "core/cpu_attention_rows_simd.inc"
#undef HEED_SIMD
}  // namespace avx2
#endif

// dst[c * ld + r] = src[r * rs + c] for an 8 x 8 block.
__attribute__((target("avx2"))) void transpose8(const float* src, int64_t rs, float* dst, int64_t ld) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * rs);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  // Per 128-bit lane, t[2i] = (a0 b0 a1 b1), t[2i+1] = (a2 b2 a3 b3) of rows a, b = 2i, 2i+1.
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  // r[i] for i < 4 holds column i (and i + 4 in its upper lane) of rows 0-3; r[i + 4] of rows 4-7.
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

}  // namespace

void transpose(const float* src, int64_t rs, int64_t rows, int64_t cols, float* dst, int64_t ld) {
  const bool vec = heed::cpu_isa() != CpuIsa::baseline;
  const int64_t r8 = vec ? rows / 8 * 8 : 0, c8 = vec ? cols / 8 * 8 : 0;
  for (int64_t r = 0; r < r8; r += 8)
    for (int64_t c = 0; c < c8; c += 8) transpose8(src + r * rs + c, rs, dst + c * ld + r, ld);
  auto scalar = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t r = r0; r < r1; ++r) dst[c * ld + r] = src[r * rs + c];
  };
  scalar(0, r8, c8, cols);
  scalar(r8, rows, 0, cols);
}

GemmFn gemm_for(CpuIsa isa) {
#ifdef HEED_SIMD_X86
  if (static_cast<int>(isa) > static_cast<int>(heed::cpu_isa_max())) return nullptr;
  switch (isa) {
    case CpuIsa::avx512: return avx512::gemm;
    case CpuIsa::avx2: return avx2::gemm;
    case CpuIsa::baseline: break;
  }
#endif
  return nullptr;
}

SgemmFn sgemm_for(CpuIsa isa) {
#ifdef HEED_SIMD_X86
  if (static_cast<int>(isa) > static_cast<int>(heed::cpu_isa_max())) return nullptr;
  switch (isa) {
    case CpuIsa::avx512: return avx512::sgemm;
    case CpuIsa::avx2: return avx2::sgemm;
    case CpuIsa::baseline: break;
  }
#endif
  return nullptr;
}

bool sgemm_copies_transposed_a(CpuIsa isa) {
#ifdef HEED_SIMD_X86
  if (isa == CpuIsa::avx2) return Avx2::kPackRows;
  if (isa == CpuIsa::avx512) return Avx512::kPackRows;
#endif
  (void)isa;
  return false;
}

SgemmSharedFn sgemm_shared_for(CpuIsa isa) {
#ifdef HEED_SIMD_X86
  if (static_cast<int>(isa) > static_cast<int>(heed::cpu_isa_max())) return nullptr;
  switch (isa) {
    case CpuIsa::avx512: return avx512::sgemm_shared;
    case CpuIsa::avx2: return avx2::sgemm_shared;
    case CpuIsa::baseline: break;
  }
#endif
  return nullptr;
}

}  // namespace heed::kernel::block

namespace heed::kernel::rows {

const Kernels* kernels_for(CpuIsa isa) {
#ifdef HEED_SIMD_X86
  if (static_cast<int>(isa) > static_cast<int>(heed::cpu_isa_max())) return nullptr;
  switch (isa) {
    case CpuIsa::avx512: return &block::avx512::rows_impl::kKernels;
    case CpuIsa::avx2: return &block::avx2::rows_impl::kKernels;
    case CpuIsa::baseline: break;
  }
#endif
  return nullptr;
}

}  // namespace heed::kernel::rows
