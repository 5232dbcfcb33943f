// layers/attention_maps.cpp: KeepAttention (layers/attention_maps.h).
#include "layers/attention_maps.h"

#include "layers/attention.h"
#include "layers/self_attention.h"

namespace heed::nn {

template <class A>
KeepAttention::Layer KeepAttention::layer_of(A* a, const std::string& name) {
  return {name, [a](bool on) { a->keep_attention(on); }, [a] { return a->last_attention(); }, a->keeps_attention(),
          a->last_attention()};
}

KeepAttention::KeepAttention(Module& root) {
  std::function<void(Module&, const std::string&)> walk = [&](Module& m, const std::string& name) {
    if (auto* a = dynamic_cast<MultiHeadAttention*>(&m)) layers_.push_back(layer_of(a, name));
    else if (auto* s = dynamic_cast<SelfAttention*>(&m)) layers_.push_back(layer_of(s, name));
    for (const auto& [child, sub] : m.children()) walk(*sub, name.empty() ? child : name + "." + child);
  };
  walk(root, "");
  for (const Layer& l : layers_) l.keep(true);
}

KeepAttention::~KeepAttention() {
  for (const Layer& l : layers_)
    if (!l.was_keeping) l.keep(false);
}

std::vector<std::pair<std::string, Tensor>> KeepAttention::maps() const {
  std::vector<std::pair<std::string, Tensor>> r;
  r.reserve(layers_.size());
  for (const Layer& l : layers_) {
    Tensor m = l.map();
    r.emplace_back(l.name, m.defined() && m.impl() == l.before.impl() ? Tensor() : m);
  }
  return r;
}

std::vector<std::pair<std::string, Tensor>> KeepAttention::maps(const std::string& prefix) const {
  std::vector<std::pair<std::string, Tensor>> r = maps();
  if (prefix.empty()) return r;
  for (auto& named : r) named.first = named.first.empty() ? prefix : prefix + "/" + named.first;
  return r;
}

}  // namespace heed::nn
