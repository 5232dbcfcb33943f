// experiments/common.h: what the bundled experiments share beyond heed::Run
// (data/run.h): the description of a model in the log, and the table of
// experiments the command-line program dispatches from.
#pragma once

#include <string>
#include <vector>

#include "data/run.h"

namespace heed::nn {
class Module;
}

namespace heed::experiments {

// Describes a model in the log (inside Run::begin's schema): the dataset
// models/<name>/nb_parameters and the attributes summary (the module tree)
// and parameters (one "name [shape]" a line) of models/<name>.
void log_model(RunLog& log, const std::string& name, const nn::Module& model);

// An experiment of `heed run NAME`: its entry point takes the arguments after
// the name and the whole command line (for the log), and returns the exit
// status (130 when stopped with a checkpoint).
struct Experiment {
  const char* name;
  const char* summary;  // one line for `heed --help`
  int (*run)(const std::vector<std::string>& args, const std::vector<std::string>& command_line);
};
const std::vector<Experiment>& experiments();

}  // namespace heed::experiments
