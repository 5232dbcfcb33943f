// experiments/quantize.h: `heed quantize` (every weight matrix of a trained
// model quantized with one method of core/quantize.h, measured per layer,
// the quantized model evaluated and written as a checkpoint) and
// `heed run compression` (the table of methods x bits, logged and plotted).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/quantize.h"
#include "experiments/common.h"

namespace heed::experiments {

struct QuantizeSettings {
  quant::Method method = quant::Method::hadamard;
  int bits = 4;
  quant::Range range = quant::Range::row;
  int64_t rank = 0;  // lplr: 0 takes half of each matrix's smaller side
  uint64_t seed = 0;
  // Parameters left in float32, as "0.weight" (in every model) or
  // "attention/0.weight" (in one).
  std::vector<std::string> keep;
};

// One weight matrix: a parameter of two or more dims seen as
// [shape[0], the rest] (a Conv1d weight [O, C, K] as [O, C K]).
struct LayerQuantization {
  std::string model;  // "" for a checkpoint of one model
  std::string name;   // the parameter's dotted name
  Shape shape;
  int64_t rows = 0, cols = 0, rank = 0;
  quant::Quantized q;
  double rel_error = 0;   // ||W - W'||_F / ||W||_F
  double sq_error = 0, sq_norm = 0;  // ||W - W'||_F^2 and ||W||_F^2
  // quant::row_peak of the rows as they are, and as the quantizer sees them
  // (after the rotation of hadamard, gaussian, e8; lplr: of L's columns).
  double peak = 0, peak_quantized = 0;
  // The checkpoint keys: its weights (model/...) and its stored form (quantized/...).
  std::string weight_key() const;
  std::string quantized_key() const;
};

struct ModelQuantization {
  std::vector<LayerQuantization> layers;
  std::vector<std::string> kept;  // "name [shape]" of the matrices left in float32 (--keep)
  int64_t total_parameters = 0;   // of the models quantized, matrices, vectors and kept ones
  int64_t quantized_weights() const;
  int64_t stored_bits() const;
  double bits_per_weight() const;     // over the quantized matrices
  double bits_per_parameter() const;  // the whole models, everything not quantized at 32 bits
  double rel_error() const;           // over all quantized matrices together
  // quant::row_peak over every quantized row: as they are, as quantized.
  double peak() const;
  double peak_quantized() const;
};

// The matrices of the named models that s quantizes, every one checked
// before any is touched: a --keep name that matches none, e8 on rows that
// are not a multiple of 8 long, a lplr rank larger than a matrix allows.
// The error (UsageError) names the parameter, its shape and what was expected.
ModelQuantization plan_quantization(TrainedModels& tm, const std::vector<std::string>& names,
                                    const QuantizeSettings& s, const std::string& who);
// Refuses (UsageError) a checkpoint heed quantize wrote (one with tensors
// under quantized/), naming `what` ("checkpoint 'x.ckpt.h5'") and the
// methods it holds: its weights are already the dequantized ones, so
// quantizing them again would measure against a quantized baseline and
// keep the first method's codes beside the new ones.
void refuse_quantized(const Checkpoint& ck, const std::string& who, const std::string& what);
// The methods of a checkpoint heed quantize wrote ("e8 4 bits, uniform 8
// bits"), or nothing for a training checkpoint.
std::optional<std::string> quantized_by(const Checkpoint& ck);

// Quantizes the planned matrices (each with its own seed, derived from s.seed
// and its name) and writes their dequantized float32 weights into the models.
// echo: a line per matrix as it is done.
void quantize_planned(TrainedModels& tm, ModelQuantization& mq, const QuantizeSettings& s, bool echo);

int run_quantize(const std::vector<std::string>& args);
int run_compression(const std::vector<std::string>& args, const std::vector<std::string>& command_line);

}  // namespace heed::experiments
