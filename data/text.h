// data/text.h: character-level text for language models: a corpus loader that
// validates UTF-8, a tokenizer whose vocabulary is built from the corpus
// (and saved with the model), a 90/10 split and seeded random windows.
//
// Tokens are Unicode code points, so a multi-byte character is one token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "core/tensor.h"

namespace heed::data {

// Running out of memory while reading or tokenizing a text: "text file
// 'corpus.txt' (314572800 bytes) does not fit in memory: ..." (or "the text
// (N bytes) ..." when no file is known), never a bare std::bad_alloc. A
// caller may name the text in its own words from path(), bytes() and detail().
class TextMemoryError : public Error {
 public:
  TextMemoryError(const std::string& path, int64_t bytes, const std::string& detail);
  const std::string& path() const { return path_; }
  int64_t bytes() const { return bytes_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string path_;
  int64_t bytes_;
  std::string detail_;
};

// Memory that reading a text of `bytes` bytes and tokenizing it for
// training (CharTokenizer::from_text, encode_tensor, split_tokens) takes at
// most: the text itself, an int64 token id per character and the
// tokenizer's tables. For a check before loading.
double text_memory_bytes(int64_t bytes);

// Reads a UTF-8 text file. Missing, unreadable, empty or invalid UTF-8 files
// are refused with an error naming the path (and the byte offset of the first
// invalid sequence); a path that is not UTF-8 is shown with its odd bytes as
// \xNN, and a control character in it too. Running out of memory is a
// TextMemoryError.
std::string load_text(const std::string& path);
// Decodes UTF-8 into code points; throws naming the byte offset on bad input.
std::vector<uint32_t> decode_utf8(const std::string& s, const std::string& source = "text");
std::string encode_utf8(const std::vector<uint32_t>& cps);
// Whether s is valid UTF-8 (the empty string is).
bool is_utf8(const std::string& s);
// s for a message: every byte that is not part of a valid UTF-8 sequence
// shown as \xNN (two hex digits), the rest as it is ("caf\xE9" for Latin-1
// "café").
std::string escape_invalid_utf8(const std::string& s);

// A 64-bit fingerprint of a text's bytes (FNV-1a): a checkpoint keeps its
// corpus's, so that a resume on another text is refused.
uint64_t text_fingerprint(const std::string& bytes);

// The default corpus: the King James Bible from Debian's bible-kjv package,
// cached at cache_path after the first extraction.
std::string kjv_text(const std::string& cache_path);

class CharTokenizer {
 public:
  CharTokenizer() = default;
  // Vocabulary = the distinct code points of text, sorted. One pass over the
  // text: memory does not grow with its length.
  static CharTokenizer from_text(const std::string& text);
  // From / to an int64 tensor of code points (how checkpoints store it).
  static CharTokenizer from_tensor(const Tensor& codepoints);
  Tensor to_tensor() const;

  int64_t vocab_size() const { return static_cast<int64_t>(chars_.size()); }
  // Text -> ids; a character outside the vocabulary is an error naming it
  // (and its position).
  std::vector<int64_t> encode(const std::string& text) const;
  // The same ids as an int64 tensor [characters], written straight into its
  // storage (8 bytes a character, nothing else): what training takes.
  // Running out of memory is a TextMemoryError.
  Tensor encode_tensor(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  const std::vector<uint32_t>& chars() const { return chars_; }

 private:
  // Writes the ids of text's characters to out[0 .. capacity).
  void encode_into(const std::string& text, int64_t* out, size_t capacity) const;
  std::vector<uint32_t> chars_;  // id -> code point
  std::vector<int64_t> lookup_;  // code point -> id (or -1), dense up to the largest code point
};

// A token stream split into train (first 90%) and validation (last 10%).
struct TextSplit {
  Tensor train;  // int64 [n_train]
  Tensor val;    // int64 [n_val]
};
// From an int64 tensor [n]: the two parts are views of its storage (no
// copy; a part kept alone keeps the whole stream's storage alive).
TextSplit split_tokens(const Tensor& ids, double train_fraction = 0.9);
TextSplit split_tokens(const std::vector<int64_t>& ids, double train_fraction = 0.9);

// B random windows of T+1 tokens: x = first T, y = the next-token targets.
// Start positions come from g, so batches are reproducible from its state.
// The stream must hold at least T+1 tokens (else an error naming T and the length).
void random_windows(const Tensor& stream, int64_t B, int64_t T, Generator& g, Tensor& x, Tensor& y);

}  // namespace heed::data
