// experiments/common.cpp
#include "experiments/common.h"

#include "experiments/charlm.h"
#include "experiments/copy.h"
#include "experiments/crossattn.h"
#include "experiments/shapes.h"
#include "experiments/sine.h"
#include "experiments/timeseries.h"
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
      {"crossattn", "signal positions cross-attend to tokens that describe the signal's shapes", run_crossattn},
      {"shapes", "the CNN-versus-attention toy experiment (the demo)", run_shapes},
      {"sine", "fit sin(x) with a small MLP (seconds)", run_sine},
      {"timeseries", "forecast periodic signals with anomalies: attention looks one period back, vs a CNN",
       run_timeseries},
  };
  return table;
}

}  // namespace heed::experiments
