// tests/install/main.cpp: a program that uses heed from outside its tree.
// It touches each backend the static library links privately (OpenBLAS for
// matmul, oneDNN for float32 conv1d) so that a missing link dependency fails
// here, and prints which OpenBLAS threading build was loaded at run time.
#include <heed.h>

#include <cstdio>

int main() {
  heed::Tensor t = heed::Tensor::ones({2, 3});
  std::printf("numel %lld\n", static_cast<long long>(t.numel()));

  heed::Tensor m = heed::matmul(t, heed::Tensor::ones({3, 4}));  // OpenBLAS sgemm
  std::printf("matmul sum %g\n", heed::sum(m).item());            // 2*4 entries of 3: 24

  heed::Tensor x = heed::Tensor::ones({1, 1, 4});
  heed::Tensor w = heed::Tensor::ones({1, 1, 2});
  std::printf("conv1d sum %g\n", heed::sum(heed::conv1d(x, w)).item());  // oneDNN: 3 outputs of 2: 6

  // The run machinery is public too: a Run, its options and its help.
  heed::Run run("consumer", "an installed heed's run", heed::RunOptions("consumer.h5").steps(3));
  std::printf("run steps %lld\n", static_cast<long long>(run.steps()));

  std::printf("%s\n", heed::backend_info().c_str());
  return 0;
}
