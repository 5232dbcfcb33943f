// experiments/charlm.h: `heed run charlm` and `heed sample`.
#pragma once

#include <string>
#include <vector>

#include <memory>

#include "data/text.h"
#include "experiments/common.h"
#include "layers/transformer.h"

namespace heed::experiments {

struct SampleOptions {
  int64_t tokens = 400;
  double temperature = 0.8;
  int64_t top_k = 0;  // 0: all
  int64_t seed = 0;
  bool use_cache = true;  // false: recompute the whole window for every token
};

// Continues prompt (token ids) by o.tokens sampled tokens; returns the new ones.
// With or without the cache, the same seed gives the same tokens. The cache
// saves work only until the sequence fills the context: past it, every token
// runs the model on the whole last window again (positions 0..context-1; the
// learned absolute positions move every token at each step, so no keys or
// values can be kept). As the temperature goes to 0 (a positive one, however
// small) sampling becomes greedy decoding.
std::vector<int64_t> generate(nn::GPT& model, const std::vector<int64_t>& prompt, const SampleOptions& o);

// A trained character-level GPT and its tokenizer, from a checkpoint of `heed
// run charlm`; errors name the command (e.g. "sample") and the file.
struct CharModel {
  std::shared_ptr<nn::GPT> model;
  data::CharTokenizer tok;
  // --prompt as tokens; a character outside the vocabulary is a bad command
  // line (status 2) naming --prompt, the character and the checkpoint.
  std::vector<int64_t> encode_prompt(const std::string& prompt, const char* command, const std::string& path) const;
};
CharModel load_charlm(const std::string& path, const char* command);
// The same from a checkpoint already loaded (path names it in messages).
CharModel charlm_from(const Checkpoint& ck, const std::string& path, const char* command);

// The vocabulary in the metadata of a safetensors file (heed export of a
// charlm checkpoint writes it; charlm --init-from checks it): the code
// points of the tokens in id order, as a JSON array ("[10, 32, 65, ...]").
inline constexpr const char* kVocabularyKey = "heed_vocabulary";
std::string vocabulary_metadata(const data::CharTokenizer& tok);

// The GPT of a charlm checkpoint with its validation text (heed quantize):
// evaluate("") is the validation loss as the run logged it (the mean of its
// fixed evaluation batches). The text is read from `text` when given (the
// command's option text_option, "--text", names it: where the run's text is
// now), else from the run's --text; a text other than the one the run
// trained on (its corpus fingerprint) is refused. Errors begin with `who`.
std::unique_ptr<TrainedModels> charlm_trained_models(const Checkpoint& ck, const std::string& path,
                                                     const std::string& who, const std::string& text = "",
                                                     const std::string& text_option = "");

// The first n characters of the validation text of a charlm checkpoint's run
// (read and checked as charlm_trained_models does): a prompt its vocabulary
// encodes, for a run on another text than heed's default prompts'.
std::string validation_start(const Checkpoint& ck, const std::string& path, const data::CharTokenizer& tok,
                             const std::string& who, int64_t n);

int run_charlm(const std::vector<std::string>& args, const std::vector<std::string>& command_line);
int run_sample(const std::vector<std::string>& args);

}  // namespace heed::experiments
