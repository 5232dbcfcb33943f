#!/usr/bin/env bash
# tests/install/check.sh SOURCE_DIR BUILD_DIR CXX_COMPILER BUILD_TYPE [OPENBLAS_LIB]
#
# Proves that an installed heed works for another project: `cmake --install`s
# the build tree BUILD_DIR into a fresh prefix, builds tests/install (a separate
# project using find_package(heed) and heed::heed) against it, runs it, and
# checks what it prints. With OPENBLAS_LIB (the OpenBLAS heed was built with),
# also checks that the consumer loads that very library at run time.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source_dir="$1" build_dir="$2" cxx="$3" build_type="$4" openblas="${5:-}"

work="$build_dir/tests/install-check"
prefix="$work/prefix"
rm -rf "$work"
mkdir -p "$work"

fail() { printf 'install check: FAILED: %s\n' "$*" >&2; exit 1; }

echo "== cmake --install $build_dir --prefix $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
[[ -f $prefix/include/heed/heed.h ]] || fail "include/heed/heed.h not installed"
[[ -f $prefix/include/heed/core/tensor.h ]] || fail "include/heed/core/tensor.h not installed"
[[ -f $prefix/include/heed/data/run.h ]] || fail "include/heed/data/run.h not installed"
[[ ! -e $prefix/include/heed/core/dnnl_context.h ]] || fail "a backend's internal header (core/dnnl_context.h) was installed"
[[ ! -e $prefix/include/heed/core/kernels.h ]] || fail "the kernel-level ops (core/kernels.h) were installed"
# The program that inspects, plots and exports what a user's program writes.
[[ -x $prefix/bin/heed ]] || fail "bin/heed not installed"
[[ -f $prefix/bin/heed_plot.py ]] || fail "bin/heed_plot.py (heed plot's script) not installed"
[[ -f $prefix/bin/heed_torch_peer.py ]] || fail "bin/heed_torch_peer.py (heed bench --compare's PyTorch peer) not installed"
if [[ -x $build_dir/heed_microbench ]]; then
  [[ -x $prefix/bin/heed_microbench ]] || fail "bin/heed_microbench (heed bench --micro) not installed"
fi
"$prefix/bin/heed" inspect --help >"$work/heed-help.log" 2>&1 || { cat "$work/heed-help.log"; fail "bin/heed inspect --help"; }

# The differentiable ops are the only ones a user reaches: heed::reshape
# compiles against the installed headers, the gradient-free kernel of the same
# name (heed::kernel::reshape) must not be declared by anything installed.
probe() {  # probe NAME: compile `NAME(x, {6})` against the installed heed.h
  printf '#include <heed.h>\nint main() { heed::Tensor x = heed::Tensor::ones({2, 3}); return (int)%s(x, {6}).numel(); }\n' "$1" |
    "$cxx" -std=c++20 -fsyntax-only -I"$prefix/include/heed" -x c++ - 2>"$work/probe.log"
}
echo "== heed.h: heed::reshape is there, heed::kernel::reshape is not"
probe heed::reshape || { cat "$work/probe.log"; fail "heed::reshape does not compile against the installed heed.h"; }
if probe heed::kernel::reshape; then fail "heed::kernel::reshape is reachable from the installed heed.h"; fi
grep -q "kernel" "$work/probe.log" || { cat "$work/probe.log"; fail "compiling heed::kernel::reshape failed for another reason"; }

config="$(find "$prefix" -name heedConfig.cmake)"
[[ -n $config ]] || fail "heedConfig.cmake not installed"
# An installed package must not point back into the source or build tree.
if grep -rlF -e "$source_dir/" -e "$build_dir/" "$(dirname "$config")"; then
  fail "the installed CMake package refers to the source or build tree (files above)"
fi

echo "== configure and build tests/install against it"
cmake -S "$here" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$build_type" >"$work/configure.log" ||
  { cat "$work/configure.log"; fail "configuring the consumer project"; }
cmake --build "$work/build" -j2 >"$work/build.log" || { cat "$work/build.log"; fail "building the consumer project"; }

echo "== run it"
exe="$work/build/heed_consumer"
out="$("$exe")" || fail "the consumer exited with $?"
printf '%s\n' "$out"
grep -qx 'numel 6' <<<"$out" || fail "expected 'numel 6'"
grep -qx 'matmul sum 24' <<<"$out" || fail "expected 'matmul sum 24'"
grep -qx 'conv1d sum 6' <<<"$out" || fail "expected 'conv1d sum 6'"
grep -qx 'run steps 3' <<<"$out" || fail "expected 'run steps 3'"

if [[ $openblas == */openblas-openmp/* ]]; then
  # The OpenMP build of OpenBLAS is not the system default (the pthread one
  # is): the consumer finds it only through the RPATH heed's package gives it.
  echo "== ldd: libopenblas.so.0 must resolve to $openblas"
  loaded="$(ldd "$exe" | awk '$1 == "libopenblas.so.0" { print $3 }')"
  echo "libopenblas.so.0 => $loaded"
  [[ -n $loaded && $(readlink -f "$loaded") == $(readlink -f "$openblas") ]] ||
    fail "the consumer loads '$loaded', not $openblas"
  grep -q 'threading=OpenMP' <<<"$out" || fail "OpenBLAS does not report OpenMP threading"
  # So does the installed heed program (its RUNPATH, not the build tree's).
  for prog in heed heed_microbench; do
    [[ -x $prefix/bin/$prog ]] || continue
    echo "== ldd: the installed bin/$prog must load $openblas too"
    loaded="$(ldd "$prefix/bin/$prog" | awk '$1 == "libopenblas.so.0" { print $3 }')"
    echo "libopenblas.so.0 => $loaded"
    [[ -n $loaded && $(readlink -f "$loaded") == $(readlink -f "$openblas") ]] ||
      fail "the installed bin/$prog loads '$loaded', not $openblas"
  done
  "$prefix/bin/heed" info >"$work/heed-info.log" 2>&1 || { cat "$work/heed-info.log"; fail "bin/heed info"; }
  grep -q 'threading=OpenMP; oneDNN' "$work/heed-info.log" ||
    { cat "$work/heed-info.log"; fail "the installed bin/heed's OpenBLAS does not report OpenMP threading"; }
fi
echo "install check: OK"
