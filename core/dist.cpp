// core/dist.cpp
#include "core/dist.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/kernels.h"

#ifdef HEED_WITH_MPI
// The C API only: Open MPI's header would pull in its deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace heed::dist {

namespace {
int g_rank = 0, g_size = 1;
bool g_started = false;

#ifdef HEED_WITH_MPI
void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  abort_job(fmt::format("MPI {} failed: {}", what, std::string(msg, static_cast<size_t>(len))));
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
    default: fail("dist: expected a float32, float64 or int64 tensor, got {}", dtype_name(d));
  }
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
#endif

// The rank-ordered sum of `n` elements from each of size() blocks in `all`.
template <class T>
void sum_blocks(const T* all, T* out, int64_t n, int parts) {
  for (int64_t i = 0; i < n; ++i) {
    T s = all[i];
    for (int r = 1; r < parts; ++r) s += all[static_cast<int64_t>(r) * n + i];
    out[i] = s;
  }
}

void check_sum_tensor(const Tensor& t, const char* what) {
  check_defined(t, what);
  if (!t.is_contiguous()) fail("{}: expected a contiguous tensor, got shape {} with strides {}", what,
                               shape_str(t.shape()), shape_str(t.strides()));
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    fail("{}: expected float32 or float64, got {}", what, dtype_name(t.dtype()));
}
}  // namespace

bool built_with_mpi() {
#ifdef HEED_WITH_MPI
  return true;
#else
  return false;
#endif
}

void init() {
  if (g_started) return;
  g_started = true;
  const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!launched || std::atoi(launched) <= 1) return;
#ifdef HEED_WITH_MPI
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  // A failed call returns its error to check_mpi, which names the call and
  // ends the job with heed's message, not Open MPI's fatal handler.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit(finalize_at_exit);
#else
  fail("this heed was built without MPI, but was started by mpirun with {} processes (install libopenmpi-dev "
       "and rebuild: ./heed build)",
       launched);
#endif
}

int rank() {
  init();
  return g_rank;
}
int size() {
  init();
  return g_size;
}
bool is_main() { return rank() == 0; }
bool in_job() { return g_started && g_size > 1; }

void abort_job(const std::string& why, int status, const char* program) {
  std::fprintf(stderr, "%s: rank %d of %d: %s\n", program, g_rank, g_size, why.c_str());
  std::fflush(stderr);
#ifdef HEED_WITH_MPI
  if (g_size > 1) MPI_Abort(MPI_COMM_WORLD, status);
#endif
  std::exit(status);
}

Difference first_difference(const std::vector<std::string>& items) {
  init();
  if (g_size == 1) return {};
  std::vector<int64_t> hashes;
  for (const std::string& item : items) {
    uint64_t h = 14695981039346656037ull;  // FNV-1a
    for (unsigned char c : item) h = (h ^ c) * 1099511628211ull;
    hashes.push_back(static_cast<int64_t>(h));
  }
  const int64_t n = static_cast<int64_t>(hashes.size());
  const std::vector<Tensor> counts = all_gather(Tensor::from_i64({n}, {1}));
  int64_t common = n;
  for (const Tensor& c : counts) common = std::min(common, c.to_vector<int64_t>()[0]);
  // The first `common` items of every process (a shape all share).
  hashes.resize(static_cast<size_t>(common));
  const std::vector<Tensor> all =
      common > 0 ? all_gather(Tensor::from_i64(hashes, {common})) : std::vector<Tensor>(counts.size());
  const std::vector<int64_t> first = common > 0 ? all[0].to_vector<int64_t>() : std::vector<int64_t>();
  const int64_t n0 = counts[0].to_vector<int64_t>()[0];
  for (int r = 1; r < g_size; ++r) {
    if (common > 0) {
      const std::vector<int64_t> mine = all[static_cast<size_t>(r)].to_vector<int64_t>();
      for (int64_t i = 0; i < common; ++i)
        if (mine[static_cast<size_t>(i)] != first[static_cast<size_t>(i)]) return {r, i};
    }
    if (counts[static_cast<size_t>(r)].to_vector<int64_t>()[0] != n0) return {r, common};
  }
  return {};
}

