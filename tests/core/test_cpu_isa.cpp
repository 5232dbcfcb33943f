// tests/core/test_cpu_isa.cpp: the instruction-set controls (core/cpu_isa.cpp):
// names and their parsing, the refusal of an ISA the CPU lacks, oneDNN's cap
// fixed at its first use, and what backend_info reports. (HEED_CPU_ISA and
// `heed bench --isa` end to end: tests/experiments/test_bench.cpp.)
#include <cstdlib>

#include "core/conv_winograd.h"
#include "test_util.h"

using namespace heed;
using test::has;

namespace {

// The CpuIsa family of oneDNN's instruction set name ("avx512_core_bf16" -> avx512).
CpuIsa onednn_family(const std::string& name) {
  return name.rfind("avx512", 0) == 0 ? CpuIsa::avx512 : name.rfind("avx2", 0) == 0 ? CpuIsa::avx2 : CpuIsa::baseline;
}

}  // namespace

TEST_CASE("parse_cpu_isa reads each instruction set's name and refuses others, naming the value and the valid names") {
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512})
    CHECK(heed::parse_cpu_isa(heed::cpu_isa_name(isa), "HEED_CPU_ISA") == isa);
  CHECK(heed::cpu_isa_name(CpuIsa::avx2) == "avx2");
  CHECK(heed::cpu_isa_name(CpuIsa::avx512) == "avx512");
  // HEED_CPU_ISA is read once per process, through this function.
  test::check_error([] { heed::parse_cpu_isa("avx3", "HEED_CPU_ISA"); },
                    {"HEED_CPU_ISA", "'avx3'", "baseline, avx2 or avx512"});
  test::check_error([] { heed::parse_cpu_isa("AVX2", "bench: --isa"); }, {"bench: --isa", "'AVX2'"});
  test::check_error([] { heed::parse_cpu_isa("", "HEED_CPU_ISA"); }, {"HEED_CPU_ISA", "''"});
}

TEST_CASE("set_cpu_isa refuses an instruction set the CPU lacks, naming it and what the CPU has") {
  // The check itself, for a CPU whose best is AVX2 (a Zen 3), on any machine.
  test::check_error([] { kernel::check_cpu_has(CpuIsa::avx512, CpuIsa::avx2, "set_cpu_isa(avx512)"); },
                    {"set_cpu_isa(avx512)", "no AVX-512F + FMA", "avx2", "AVX2 + FMA"});
  test::check_error([] { kernel::check_cpu_has(CpuIsa::avx2, CpuIsa::baseline, "HEED_CPU_ISA=avx2"); },
                    {"HEED_CPU_ISA=avx2", "no AVX2 + FMA", "baseline"});
  CHECK_NOTHROW(kernel::check_cpu_has(CpuIsa::avx2, CpuIsa::avx512, "set_cpu_isa(avx2)"));
  CHECK_NOTHROW(kernel::check_cpu_has(CpuIsa::baseline, CpuIsa::baseline, "set_cpu_isa(baseline)"));
  // And on this CPU: whatever lies above its best is refused, by both setters,
  // leaving the instruction set in effect as it was.
  const CpuIsa max = heed::cpu_isa_max(), before = heed::cpu_isa();
  if (max < CpuIsa::avx512) {
    const CpuIsa above = static_cast<CpuIsa>(static_cast<int>(max) + 1);
    const std::string name = heed::cpu_isa_name(above);
    test::check_error([&] { heed::set_cpu_isa(above); }, {"set_cpu_isa(" + name + ")", heed::cpu_isa_name(max)});
    test::check_error([&] { kernel::set_kernel_isa(above); }, {"set_cpu_isa(" + name + ")"});
    CHECK(heed::cpu_isa() == before);
    MESSAGE("this CPU's best is " << heed::cpu_isa_name(max) << ": set_cpu_isa(" << name << ") refused");
  } else {
    MESSAGE("this CPU has AVX-512, the highest: the refusal is checked for a CPU with AVX2 only");
  }
}

TEST_CASE("cpu_isa is the best the CPU has unless HEED_CPU_ISA caps it; set_kernel_isa moves heed's kernels only") {
  const char* env = std::getenv("HEED_CPU_ISA");
  const CpuIsa before = heed::cpu_isa();
  if (env && *env)
    CHECK(before == heed::parse_cpu_isa(env, "HEED_CPU_ISA"));
  else
    CHECK(before == heed::cpu_isa_max());
  const std::string onednn = kernel::onednn_isa_name();
  kernel::set_kernel_isa(CpuIsa::baseline);
  CHECK(heed::cpu_isa() == CpuIsa::baseline);
  CHECK(heed::cpu_isa_name() == "baseline");
  CHECK(kernel::onednn_isa_name() == onednn);
  kernel::set_kernel_isa(before);
  CHECK(heed::cpu_isa() == before);
}

TEST_CASE("set_cpu_isa once oneDNN has fixed its instruction set: the same family is accepted, another refused") {
  const CpuIsa before = heed::cpu_isa();
  // Asking oneDNN which ISA it runs fixes its cap (as its first primitive would).
  const std::string onednn = kernel::onednn_isa_name();
  const CpuIsa fixed = onednn_family(onednn);
  INFO("oneDNN runs " << onednn);
  REQUIRE(fixed <= heed::cpu_isa_max());
  heed::set_cpu_isa(fixed);  // nothing to change in oneDNN: accepted
  CHECK(heed::cpu_isa() == fixed);
  CHECK(kernel::onednn_isa_name() == onednn);
  // Any other instruction set would need a new cap: refused, nothing changed.
  const CpuIsa other = fixed == CpuIsa::baseline ? heed::cpu_isa_max() : CpuIsa::baseline;
  if (other != fixed) {
    const std::string name = heed::cpu_isa_name(other);
    test::check_error([&] { heed::set_cpu_isa(other); },
                      {"set_cpu_isa(" + name + ")", "too late for oneDNN", onednn, "HEED_CPU_ISA=" + name});
    CHECK(heed::cpu_isa() == fixed);
    CHECK(kernel::onednn_isa_name() == onednn);
  }
  kernel::set_kernel_isa(before);
}

TEST_CASE("backend_info names heed's instruction set, oneDNN's, and which Winograd kernels run") {
  const CpuIsa before = heed::cpu_isa();
  std::string info = heed::backend_info();
  INFO(info);
  CHECK(has(info, "heed isa=" + heed::cpu_isa_name()));
  CHECK(has(info, "isa=" + kernel::onednn_isa_name() + ";"));
  CHECK(info.find('\n') == std::string::npos);  // one line in the run logs
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512}) {
    if (isa > heed::cpu_isa_max()) continue;
    kernel::set_kernel_isa(isa);
    info = heed::backend_info();
    INFO(info);
    CHECK(has(info, isa == CpuIsa::avx2 ? "conv1d 5-tap: Winograd F(4,5) AVX2" : "conv1d 5-tap: Winograd F(4,5) AVX-512"));
    CHECK(has(info, "heed isa=" + heed::cpu_isa_name(isa)));
    CHECK(has(info, "(capped; CPU has") == (isa != heed::cpu_isa_max()));
  }
  kernel::set_kernel_isa(CpuIsa::baseline);
  info = heed::backend_info();
  CHECK(has(info, "conv1d 5-tap: direct (no AVX2)"));
  heed::set_conv1d_winograd(false);
  CHECK(has(heed::backend_info(), "conv1d 5-tap: direct (switched off)"));
  heed::set_conv1d_winograd(true);
  kernel::set_kernel_isa(before);
}
