// layers/transformer.cpp
#include "layers/transformer.h"

#include <array>

#include <cmath>

#include "core/error.h"
#include "core/kernels.h"
#include "core/random.h"
#include "core/safetensors.h"

namespace heed::nn {

namespace {

void check_rate(const char* who, double p) {
  if (!(p >= 0.0 && p < 1.0)) fail("{}: dropout {} out of range (expected 0 <= p < 1)", who, p);
}

}  // namespace

// ---- FeedForward ----
FeedForward::FeedForward(const FeedForwardOptions& o) : Module("FeedForward"), options(o) {
  if (options.hidden_ == 0) options.hidden_ = 4 * o.dim_;
  if (o.dim_ <= 0 || options.hidden_ <= 0)
    fail("FeedForward: dim and hidden must be positive, got dim={} hidden={}", o.dim_, options.hidden_);
  check_rate("FeedForward", o.dropout_);
  fc1 = register_module("fc1", std::make_shared<Linear>(
                                   LinearOptions(o.dim_, options.hidden_).bias(o.bias_).generator(o.gen_)));
  fc2 = register_module("fc2", std::make_shared<Linear>(
                                   LinearOptions(options.hidden_, o.dim_).bias(o.bias_).generator(o.gen_)));
}

Tensor FeedForward::forward(const Tensor& x) { return forward_add(x, Tensor()); }

Tensor FeedForward::forward_add(const Tensor& x, const Tensor& residual) {
  check_defined(x, "FeedForward");
  if (x.dim() < 1 || x.size(-1) != options.dim_)
    fail("FeedForward({}): expected input [.., {}], got {}", extra_repr(), options.dim_, shape_str(x.shape()));
  // Checked here, not only by fc2's fused add: the dropout path's separate
  // add would broadcast a smaller residual.
  if (residual.defined() && residual.shape() != x.shape())
    fail("FeedForward({}): the residual to add is {}, expected the input's {}", extra_repr(),
         shape_str(residual.shape()), shape_str(x.shape()));
  // fc2 (activation (fc1 x)) as one op (activation_linear: for the GELUs,
  // their gradient multiplied into fc2's dX in the product's epilogue).
  const Tensor a = fc1->forward(x);  // [.., hidden]
  if (!residual.defined())
    return dropout(activation_linear(a, options.activation_, fc2->weight, fc2->bias), options.dropout_,
                   is_training());
  if (options.dropout_ > 0 && is_training())
    return residual +
           dropout(activation_linear(a, options.activation_, fc2->weight, fc2->bias), options.dropout_, true);
  return activation_linear(a, options.activation_, fc2->weight, fc2->bias, residual);
}

std::string FeedForward::extra_repr() const {
  std::string s = fmt::format("dim={}, hidden={}, activation={}, bias={}", options.dim_, options.hidden_,
                              activation_name(options.activation_), options.bias_ ? "True" : "False");
  if (options.dropout_ > 0) s += fmt::format(", dropout={}", options.dropout_);
  return s;
}

// ---- TransformerBlock ----
TransformerBlock::TransformerBlock(const TransformerBlockOptions& o) : Module("TransformerBlock"), options(o) {
  if (o.dim_ <= 0 || o.heads_ <= 0)
    fail("TransformerBlock: dim and heads must be positive, got dim={} heads={}", o.dim_, o.heads_);
  check_rate("TransformerBlock", o.dropout_);
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(LayerNormOptions(o.dim_).eps(o.ln_eps_)));
  attn = register_module("attn", std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions(o.dim_, o.heads_)
                                                                          .kv_heads(o.kv_heads_)
                                                                          .causal(o.causal_)
                                                                          .bias(o.attn_bias_)
                                                                          .dropout(o.dropout_)
                                                                          .generator(o.gen_)));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(LayerNormOptions(o.dim_).eps(o.ln_eps_)));
  ffn = register_module("ffn", std::make_shared<FeedForward>(FeedForwardOptions(o.dim_)
                                                                 .hidden(o.ffn_hidden_)
                                                                 .activation(o.activation_)
                                                                 .bias(o.ffn_bias_)
                                                                 .dropout(o.dropout_)
                                                                 .generator(o.gen_)));
  options.ffn_hidden_ = ffn->options.hidden_;
  options.kv_heads_ = attn->options.kv_heads_;
}

