#include "model/model_config.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/layer_ranges.h"

namespace kvscope::model {

int ModelConfig::headDimOf(int l) const {
  const int d = layerSpecs.at(static_cast<std::size_t>(l)).headDim;
  return d > 0 ? d : headDim;
}

int ModelConfig::kvHeadsOf(int l) const {
  const int h = layerSpecs.at(static_cast<std::size_t>(l)).kvHeads;
  return h > 0 ? h : kvHeads;
}

int ModelConfig::intermediateOf(int l) const {
  const int f = layerSpecs.at(static_cast<std::size_t>(l)).intermediate;
  return f > 0 ? f : intermediate;
}

double ModelConfig::kvValuesOf(int l) const {
  return layerSpecs.at(static_cast<std::size_t>(l)).kvFrom >= 0 ? 0.0 : 2.0 * kvHeadsOf(l) * headDimOf(l);
}

std::vector<int> ModelConfig::kvSources() const {
  std::vector<int> out;
  out.reserve(layerSpecs.size());
  for (const LayerSpec& s : layerSpecs) out.push_back(s.kvFrom);
  return out;
}

bool ModelConfig::sharesKv() const {
  return std::any_of(layerSpecs.begin(), layerSpecs.end(), [](const LayerSpec& s) { return s.kvFrom >= 0; });
}

std::string describeFfn(const ModelConfig& c) {
  std::vector<int> moe, dense, both;
  for (std::size_t l = 0; l < c.layerSpecs.size(); ++l) {
    const FfnKind k = c.layerSpecs[l].ffn;
    (k == FfnKind::Moe ? moe : k == FfnKind::Dense ? dense : both).push_back(static_cast<int>(l));
  }
  const std::string glu = c.act == FfnAct::GeluTanh    ? "GeGLU"
                          : c.act == FfnAct::SwigluOai ? fmt::format("clamped SwiGLU (limit {:g})", c.swigluLimit)
                                                       : "SwiGLU";
  if (!both.empty())
    return fmt::format(
        "dense {} FFN of {} beside MoE: {} experts of {}, top {} (weights renormalized, per-expert "
        "scales) on layers {}",
        glu, c.intermediate, c.moe.experts, c.moe.intermediate, c.moe.used, util::layerRanges(both));
  if (moe.empty()) {
    std::vector<int> wide;
    for (std::size_t l = 0; l < c.layerSpecs.size(); ++l)
      if (c.intermediateOf(static_cast<int>(l)) != c.intermediate) wide.push_back(static_cast<int>(l));
    if (wide.empty()) return fmt::format("dense {} FFN of {}", glu, c.intermediate);
    return fmt::format("dense {} FFN of {} ({} on layers {})", glu, c.intermediate, c.intermediateOf(wide.front()),
                       util::layerRanges(wide));
  }
  const char* weights = c.moe.gating == MoeGating::TopKSoftmax ? " (softmax over the chosen)"
                        : c.moe.normTopK                       ? " (weights renormalized)"
                                                               : "";
  std::string s = fmt::format("MoE: {} {} experts of {}, top {}{} on layers {}", c.moe.experts, glu, c.moe.intermediate,
                              c.moe.used, weights, util::layerRanges(moe));
  if (!dense.empty()) s += fmt::format("; dense FFN of {} on layers {}", c.intermediate, util::layerRanges(dense));
  return s;
}

std::string describeAttention(const ModelConfig& c) {
  std::vector<int> full;
  std::vector<std::pair<std::int64_t, std::vector<int>>> windows;  // by window, in order of first appearance
  for (std::size_t l = 0; l < c.layerSpecs.size(); ++l) {
    const std::int64_t w = c.layerSpecs[l].window;
    if (w == 0) {
      full.push_back(static_cast<int>(l));
      continue;
    }
    auto it = std::find_if(windows.begin(), windows.end(), [w](const auto& p) { return p.first == w; });
    if (it == windows.end()) it = windows.insert(windows.end(), {w, {}});
    it->second.push_back(static_cast<int>(l));
  }
  std::vector<int> sinks;
  for (std::size_t l = 0; l < c.layerSpecs.size(); ++l)
    if (c.layerSpecs[l].sinks) sinks.push_back(static_cast<int>(l));
  const std::string withSinks =
      sinks.empty() ? "" : fmt::format("; learned attention sinks on layers {}", util::layerRanges(sinks));
  // Gemma 4: the head sizes where the layers differ, and which layers read another's KV.
  std::string extra = withSinks;
  std::vector<int> wide, shared;
  for (std::size_t l = 0; l < c.layerSpecs.size(); ++l) {
    if (c.headDimOf(static_cast<int>(l)) != c.headDim) wide.push_back(static_cast<int>(l));
    if (c.layerSpecs[l].kvFrom >= 0) shared.push_back(static_cast<int>(l));
  }
  if (!wide.empty())
    extra += fmt::format("; head size {} ({} KV head{}{}) on layers {}, {} elsewhere", c.headDimOf(wide.front()),
                         c.kvHeadsOf(wide.front()), c.kvHeadsOf(wide.front()) == 1 ? "" : "s",
                         c.layerSpecs[static_cast<std::size_t>(wide.front())].kEqV ? ", K = V" : "",
                         util::layerRanges(wide), c.headDim);
  if (!shared.empty()) {
    std::vector<int> sources;
    for (const int l : shared) {
      const int from = c.layerSpecs[static_cast<std::size_t>(l)].kvFrom;
      if (std::find(sources.begin(), sources.end(), from) == sources.end()) sources.push_back(from);
    }
    std::sort(sources.begin(), sources.end());
    extra += fmt::format("; layers {} store no KV: they read the KV of layers {}", util::layerRanges(shared),
                         util::layerRanges(sources));
  }
  if (windows.empty()) return "full attention" + extra;
  std::string s;
  for (const auto& [w, ls] : windows)
    s += fmt::format("{}sliding window {} on layers {}", s.empty() ? "" : "; ", w, util::layerRanges(ls));
  if (!full.empty()) s += fmt::format("; full attention on layers {}", util::layerRanges(full));
  return s + extra;
}

}  // namespace kvscope::model
