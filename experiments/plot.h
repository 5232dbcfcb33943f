// experiments/plot.h: `heed plot FILE.h5 [-o DIR]`, PNG figures of a run log.
// The drawing is matplotlib's: experiments/plot/heed_plot.py, run with
// Debian's Python (/usr/bin/python3 with python3-h5py and python3-matplotlib).
#pragma once

#include <string>
#include <vector>

namespace heed::experiments {

// FILE without ".h5", plus "_plots": runs/demo.h5 -> runs/demo_plots.
std::string default_plot_dir(const std::string& log_path);

// Writes the figures of the log at log_path into out_dir (empty: the
// default) and returns the files written. The script prints each file as it
// writes it when echo is true. Throws heed::Error when Python, its modules or
// the script are missing (naming what to install) or the script fails.
std::vector<std::string> plot_log(const std::string& log_path, const std::string& out_dir, bool echo = true);

// What would keep plot_log from drawing, checked before a run whose end
// draws its figures: a HEED_PYTHON that names no program, no
// /usr/bin/python3, or a Python without numpy, h5py or matplotlib (it is
// run to see: about a second). "" when it can draw; else one line naming
// the interpreter (HEED_PYTHON and its value, when set) and what is missing.
std::string plot_problem();

// `heed plot FILE.h5 [-o DIR]`: args are the words after "plot".
int run_plot(const std::vector<std::string>& args);

}  // namespace heed::experiments