std::string TransformerBlock::extra_repr() const {
  return fmt::format("dim={}, heads={}, {}", options.dim_, options.heads_, options.pre_ln_ ? "pre-LN" : "post-LN");
}

Tensor TransformerBlock::forward(const Tensor& x) { return block(x, nullptr); }

Tensor TransformerBlock::forward_cached(const Tensor& x_new, KVCache& cache) { return block(x_new, &cache); }

Tensor TransformerBlock::block(const Tensor& x, KVCache* cache) {
  check_defined(x, "TransformerBlock");
  if (x.dim() != 3 || x.size(2) != options.dim_)
    fail("TransformerBlock({}): expected input [N, T, {}], got {}", extra_repr(), options.dim_, shape_str(x.shape()));
  auto attend = [&](const Tensor& h) {
    return dropout(cache ? attn->forward_cached(h, *cache) : attn->forward(h), options.dropout_, is_training());
  };
  if (options.pre_ln_) {
    // Without an active dropout or a cache, each residual add goes into the
    // epilogue of the product before it (out_proj, fc2): the same values,
    // without the add's own pass over the residual stream and its output
    // block. GPT-128's [768, 128] out projection + add 130 -> 123 us, fc2
    // [768, 512] -> 128 + add 490 -> 480 us (2 threads).
    if (!cache && (options.dropout_ == 0 || !is_training())) {
      Tensor h = attn->forward_add(ln1->forward(x), x);
      return ffn->forward_add(ln2->forward(h), h);
    }
    Tensor h = x + attend(ln1->forward(x));
    return h + ffn->forward(ln2->forward(h));
  }
  Tensor h = ln1->forward(x + attend(x));
  return ln2->forward(h + ffn->forward(h));
}

// ---- GPT ----
GPT::GPT(const GPTOptions& o) : Module("GPT"), options(o) {
  if (o.vocab_ <= 0 || o.dim_ <= 0 || o.layers_ <= 0 || o.heads_ <= 0 || o.context_ <= 0)
    fail("GPT: vocab, dim, layers, heads and context must be positive, got vocab={} dim={} layers={} heads={} "
         "context={}",
         o.vocab_, o.dim_, o.layers_, o.heads_, o.context_);
  check_rate("GPT", o.dropout_);
  wte = register_module("wte", std::make_shared<Embedding>(EmbeddingOptions(o.vocab_, o.dim_).generator(o.gen_)));
  if (o.learned_positions_)
    wpe = register_module("wpe", std::make_shared<LearnedPositionalEmbedding>(o.context_, o.dim_, o.gen_));
  else
    wpe_fixed = register_module("wpe", std::make_shared<SinusoidalPositionalEncoding>(o.context_, o.dim_));
  auto list = register_module("blocks", std::make_shared<Sequential>());
  for (int64_t i = 0; i < o.layers_; ++i) {
    auto b = std::make_shared<TransformerBlock>(TransformerBlockOptions(o.dim_, o.heads_)
                                                    .pre_ln(o.pre_ln_)
                                                    .ffn_hidden(o.ffn_hidden_)
                                                    .activation(o.activation_)
                                                    .dropout(o.dropout_)
                                                    .causal(true)
                                                    .kv_heads(o.kv_heads_)
                                                    .attn_bias(o.bias_)
                                                    .ffn_bias(o.bias_)
                                                    .generator(o.gen_));
    list->push_back(b);
    blocks.push_back(b);
  }
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(o.dim_));
  if (!o.tie_weights_)
    lm_head = register_module("lm_head", std::make_shared<Linear>(
                                             LinearOptions(o.dim_, o.vocab_).bias(false).generator(o.gen_)));

  // GPT-2's initialisation (as nanoGPT writes it), replacing the layers'
  // PyTorch defaults. The residual projections are scaled down so the
  // residual stream's variance does not grow with depth.
  if (o.init_ == GPTOptions::Init::torch) return;
  Generator& g = init_generator(o.gen_);
  const double std0 = 0.02, std_res = 0.02 / std::sqrt(2.0 * static_cast<double>(o.layers_));
  auto init = [&](const Linear& l, double std) {
    kernel::normal_(l.weight, 0.0, std, g);
    if (l.bias.defined()) kernel::fill_(l.bias, 0.0);
  };
  kernel::normal_(wte->weight, 0.0, std0, g);
  if (wpe) kernel::normal_(wpe->weight, 0.0, std0, g);
  for (auto& b : blocks) {
    init(*b->attn->q_proj, std0);
    init(*b->attn->k_proj, std0);
    init(*b->attn->v_proj, std0);
    init(*b->attn->out_proj, std_res);
    init(*b->ffn->fc1, std0);
    init(*b->ffn->fc2, std_res);
  }
  if (lm_head) init(*lm_head, std0);
}

