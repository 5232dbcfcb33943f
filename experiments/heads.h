// experiments/heads.h: what each attention head of a character-level model
// does, in numbers: per-head statistics of causal attention maps, the kind of
// head they suggest, and `heed attend` (every head's attention over a prompt).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/checkpoint.h"
#include "data/text.h"

namespace heed::experiments {

// Per-head averages over the queries i >= 1 of causal attention maps (query
// 0 can only attend to itself). a_ij is the weight of query i on key j <= i.
struct HeadStats {
  double entropy = 0;     // -sum_j a_ij log a_ij
  double distance = 0;    // sum_j a_ij (i - j): how far back the head looks
  double prev = 0;        // a_i,i-1: mass on the previous character
  double first = 0;       // a_i,0: mass on the first position
  double same_char = 0;   // mass on earlier keys j < i holding the same character as i
  double word_start = 0;  // mass on the first character of the word that holds i
};

// maps [B, H, T, T] (rows of a causal softmax), ids [B, T] (int64), and
// boundary[c] true for the character ids that end a word (space, newline,
// punctuation): the statistics of each of the H heads, and in *uniform the
// same statistics under uniform attention (a_ij = 1 / (i + 1)) on the same
// sequences, the baseline a head's numbers are read against.
std::vector<HeadStats> head_stats(const Tensor& maps, const Tensor& ids, const std::vector<bool>& boundary,
                                  HeadStats* uniform = nullptr);

// The statistics of uniform attention on the sequences ids [B, T].
HeadStats uniform_head_stats(const Tensor& ids, const std::vector<bool>& boundary);

// "previous-token", "same-character", "word-start", "first-token" or "mixed",
// from the statistics against the uniform baseline (thresholds in heads.cpp).
std::string head_kind(const HeadStats& s, const HeadStats& uniform);

// boundary[id] for a tokenizer: ASCII characters other than letters, digits
// and the apostrophe end a word.
std::vector<bool> word_boundaries(const data::CharTokenizer& tok);

// The statistics' names as logged (heads/<name> [layers, heads]) and shown.
const std::vector<std::string>& head_stat_names();
double head_stat(const HeadStats& s, size_t which);

// `heed attend CHECKPOINT --prompt TEXT [-o OUT.h5]`: every head's attention
// over the prompt, printed as a table of statistics with each head's kind,
// written to OUT.h5 (with the attributes of a run's log: docs/log-format.md)
// and drawn by `heed plot` as a grid of layers x heads. Its messages begin
// "attend: ".
int run_attend(const std::vector<std::string>& args);

// heed attend's default prompt from a run's own text (UTF-8): its first n
// characters in a row free of control characters (a newline, a tab, ...:
// they would break the one-line output), or, when no line is that long, the
// first of its longest lines; "" for a text of control characters only.
std::string attend_default_prompt(const std::string& text, int64_t n);

// The prompt a command takes when none is given, for checkpoint ck (read
// from path) of tokenizer tok: `preferred` (heed's own, the Bible's) when
// the vocabulary encodes it; else, for a run on a text without its
// characters, attend_default_prompt(the start of the run's validation text,
// n), read from the run's --text and checked against the checkpoint's
// corpus fingerprint as heed quantize reads it. A UsageError beginning
// "<command>: " and ending "expected --prompt TEXT" when that text cannot be
// read or has no line of `least` characters.
std::string default_prompt(const Checkpoint& ck, const std::string& path, const data::CharTokenizer& tok,
                           const std::string& preferred, int64_t n, int64_t least, const char* command);

// A prompt as heed attend shows it between double quotes, on one line:
// control characters escaped (\n, \r, \t, \x1b, or u and four hex digits after the
// backslash), and the backslash and " themselves.
std::string attend_printable(const std::string& text);

}  // namespace heed::experiments
