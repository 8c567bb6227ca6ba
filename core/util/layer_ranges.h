// Layer indices written as ranges ("0-4,6"), as the model card, the exports' notes and the doctor name them.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

namespace kvscope::util {

/// Ascending layer indices as ranges: {0, 1, 2, 4} -> "0-2,4".
inline std::string layerRanges(const std::vector<int>& layers) {
  std::string out;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    out += fmt::format("{}{}", out.empty() ? "" : ",", layers[i]);
    if (j > i) out += fmt::format("-{}", layers[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace kvscope::util