std::string GPT::extra_repr() const {
  return fmt::format("vocab={}, dim={}, layers={}, heads={}, context={}, tie_weights={}", options.vocab_,
                     options.dim_, options.layers_, options.heads_, options.context_,
                     options.tie_weights_ ? "True" : "False");
}

Tensor GPT::embed(const Tensor& ids, int64_t start) {
  check_defined(ids, "GPT");
  if (ids.dim() != 2 || ids.dtype() != DType::i64)
    fail("GPT({}): expected int64 token ids [N, T], got {} {}", extra_repr(), dtype_name(ids.dtype()),
         shape_str(ids.shape()));
  const int64_t T = ids.size(1);
  if (start + T > options.context_) {
    if (start == 0)
      fail("GPT({}): sequence length T={} exceeds the context of {} positions", extra_repr(), T, options.context_);
    fail("GPT({}): positions {}..{} (cache length {} + t={}) exceed the context of {} positions", extra_repr(), start,
         start + T - 1, start, T, options.context_);
  }
  Tensor h = wte->forward(ids);  // [N, T, D]
  h = wpe ? wpe->forward(h, start) : wpe_fixed->forward(h, start);
  return dropout(h, options.dropout_, is_training());
}

Tensor GPT::head(const Tensor& h) {
  Tensor y = ln_f->forward(h);
  return lm_head ? lm_head->forward(y) : matmul(y, transpose(wte->weight, 0, 1));  // [N, T, V]
}

Tensor GPT::forward(const Tensor& ids) {
  Tensor h = embed(ids, 0);
  for (auto& b : blocks) h = b->forward(h);
  return head(h);
}

Tensor GPT::forward_cached(const Tensor& ids_new, GPTCache& cache) {
  if (cache.layers.empty()) cache.layers.resize(blocks.size());
  if (cache.layers.size() != blocks.size())
    fail("GPT({}): the cache holds {} layers, the model has {}", extra_repr(), cache.layers.size(), blocks.size());
  Tensor h = embed(ids_new, cache.length());
  for (size_t i = 0; i < blocks.size(); ++i) h = blocks[i]->forward_cached(h, cache.layers[i]);
  return head(h);
}

void GPT::keep_attention(bool on) {
  for (auto& b : blocks) b->attn->keep_attention(on);
}

std::vector<Tensor> GPT::attention_maps() const {
  std::vector<Tensor> maps;
  for (const auto& b : blocks) maps.push_back(b->attn->last_attention());
  return maps;
}

// ---- nanoGPT's names ----

namespace {
// "blocks.3.attn.q_proj.weight" -> {3, "attn.q_proj.weight"}; false when not a block's.
bool block_key(const std::string& k, const std::string& prefix, int64_t& layer, std::string& rest) {
  if (k.rfind(prefix, 0) != 0) return false;
  const size_t dot = k.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  const std::string num = k.substr(prefix.size(), dot - prefix.size());
  // A layer number as written: "0" or no leading zero, and short enough for
  // int64 ("00" or 20 digits name no layer: std::stoll threw on the latter).
  if (num.empty() || num.size() > 9 || num.find_first_not_of("0123456789") != std::string::npos ||
      (num.size() > 1 && num[0] == '0'))
    return false;
  layer = std::stoll(num);
  rest = k.substr(dot + 1);
  return true;
}

const std::vector<std::pair<std::string, std::string>>& block_names() {  // heed -> nanoGPT, inside a block
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"ln1.", "ln_1."}, {"ln2.", "ln_2."}, {"attn.out_proj.", "attn.c_proj."}, {"ffn.fc1.", "mlp.c_fc."},
      {"ffn.fc2.", "mlp.c_proj."}};
  return names;
}

