// Layer indices written as ranges ("0-4,6"), as the model card, the exports' notes and the doctor name them.
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

namespace kvscope::util {

/// Ascending layer indices as runs of consecutive ones, first and last: {0, 1, 2, 4} -> {0, 2}, {4, 4}.
inline std::vector<std::pair<int, int>> layerRuns(const std::vector<int>& layers) {
  std::vector<std::pair<int, int>> runs;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    runs.emplace_back(layers[i], layers[j]);
    i = j + 1;
  }
  return runs;
}

/// The runs as text: {0, 1, 2, 4} -> "0-2,4".
inline std::string layerRanges(const std::vector<int>& layers) {
  std::string out;
  for (const auto& [first, last] : layerRuns(layers)) {
    out += fmt::format("{}{}", out.empty() ? "" : ",", first);
    if (last > first) out += fmt::format("-{}", last);
  }
  return out;
}

}  // namespace kvscope::util
