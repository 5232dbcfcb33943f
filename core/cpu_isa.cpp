// core/cpu_isa.cpp: which instruction set heed's own vector kernels run
// (CpuIsa: the best the CPU has, capped by HEED_CPU_ISA or set_cpu_isa) and
// the cap heed puts on oneDNN's dispatcher to match.
//
// oneDNN 2.6 reads its cap (dnnl::set_max_cpu_isa, or ONEDNN_MAX_CPU_ISA)
// once, at its first dispatch: its first primitive or a
// dnnl::get_effective_cpu_isa() query. A later set_max_cpu_isa still
// returns success but changes nothing, so set_cpu_isa asks oneDNN which ISA
// it runs after setting the cap, and refuses when that is not the one asked
// for.
#include <dnnl.hpp>

#include <atomic>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"

namespace heed::kernel {
namespace {

// One row per CpuIsa, in the enum's order: its name, what a CPU needs for
// it, and oneDNN's cap for it.
struct IsaInfo {
  CpuIsa isa;
  const char* name;
  const char* needs;
  dnnl::cpu_isa onednn_cap;
};
constexpr IsaInfo kIsas[] = {
    {CpuIsa::baseline, "baseline", "x86-64", dnnl::cpu_isa::sse41},
    {CpuIsa::avx2, "avx2", "AVX2 + FMA", dnnl::cpu_isa::avx2},
    // AVX-512 and every extension the CPU has beyond it (VNNI, BF16, AMX).
    {CpuIsa::avx512, "avx512", "AVX-512F + FMA", dnnl::cpu_isa::all},
};
static_assert(std::size(kIsas) == static_cast<size_t>(CpuIsa::avx512) + 1, "one row per CpuIsa");

const IsaInfo& info(CpuIsa isa) { return kIsas[static_cast<int>(isa)]; }

CpuIsa detect() {
#if defined(__x86_64__) || defined(__i386__)
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512f")) return CpuIsa::avx512;
  if (avx2) return CpuIsa::avx2;
#endif
  return CpuIsa::baseline;
}

// The instruction-set family of a oneDNN ISA (which CpuIsa cap gives it).
CpuIsa family(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx2:
    case dnnl::cpu_isa::avx2_vnni: return CpuIsa::avx2;
    case dnnl::cpu_isa::avx512_mic:
    case dnnl::cpu_isa::avx512_mic_4ops:
    case dnnl::cpu_isa::avx512_core:
    case dnnl::cpu_isa::avx512_core_vnni:
    case dnnl::cpu_isa::avx512_core_bf16:
    case dnnl::cpu_isa::avx512_core_amx: return CpuIsa::avx512;
    default: return CpuIsa::baseline;
  }
}

const char* onednn_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "none";  // no JIT: reference kernels only
  }
}

void cap_onednn(CpuIsa isa) {
  try {
    dnnl::set_max_cpu_isa(info(isa).onednn_cap);
  } catch (const dnnl::error&) {
    // A oneDNN built without its x86 JIT takes no cap; set_cpu_isa's check
    // of the ISA in effect then decides.
  }
}

// What this CPU has and what HEED_CPU_ISA asks for, read once.
struct Settings {
  CpuIsa best;
  CpuIsa initial;
};

Settings read_settings() {
  Settings s{detect(), CpuIsa::baseline};
  s.initial = s.best;
  const char* env = std::getenv("HEED_CPU_ISA");
  if (env && *env) {
    s.initial = parse_cpu_isa(env, "HEED_CPU_ISA");
    check_cpu_has(s.initial, s.best, fmt::format("HEED_CPU_ISA={}", env));
    // Set, not verified (verifying would fix oneDNN's cap, and a program's
    // own set_cpu_isa may still change it); an explicit ONEDNN_MAX_CPU_ISA wins.
    if (!std::getenv("ONEDNN_MAX_CPU_ISA") && !std::getenv("DNNL_MAX_CPU_ISA")) cap_onednn(s.initial);
  }
  return s;
}

const Settings& settings() {
  static const Settings s = read_settings();  // throws again on every use while HEED_CPU_ISA is bad
  return s;
}

// set_cpu_isa / set_kernel_isa's choice, or -1 for the settings' initial one.
std::atomic<int> g_isa{-1};

}  // namespace

void check_cpu_has(CpuIsa isa, CpuIsa best, std::string_view what) {
  if (isa > best)
    fail("{}: this CPU has no {} (its best instruction set is {}: {})", what, info(isa).needs, info(best).name,
         info(best).needs);
}

void set_kernel_isa(CpuIsa isa) {
  check_cpu_has(isa, settings().best, fmt::format("set_cpu_isa({})", info(isa).name));
  g_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

std::string onednn_isa_name() {
  apply_isa_settings();
  return onednn_name(dnnl::get_effective_cpu_isa());
}

void apply_isa_settings() { settings(); }

}  // namespace heed::kernel

namespace heed {

void set_cpu_isa(CpuIsa isa) {
  using namespace kernel;
  const std::string what = fmt::format("set_cpu_isa({})", info(isa).name);
  check_cpu_has(isa, settings().best, what);
  cap_onednn(isa);
  const dnnl::cpu_isa now = dnnl::get_effective_cpu_isa();  // fixes oneDNN's cap from here on
  if (family(now) != isa)
    fail("{}: too late for oneDNN, which already runs {} (it fixes its instruction set at its first primitive or "
         "ISA query, or at the first set_cpu_isa); call set_cpu_isa before any computation, or set HEED_CPU_ISA={} "
         "in the environment",
         what, onednn_name(now), info(isa).name);
  g_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

CpuIsa cpu_isa() {
  const int isa = kernel::g_isa.load(std::memory_order_relaxed);
  return isa >= 0 ? static_cast<CpuIsa>(isa) : kernel::settings().initial;
}

std::string cpu_isa_name() { return cpu_isa_name(cpu_isa()); }
std::string cpu_isa_name(CpuIsa isa) { return kernel::info(isa).name; }
CpuIsa cpu_isa_max() { return kernel::settings().best; }

CpuIsa parse_cpu_isa(std::string_view name, std::string_view what) {
  std::vector<std::string> valid;
  for (const auto& i : kernel::kIsas) {
    if (name == i.name) return i.isa;
    valid.push_back(i.name);
  }
  // As Args names choices: "baseline, avx2 or avx512".
  const std::string last = valid.back();
  valid.pop_back();
  fail("{}: expected {} or {}, got '{}'", what, fmt::join(valid, ", "), last, name);
}

}  // namespace heed