const std::vector<std::pair<std::string, std::string>>& top_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"wte.weight", "transformer.wte.weight"}, {"wpe.weight", "transformer.wpe.weight"},
      {"ln_f.weight", "transformer.ln_f.weight"}, {"ln_f.bias", "transformer.ln_f.bias"},
      {"lm_head.weight", "lm_head.weight"},      {"lm_head.bias", "lm_head.bias"}};
  return names;
}
}  // namespace

std::string nanogpt_unsupported(const GPTOptions& o) {
  if (!o.pre_ln_) return "post-LN blocks (pre_ln(false)); nanoGPT's are pre-LN";
  if (o.activation_ != Activation::gelu)
    return fmt::format("activation {} (activation()); nanoGPT's MLP uses exact GELU", activation_name(o.activation_));
  if (o.ffn_hidden_ != 0 && o.ffn_hidden_ != 4 * o.dim_)
    return fmt::format("an FFN hidden width of {} (ffn_hidden()); nanoGPT's MLP is 4 x dim = {}", o.ffn_hidden_,
                       4 * o.dim_);
  if (o.kv_heads_ != 0 && o.kv_heads_ != o.heads_)
    return fmt::format("grouped-query attention, kv_heads={} of heads={} (kv_heads()); nanoGPT's c_attn holds q, k "
                       "and v of dim rows each",
                       o.kv_heads_, o.heads_);
  if (!o.learned_positions_)
    return "fixed sinusoidal positions (learned_positions(false)); nanoGPT learns transformer.wpe.weight";
  // nanoGPT's bias=False drops the LayerNorms' biases too, which this GPT
  // keeps: neither of its layouts holds linears without biases beside them.
  if (!o.bias_)
    return "linears without biases beside LayerNorms with them (bias(false)); nanoGPT's bias=True has both, its "
           "bias=False neither";
  return "";
}

std::map<std::string, Tensor> gpt_to_nanogpt(const std::map<std::string, Tensor>& state, const GPTOptions& options) {
  if (const std::string why = nanogpt_unsupported(options); !why.empty())
    fail("gpt_to_nanogpt: nanoGPT's layout cannot hold this GPT: {}", why);
  std::map<std::string, Tensor> out;
  std::map<std::string, std::array<Tensor, 3>> qkv;  // "transformer.h.<i>.attn.c_attn.<w>" -> q, k, v
  for (const auto& [k, t] : state) {
    int64_t layer = 0;
    std::string rest;
    bool done = false;
    for (const auto& [heed, nano] : top_names())
      if (k == heed) {
        out[nano] = t;
        done = true;
      }
    if (!done && block_key(k, "blocks.", layer, rest)) {
      const std::string h = fmt::format("transformer.h.{}.", layer);
      for (const auto& [heed, nano] : block_names())
        if (rest.rfind(heed, 0) == 0) {
          out[h + nano + rest.substr(heed.size())] = t;
          done = true;
        }
      for (int j = 0; j < 3 && !done; ++j) {
        const std::string proj = std::string("attn.") + "qkv"[j] + "_proj.";
        if (rest.rfind(proj, 0) == 0) {
          qkv[h + "attn.c_attn." + rest.substr(proj.size())][static_cast<size_t>(j)] = t;
          done = true;
        }
      }
    }
    if (!done) fail("gpt_to_nanogpt: '{}' has no name in nanoGPT's layout", k);
  }
  for (const auto& [name, parts] : qkv) {
    for (const Tensor& p : parts)
      if (!p.defined()) fail("gpt_to_nanogpt: '{}' needs q_proj, k_proj and v_proj alike", name);
    // Thirds of equal rows are all that gpt_from_nanogpt, and PyTorch's
    // split(dim), can take apart again.
    if (parts[1].shape() != parts[0].shape() || parts[2].shape() != parts[0].shape())
      fail("gpt_to_nanogpt: '{}' would fuse q {}, k {} and v {}; expected three equal shapes", name,
           shape_str(parts[0].shape()), shape_str(parts[1].shape()), shape_str(parts[2].shape()));
    out[name] = kernel::concat({parts[0], parts[1], parts[2]}, 0);
  }
  return out;
}

