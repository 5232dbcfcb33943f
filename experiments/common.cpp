// experiments/common.cpp
#include "experiments/common.h"

#include "experiments/charlm.h"
#include "experiments/copy.h"
#include "experiments/scaling.h"
#include "experiments/shapes.h"
#include "experiments/sine.h"
#include "layers/module.h"

namespace heed::experiments {

void log_model(RunLog& log, const std::string& name, const nn::Module& model) {
  log.write_tensor("models/" + name + "/nb_parameters",
                   Tensor::scalar(static_cast<double>(model.num_parameters()), DType::i64));
  log.set_attr("summary", model.summary(), "models/" + name);
  std::string params;
  for (const auto& [n, p] : model.named_parameters()) params += n + " " + shape_str(p.shape()) + "\n";
  log.set_attr("parameters", params, "models/" + name);
}

const std::vector<Experiment>& experiments() {
  static const std::vector<Experiment> table = {
      {"charlm", "a character-level GPT on the King James Bible (or --text FILE)", run_charlm},
      {"copy", "one attention layer learns to copy the previous token", run_copy},
      {"scaling", "why attention divides its scores by sqrt(d_k): saturation, then training with and without", run_scaling},
      {"shapes", "the CNN-versus-attention toy experiment (the demo)", run_shapes},
      {"sine", "fit sin(x) with a small MLP (seconds)", run_sine},
  };
  return table;
}

}  // namespace heed::experiments
