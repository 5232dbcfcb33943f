// experiments/export.cpp: `heed export CKPT -o FILE.safetensors`.
#include "experiments/export.h"

#include <filesystem>
#include <optional>

#include "experiments/charlm.h"
#include "experiments/common.h"
#include "experiments/quantize.h"
#include "heed.h"

namespace heed::experiments {

namespace {

// The name under which a run of one model logs it (models/<name>, the
// experiments' log_model calls), by experiment; "" for an experiment of
// several models, or a program's own.
std::string single_model_name(const std::string& experiment) {
  static const std::map<std::string, std::string> names = {
      {"charlm", "gpt"}, {"copy", "copy"}, {"crossattn", "crossattn"}, {"sine", "mlp"}};
  const auto it = names.find(experiment);
  return it == names.end() ? std::string() : it->second;
}

}  // namespace

int run_export(const std::vector<std::string>& args) {
  for (const auto& x : args)
    if (x == "--help" || x == "-h") {
      fmt::print(
          "usage: heed export CHECKPOINT [-o FILE.safetensors] [--model NAME] [--names heed|nanogpt]\n\n"
          "Writes the model weights of a checkpoint (any experiment's, or a program's on heed::Run) to a\n"
          "safetensors file, under the model's own parameter names (e.g. blocks.0.attn.q_proj.weight), with\n"
          "the run's experiment, step and configuration as metadata (heed_experiment, heed_step,\n"
          "heed_config.<option>; an absolute path as its file name), the model exported of a checkpoint\n"
          "with several (heed_model, e.g. cnn), for charlm the vocabulary:\n"
          "heed_vocabulary, the code points of the token ids in order as a JSON array, and for a\n"
          "checkpoint heed quantize wrote, heed_quantized: its methods (e.g. \"e8 4 bits\"; the weights\n"
          "are the dequantized ones). PyTorch reads it\n"
          "with safetensors.torch.load_file (or json + numpy); heed runs start from one with --init-from.\n"
          "An existing FILE is replaced only if heed wrote it (its metadata names heed_experiment).\n\n"
          "options:\n"
          "  -o, --out FILE     the file to write (default: the checkpoint's name with .safetensors)\n"
          "  --model NAME       which model, for a checkpoint with several (shapes: cnn or attention;\n"
          "                     scaling: scaled/seed0, unscaled/seed0, ...); the only one by default\n"
          "                     (also when named as its log names it: charlm gpt, copy copy, sine mlp,\n"
          "                     crossattn crossattn)\n"
          "  --names nanogpt    charlm: a plain PyTorch GPT's names (nanoGPT: transformer.h.0.attn.c_attn.weight\n"
          "                     with q, k and v fused, ...); heed's own by default. heed loads either.\n"
          "  --help             show this help\n");
      return 0;
    }
  std::string path, out, model, names = "heed";
  Args a("export", "Writes the model weights of a checkpoint to a safetensors file.");
  a.path("out", &out, "the file to write")
      .text("model", &model, "which model")
      .choice("names", &names, {"heed", "nanogpt"}, "parameter names")
      .alias("o", "out");
  a.parse(args, &path, "a checkpoint path");
  if (out.empty()) {
    const bool h5 = path.size() > 3 && path.compare(path.size() - 3, 3, ".h5") == 0;
    out = (h5 ? path.substr(0, path.size() - 3) : path) + ".safetensors";
    if (out.size() > 17 && out.find(".ckpt.safetensors") == out.size() - 17)
      out = out.substr(0, out.size() - 17) + ".safetensors";
  }
  Checkpoint ck = load_checkpoint(path, "");
  check_output("export", out, path, "safetensors");
  // A GPT is rebuilt from the checkpoint's configuration and its weights
  // loaded first, as sample and --init-from will: a checkpoint they would
  // refuse (a missing or mis-shaped weight, a bad configuration, NaN
  // weights) is refused here, not exported.
  std::optional<CharModel> lm;
  if (ck.experiment == "charlm") lm = charlm_from(ck, path, "export");
  // Models live under model/ (one) or model/<name>/ (several), where a name
  // may have parts of its own (scaling: scaled/seed0). Parameter names are
  // dotted, so a model's name is all of a key up to its last '/'.
  const std::map<std::string, Tensor> all = ck.get("model");
  std::set<std::string> models;
  for (const auto& [k, t] : all)
    if (auto slash = k.rfind('/'); slash != std::string::npos) models.insert(k.substr(0, slash));
  // One model under its name (shapes --model attention): that one.
  if (model.empty() && models.size() == 1 && all.size() == ck.get("model/" + *models.begin()).size())
    model = *models.begin();
  // A checkpoint of one model keeps it under model/ alone, though its log
  // names it (models/<name>): that name is the one model, as no --model is.
  const std::string own = single_model_name(ck.experiment);
  if (models.empty() && !all.empty() && !own.empty() && model == own) model.clear();
  if (model.empty() && !models.empty())
    throw UsageError(fmt::format("export: checkpoint '{}' holds several models ({}); choose one with --model", path,
                                 fmt::join(models, ", ")));
  std::map<std::string, Tensor> weights;
  if (model.empty()) {
    weights = all;
  } else if (models.count(model)) {
    for (const auto& [k, t] : ck.get("model/" + model))
      if (k.find('/') == std::string::npos) weights.emplace(k, t);  // not a model under this one's name
  } else {
    // A group of models (scaling's unscaled: seed0, seed1, ...): their
    // weights together, under names no model has, would load nowhere.
    std::vector<std::string> members;
    for (const std::string& m : models)
      if (m.rfind(model + "/", 0) == 0) members.push_back(m);
    if (!members.empty())
      throw UsageError(fmt::format("export: --model {} names a group of {} models in checkpoint '{}' ({}); expected "
                                   "one of them",
                                   model, members.size(), path, fmt::join(members, ", ")));
  }
  if (weights.empty())
    throw UsageError(fmt::format("export: checkpoint '{}' has no model{} ({})", path,
                                 model.empty() ? std::string() : " '" + model + "'",
                                 !model.empty() && models.empty() && !all.empty()
                                     ? (own.empty() ? std::string("it has one model: leave out --model")
                                                    : fmt::format("it has one model, {}: give --model {} or leave "
                                                                  "out --model",
                                                                  own, own))
                                 : models.empty() ? std::string("heed export reads the module a run tracked as \"model\"")
                                                  : fmt::format("its models: {}", fmt::join(models, ", "))));
  if (names == "nanogpt") {
    if (!lm)
      throw UsageError(fmt::format("export: --names nanogpt is for a GPT (charlm), not a {} checkpoint", ck.experiment));
    weights = nn::gpt_to_nanogpt(weights, lm->model->options);
  }
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                             {"heed_experiment", ck.experiment},
                                             {"heed_step", std::to_string(ck.counter("step"))}};
  // A path the run was given absolute (its --text is recorded so, and --out
  // may be) names a directory of the machine it trained on, often a home
  // directory: of no use to the file's reader, who gets its name.
  for (const auto& [k, v] : ck.config)
    meta["heed_config." + k] = !v.empty() && v[0] == '/' ? std::filesystem::path(v).filename().string() : v;
  // Which model of the checkpoint's (shapes: cnn or attention; its
  // heed_config.model is the run's choice, "both"): --init-from refuses
  // another model's weights naming it.
  if (!model.empty()) meta[kModelKey] = model;
  // A quantized checkpoint's weights are the dequantized ones: its reader
  // must know they are not the trained weights.
  if (const std::optional<std::string> by = quantized_by(ck)) meta["heed_quantized"] = *by;
  // The token of each id, so that a reader can decode logits and --init-from
  // refuses text whose ids mean other characters.
  if (lm) meta[kVocabularyKey] = vocabulary_metadata(lm->tok);
  // Its directories made, as every writer of heed's does (and removed again if the write fails).
  MadeDirectories dirs(prepare_output_path(out, "export", "--out", "x.safetensors"));
  // Never beside a running run's checkpoint write, or another export's, of
  // the same file (data/run.h, OutputLock).
  OutputLock lock(out, "export", "--out");
  safetensors::save(out, weights, meta);
  lock.written();
  dirs.keep();
  int64_t n = 0;
  for (const auto& [k, t] : weights) n += t.numel();
  fmt::print("{}: {} tensors, {} parameters, from {} (experiment {}, step {})\n", out, weights.size(), n, path,
             ck.experiment, ck.counter("step"));
  return 0;
}

}  // namespace heed::experiments