std::map<std::string, Tensor> gpt_from_nanogpt(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> out;
  std::map<std::string, std::string> source;  // heed name -> the nanoGPT key it came from
  for (const auto& [k, t] : state) {
    int64_t layer = 0;
    std::string rest;
    bool done = false;
    auto put = [&, &k = k](const std::string& name, const Tensor& v) {
      if (auto [it, fresh] = source.emplace(name, k); !fresh)
        fail("gpt_from_nanogpt: '{}' and '{}' both give heed's '{}'", safetensors::printable(it->second),
             safetensors::printable(k), safetensors::printable(name));
      out[name] = v;
    };
    for (const auto& [heed, nano] : top_names())
      if (k == nano) {
        put(heed, t);
        done = true;
      }
    if (!done && block_key(k, "transformer.h.", layer, rest)) {
      const std::string b = fmt::format("blocks.{}.", layer);
      if (rest == "attn.bias" || rest == "attn.masked_bias") continue;  // nanoGPT's causal mask, not a weight
      for (const auto& [heed, nano] : block_names())
        if (rest.rfind(nano, 0) == 0) {
          put(b + heed + rest.substr(nano.size()), t);
          done = true;
        }
      if (!done && rest.rfind("attn.c_attn.", 0) == 0) {
        if (t.dim() < 1 || t.size(0) % 3 != 0)
          fail("gpt_from_nanogpt: '{}' has shape {}, expected the q, k and v rows stacked (a multiple of 3)",
               safetensors::printable(k),
               shape_str(t.shape()));
        const int64_t d = t.size(0) / 3;
        const std::string w = rest.substr(12);
        for (int j = 0; j < 3; ++j)
          put(b + "attn." + "qkv"[j] + "_proj." + w, kernel::contiguous(kernel::narrow(t, 0, j * d, d)));
        done = true;
      }
    }
    if (!done) fail("gpt_from_nanogpt: '{}' is not a name of nanoGPT's layout heed knows", safetensors::printable(k));
  }
  return out;
}

void GPT::load_state_dict(const std::map<std::string, Tensor>& state) {
  bool nanogpt = false;
  for (const auto& [k, t] : state) nanogpt = nanogpt || k.rfind("transformer.", 0) == 0;
  if (nanogpt) {
    if (const std::string why = nanogpt_unsupported(options); !why.empty())
      fail("GPT({}): the state is under nanoGPT's names, which stand for nanoGPT's model; this GPT has {}",
           extra_repr(), why);
    // Checked under the state's own names and shapes (a fused c_attn as one
    // entry), which its writer knows; after the conversion they would be
    // heed's, and c_attn three entries of a third of its rows each.
    std::map<std::string, Tensor> given;
    for (const auto& [k, t] : state) {
      int64_t layer = 0;
      std::string rest;
      const bool mask = block_key(k, "transformer.h.", layer, rest) && (rest == "attn.bias" || rest == "attn.masked_bias");
      const bool tied_head = options.tie_weights_ && k == "lm_head.weight";  // checked against wte below
      if (!mask && !tied_head) given.emplace(k, t);
    }
    if (const std::string what = state_dict_mismatch(gpt_to_nanogpt(state_dict(), options), given); !what.empty())
      fail("load_state_dict: the state (nanoGPT's names) does not fit GPT({}){}", extra_repr(), what);
  }
  std::map<std::string, Tensor> s = nanogpt ? gpt_from_nanogpt(state) : state;
  // PyTorch's state_dict lists a tied weight under each of its names: a tied
  // nanoGPT's holds lm_head.weight beside transformer.wte.weight, the same
  // values. A tied GPT takes it when the two are equal; a head of its own
  // needs an untied GPT.
  auto head = s.find("lm_head.weight"), wte_it = s.find("wte.weight");
  if (options.tie_weights_ && head != s.end()) {
    if (wte_it != s.end() && (head->second.shape() != wte_it->second.shape() ||
                              head->second.to_vector<double>() != wte_it->second.to_vector<double>()))
      fail("GPT({}): lm_head is tied to wte, but the state dict's lm_head.weight {} differs from its wte.weight {} "
           "(the weights of an untied model: build the GPT with tie_weights(false))",
           extra_repr(), shape_str(head->second.shape()), shape_str(wte_it->second.shape()));
    s.erase(head);
  }
  Module::load_state_dict(s);
}

}  // namespace heed::nn
