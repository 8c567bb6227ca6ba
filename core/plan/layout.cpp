#include "plan/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/gguf.h"
#include "util/json.h"

namespace kvscope::plan {

namespace fs = std::filesystem;
using model::FormatError;

std::string_view layerKindName(LayerKind k) {
  switch (k) {
    case LayerKind::Full:
      return "full";
    case LayerKind::Sliding:
      return "sliding";
    case LayerKind::Shared:
      return "shared";
    case LayerKind::Linear:
      return "linear";
    case LayerKind::Mla:
      return "mla";
  }
  return "?";
}

int ModelLayout::count(LayerKind k) const {
  return static_cast<int>(std::count_if(layers.begin(), layers.end(), [k](const LayerSpec& s) { return s.kind == k; }));
}

int ModelLayout::cachedLayers() const {
  return static_cast<int>(layers.size()) - count(LayerKind::Shared);
}

double dtypeBytes(std::string_view d) {
  if (d == "float32" || d == "fp32" || d == "f32") return 4;
  if (d == "bfloat16" || d == "float16" || d == "half" || d == "bf16" || d == "fp16" || d == "f16") return 2;
  if (d.starts_with("fp8") || d == "int8" || d == "uint8") return 1;
  return 0;
}

namespace {

std::string readText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw FormatError(fmt::format("{}: cannot be read", p.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// An HF directory's weights: the safetensors index's total_size, else the .safetensors files' sizes.
std::optional<std::uint64_t> dirWeightBytes(const fs::path& dir) {
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    JsonParse p = parseBoundedJson(readText(index));
    if (p.problem.empty() && p.value.is_object()) {
      const auto meta = p.value.find("metadata");
      if (meta != p.value.end() && meta->is_object()) {
        const auto total = meta->find("total_size");
        if (total != meta->end() && total->is_number_unsigned()) return total->get<std::uint64_t>();
      }
    }
  }
  std::uint64_t sum = 0;
  bool any = false;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") sum += e.file_size(), any = true;
  return any ? std::optional(sum) : std::nullopt;
}

}  // namespace

ModelLayout loadLayout(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) throw FormatError(fmt::format("{}: no such file or directory", path));
  if (fs::is_directory(p, ec)) {
    const fs::path cfg = p / "config.json";
    if (!fs::exists(cfg, ec))
      throw FormatError(
          fmt::format("{}: no config.json in this directory (plan reads a .gguf, a config.json or a "
                      "model directory)",
                      path));
    ModelLayout m = layoutFromHfConfig(readText(cfg), cfg.string());
    m.weightBytes = dirWeightBytes(p);
    if (m.name.empty()) m.name = p.filename().string();
    return m;
  }
  if (p.extension() == ".gguf") return layoutFromGguf(model::GgufFile(path));
  std::string text = readText(p);
  if (text.size() >= 4 && text.compare(0, 4, "GGUF") == 0) return layoutFromGguf(model::GgufFile(path));
  return layoutFromHfConfig(text, path);
}

}  // namespace kvscope::plan
