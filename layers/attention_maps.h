// layers/attention_maps.h: the attention maps of every attention layer in a
// model, for logging and plotting, in a few lines of a training program.
//
//   {
//     nn::KeepAttention keep(model);   // every attention layer keeps its maps
//     autograd::NoGradGuard no_grad;
//     model.eval();                    // no dropout: logging draws nothing from
//     model(probe);                    // the generator, so it cannot change training
//     model.train();
//     for (const auto& [name, map] : keep.maps("attention"))
//       run.log().series(name, run.step(), map);  // "attention/blocks.0.attn", ...
//   }                                  // keeping off again, the maps freed
//
// (heed plot draws a log's series named like attention maps.)
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "layers/module.h"

namespace heed::nn {

// While it lives, every MultiHeadAttention and SelfAttention in root (root
// itself included; found through the registered children, at any depth)
// keeps the maps of each forward: [N, H, T, S] for MultiHeadAttention,
// [N, T, T] for SelfAttention, detached. Keeping takes each layer's plain
// path (the probabilities themselves), the same values as the fused one up
// to rounding and the same dropout masks. The destructor turns keeping off
// again for the layers that were not keeping before, which frees their maps.
// It holds the layers by address: the model must outlive it.
class KeepAttention {
 public:
  explicit KeepAttention(Module& root);
  ~KeepAttention();
  KeepAttention(const KeepAttention&) = delete;
  KeepAttention& operator=(const KeepAttention&) = delete;

  // (name, map) of every attention layer, in the order of root's children:
  // names as in root's state_dict ("blocks.0.attn"; "" for root itself, when
  // root is an attention layer). A layer that has not run since this object
  // began (also one that was keeping already, with an older map) has an
  // undefined map.
  std::vector<std::pair<std::string, Tensor>> maps() const;
  // The same with each name under prefix, as a log's series are named:
  // prefix + "/" + name ("attention/blocks.0.attn"), and prefix itself for
  // root ("attention": the maps of a model that is one attention layer;
  // "attention/" is no name RunLog takes). An empty prefix gives maps().
  std::vector<std::pair<std::string, Tensor>> maps(const std::string& prefix) const;
  // How many attention layers root holds (0: none, and maps() is empty).
  size_t size() const { return layers_.size(); }

 private:
  struct Layer {
    std::string name;
    std::function<void(bool)> keep;
    std::function<Tensor()> map;
    bool was_keeping;
    Tensor before;  // the map it held when this object began (an older forward's), not handed back
  };
  template <class A>
  static Layer layer_of(A* a, const std::string& name);
  std::vector<Layer> layers_;
};

}  // namespace heed::nn
