#include "model/model_config.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/layer_ranges.h"

namespace kvscope::model {

std::string describeFfn(const ModelConfig& c) {
  std::vector<int> moe, dense;
  for (std::size_t l = 0; l < c.layerSpecs.size(); ++l)
    (c.layerSpecs[l].ffn == FfnKind::Moe ? moe : dense).push_back(static_cast<int>(l));
  const std::string glu = c.act == FfnAct::GeluTanh    ? "GeGLU"
                          : c.act == FfnAct::SwigluOai ? fmt::format("clamped SwiGLU (limit {:g})", c.swigluLimit)
                                                       : "SwiGLU";
  if (moe.empty()) return fmt::format("dense {} FFN of {}", glu, c.intermediate);
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
  if (windows.empty()) return "full attention" + withSinks;
  std::string s;
  for (const auto& [w, ls] : windows)
    s += fmt::format("{}sliding window {} on layers {}", s.empty() ? "" : "; ", w, util::layerRanges(ls));
  if (!full.empty()) s += fmt::format("; full attention on layers {}", util::layerRanges(full));
  return s + withSinks;
}

}  // namespace kvscope::model
