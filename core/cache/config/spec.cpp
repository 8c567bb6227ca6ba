// SPEC strings: parsing (`quanto:nbits=2,q_group_size=32`), the canonical form, and grids of them for sweeps.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "cache/config/detail.h"

namespace kvscope::cache {

namespace {

bool looksLikePath(std::string_view spec) {
  if (spec.find('/') != std::string_view::npos) return true;
  if (spec.size() > 5 && spec.substr(spec.size() - 5) == ".json") return true;
  std::error_code ec;
  return spec.find(':') == std::string_view::npos && std::filesystem::is_regular_file(std::string(spec), ec);
}

}  // namespace

CacheConfig parseSpec(std::string_view specIn) {
  using detail::trim;
  const std::string spec = trim(specIn);
  if (spec.empty()) throw ConfigError("backend", "empty cache spec (try `fp8`, `quanto:nbits=2` or a JSON file)");
  if (spec.rfind(detail::kLayersPrefix, 0) == 0) return detail::parseLayersSpec(spec);
  if (spec.rfind(detail::kTiersPrefix, 0) == 0) return detail::parseTiersSpec(spec);
  if (looksLikePath(spec)) return loadConfigFile(spec);
  const auto colon = spec.find(':');
  CacheConfig cfg;
  cfg.backend = parseBackend(trim(spec.substr(0, colon)));
  if (colon != std::string::npos) {
    std::stringstream rest(spec.substr(colon + 1));
    std::string item;
    std::vector<std::string> seen;
    while (std::getline(rest, item, ',')) {
      item = trim(item);
      if (item.empty()) continue;
      const auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
        throw ConfigError(item, fmt::format("bad option `{}` in cache spec `{}` (write key=value)", item, spec));
      const std::string key = trim(item.substr(0, eq));
      // A key set twice is a mistake, not an override.
      if (std::find(seen.begin(), seen.end(), key) != seen.end())
        throw ConfigError(key, fmt::format("option `{}` is given twice in cache spec `{}`", key, spec));
      seen.push_back(key);
      detail::applyOption(cfg, key, detail::specValue(trim(item.substr(eq + 1))));
    }
  }
  validate(cfg);
  return cfg;
}

std::string toSpec(const CacheConfig& cfg) {
  if (cfg.mixed()) return detail::layersToSpec(cfg);
  if (cfg.tiered()) return detail::tiersToSpec(cfg);
  std::vector<std::string> parts;
  // transformers' keys first, whichever backend (an unvalidated config's label shows them all), then the
  // backend's own options in display order.
  const auto add = [&](std::string_view key) {
    if (const auto* f = detail::findField(key); f->isSet(cfg))
      parts.push_back(fmt::format("{}={}", key, detail::valueText(f->value(cfg))));
  };
  for (std::string_view key : detail::kGroupWiseKeys) add(key);
  for (const auto& o : backendOptions(cfg.backend))
    if (!detail::isGroupWiseKey(o.name)) add(o.name);
  std::string s(backendName(cfg.backend));
  if (!parts.empty()) s += ":" + fmt::format("{}", fmt::join(parts, ","));
  // Calibrated scales live in JSON files only: the label says so (it is not a SPEC that parses back).
  if (!cfg.keyScales.empty()) s += " [calibrated]";
  return s;
}

std::vector<std::string> expandGrid(std::string_view gridIn) {
  using detail::trim;
  constexpr std::size_t kMaxGridConfigs = 4096;  // a sweep of more is a typo, not a plan
  const std::string grid = trim(gridIn);
  // A per-layer or tiered SPEC is one config (its `:` and `,` are its own).
  if (grid.rfind(detail::kLayersPrefix, 0) == 0 || grid.rfind(detail::kTiersPrefix, 0) == 0) return {grid};
  const auto colon = grid.find(':');
  std::vector<std::string> specs{trim(grid.substr(0, colon))};
  if (specs.front().empty()) throw ConfigError("backend", fmt::format("grid `{}` names no backend", grid));
  if (colon == std::string::npos) return specs;
  std::stringstream rest(grid.substr(colon + 1));
  std::string axis;
  while (std::getline(rest, axis, ';')) {
    axis = trim(axis);
    if (axis.empty()) continue;
    const auto eq = axis.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(axis, fmt::format("bad grid axis `{}` in `{}` (write key=v1,v2,...)", axis, grid));
    const std::string key = trim(axis.substr(0, eq));
    std::vector<std::string> values;
    std::stringstream vs(axis.substr(eq + 1));
    std::string v;
    while (std::getline(vs, v, ','))
      if (!trim(v).empty()) values.push_back(trim(v));
    if (values.empty()) throw ConfigError(key, fmt::format("grid axis `{}` has no values", key));
    if (specs.size() * values.size() > kMaxGridConfigs)
      throw ConfigError(key, fmt::format("grid `{}` expands to more than {} configs", grid, kMaxGridConfigs));
    std::vector<std::string> next;
    for (const auto& s : specs)
      for (const auto& val : values) {
        std::string one = s;
        one += s.find(':') == std::string::npos ? ":" : ",";
        one += key;
        one += "=";
        one += val;
        next.push_back(std::move(one));
      }
    specs = std::move(next);
  }
  return specs;
}

}  // namespace kvscope::cache