std::vector<Tensor> all_gather(const Tensor& t) {
  init();
  check_defined(t, "dist::all_gather");
  Tensor c = kernel::contiguous(t);
  if (g_size == 1) return {kernel::clone(c)};
  std::vector<Tensor> out;
#ifdef HEED_WITH_MPI
  Shape s = c.shape();
  s.insert(s.begin(), g_size);
  Tensor all = Tensor::empty(s, c.dtype());
  check_mpi(MPI_Allgather(c.raw_data(), static_cast<int>(c.numel()), mpi_type(c.dtype()), all.raw_data(),
                          static_cast<int>(c.numel()), mpi_type(c.dtype()), MPI_COMM_WORLD),
            "all-gather");
  for (int r = 0; r < g_size; ++r) out.push_back(kernel::contiguous(kernel::reshape(kernel::narrow(all, 0, r, 1), c.shape())));
#endif
  return out;
}

std::vector<std::string> all_gather_text(const std::string& text) {
  const std::vector<Tensor> lengths = all_gather(Tensor::from_i64({static_cast<int64_t>(text.size())}, {1}));
  int64_t longest = 0;
  for (const Tensor& l : lengths) longest = std::max(longest, l.to_vector<int64_t>()[0]);
  Tensor mine = Tensor::zeros({(longest + 7) / 8 + 1}, DType::i64);  // the bytes, in whole int64s
  std::memcpy(mine.raw_data(), text.data(), text.size());
  const std::vector<Tensor> all = all_gather(mine);
  std::vector<std::string> out;
  for (size_t r = 0; r < all.size(); ++r)
    out.emplace_back(static_cast<const char*>(all[r].raw_data()), static_cast<size_t>(lengths[r].to_vector<int64_t>()[0]));
  return out;
}

void sum_(Tensor& t) {
  PendingSum p;
  p.start(t);
  p.wait();
}

double mean(double value) {
  init();
  if (g_size == 1) return value;
  Tensor t = Tensor::scalar(value, DType::f64);
  sum_(t);
  return t.item() / static_cast<double>(g_size);
}

Tensor shard(const Tensor& t) {
  init();
  check_defined(t, "dist::shard");
  if (g_size == 1) return t;
  if (t.dim() < 1 || t.size(0) % g_size != 0)
    fail("dist::shard: a batch of shape {} does not split evenly over {} processes", shape_str(t.shape()), g_size);
  const int64_t rows = t.size(0) / g_size;
  return kernel::narrow(t, 0, g_rank * rows, rows);
}

void broadcast_(Tensor& t, int root) {
  init();
  check_defined(t, "dist::broadcast_");
  if (g_size == 1) return;
  if (!t.is_contiguous()) fail("dist::broadcast_: expected a contiguous tensor, got shape {}", shape_str(t.shape()));
  t.bump_version();
#ifdef HEED_WITH_MPI
  check_mpi(MPI_Bcast(t.raw_data(), static_cast<int>(t.numel()), mpi_type(t.dtype()), root, MPI_COMM_WORLD),
            "broadcast");
#else
  (void)root;
#endif
}

struct PendingSum::Impl {
  Tensor target, all;
#ifdef HEED_WITH_MPI
  MPI_Request req = MPI_REQUEST_NULL;
#endif
  bool active = false;
};

PendingSum::PendingSum() : impl_(std::make_unique<Impl>()) {}
PendingSum::~PendingSum() {
  if (impl_ && impl_->active) wait();
}
PendingSum::PendingSum(PendingSum&&) noexcept = default;
PendingSum& PendingSum::operator=(PendingSum&&) noexcept = default;
bool PendingSum::active() const { return impl_->active; }

void PendingSum::start(const Tensor& t) {
  init();
  check_sum_tensor(t, "dist::PendingSum::start");
  if (impl_->active) fail("dist::PendingSum::start: a sum is already in flight");
  impl_->target = t;
  impl_->active = true;
  if (g_size == 1) return;
#ifdef HEED_WITH_MPI
  impl_->all = Tensor::empty({g_size, t.numel()}, t.dtype());
  check_mpi(MPI_Iallgather(t.raw_data(), static_cast<int>(t.numel()), mpi_type(t.dtype()), impl_->all.raw_data(),
                           static_cast<int>(t.numel()), mpi_type(t.dtype()), MPI_COMM_WORLD, &impl_->req),
            "all-gather");
#endif
}

void PendingSum::wait() {
  if (!impl_->active) return;
  impl_->active = false;
  if (g_size == 1) return;
#ifdef HEED_WITH_MPI
  check_mpi(MPI_Wait(&impl_->req, MPI_STATUS_IGNORE), "wait");
  Tensor& t = impl_->target;
  t.bump_version();
  if (t.dtype() == DType::f32) sum_blocks(impl_->all.data<float>(), t.data<float>(), t.numel(), g_size);
  else sum_blocks(impl_->all.data<double>(), t.data<double>(), t.numel(), g_size);
  impl_->all = Tensor();
#endif
}

}  // namespace heed::dist
