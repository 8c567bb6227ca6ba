// Tiers by age (`tiers=256:bf16,4096:fp8,*:nvfp4`): the newest tokens in the first format, older ones moved down a
// tier once they pass its age, as engines move cold pages to a smaller format. Parsing (SPEC and JSON), validation,
// serialisation, and each format's single-backend config (what the layer stores a tier as, and what the exports and
// bits per value speak of).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <charconv>
#include <sstream>

#include "cache/config/detail.h"

namespace kvscope::cache {

namespace {

// The formats a tier takes: the row formats of the llamacpp, vllm and mxfp4 backends, one name each.
constexpr std::array<std::string_view, 14> kTierFormats{"f16",  "bf16",  "q8_0",         "q4_0", "q4_1",
                                                        "q5_0", "q5_1",  "iq4_nl",       "fp8",  "int8",
                                                        "int4", "nvfp4", "nvfp4_4over6", "mxfp4"};

std::string tierText(const AgeTier& t) {
  return fmt::format("{}:{}", t.age > 0 ? std::to_string(t.age) : std::string("*"), t.format);
}

}  // namespace

CacheConfig tierFormatConfig(std::string_view format) {
  CacheConfig c;
  const std::string f(format);
  for (int i = 0; i <= static_cast<int>(LlamaCppType::IQ4_NL); ++i)
    if (llamaCppTypeName(static_cast<LlamaCppType>(i)) == f) {
      c.backend = Backend::LlamaCpp;
      c.typeK = c.typeV = static_cast<LlamaCppType>(i);
      return c;
    }
  c.backend = Backend::Vllm;
  if (f == "fp8")
    c.vllmKv = VllmKv::Fp8PerTokenHead;
  else if (f == "int8")
    c.vllmKv = VllmKv::Int8PerTokenHead;
  else if (f == "int4")
    c.vllmKv = VllmKv::Int4PerTokenHead;
  else if (f == "nvfp4")
    c.vllmKv = VllmKv::Nvfp4;
  else if (f == "nvfp4_4over6")
    c.vllmKv = VllmKv::Nvfp4FourOverSix;
  else if (f == "mxfp4")
    c.backend = Backend::Mxfp4;
  else
    throw ConfigError("tiers", fmt::format("unknown tier format `{}` (one of {})", f, fmt::join(kTierFormats, ", ")));
  return c;
}

namespace detail {

void validateTiers(const CacheConfig& cfg) {
  const auto& t = cfg.tiers;
  const std::string spec = tiersToSpec(cfg);
  if (t.size() < 2)
    throw ConfigError("tiers", fmt::format("`{}` needs at least two tiers, the last `*` (every older token)", spec));
  for (std::size_t i = 0; i < t.size(); ++i) {
    tierFormatConfig(t[i].format);  // a known format, or the error naming the choices
    const bool last = i + 1 == t.size();
    if (last != (t[i].age == 0))
      throw ConfigError("tiers",
                        fmt::format("in `{}`, only the last tier is `*` (every older token), and it must be", spec));
    if (!last && (t[i].age < 0 || (i > 0 && t[i].age <= t[i - 1].age)))
      throw ConfigError("tiers",
                        fmt::format("in `{}`, the ages must grow: a tier holds the tokens younger than its age and "
                                    "not in a newer tier",
                                    spec));
  }
}

CacheConfig parseTiersSpec(const std::string& spec) {
  CacheConfig cfg;
  std::stringstream rest(spec.substr(kTiersPrefix.size()));
  std::string item;
  while (std::getline(rest, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    const auto colon = item.find(':');
    if (colon == std::string::npos)
      throw ConfigError("tiers", fmt::format("bad tier `{}` in `{}` (write AGE:FORMAT or *:FORMAT)", item, spec));
    AgeTier tier;
    const std::string age = trim(item.substr(0, colon));
    tier.format = trim(item.substr(colon + 1));
    if (age != "*") {
      const auto [p, ec] = std::from_chars(age.data(), age.data() + age.size(), tier.age);
      if (age.empty() || ec != std::errc() || p != age.data() + age.size() || tier.age <= 0)
        throw ConfigError("tiers",
                          fmt::format("bad tier age `{}` in `{}` (a number of tokens above 0, or `*`)", age, spec));
    }
    cfg.tiers.push_back(tier);
  }
  validateTiers(cfg);
  // The single-backend view of the cache (exports, bits per value): its oldest tier, where a long context lives.
  const std::vector<AgeTier> tiers = cfg.tiers;
  cfg = tierFormatConfig(tiers.back().format);
  cfg.tiers = tiers;
  return cfg;
}

CacheConfig tiersFromJson(const json& doc, std::string_view origin) {
  const json& list = doc["tiers"];
  if (!list.is_array())
    throw ConfigError("tiers",
                      fmt::format("{}: `tiers` must be a list of {{\"age\": N or \"*\", \"format\": F}}", origin));
  std::vector<std::string> items;
  for (const json& t : list) {
    if (!t.is_object() || !t.contains("age") || !t.contains("format") || !t["format"].is_string() ||
        !(t["age"].is_number_integer() || t["age"] == "*"))
      throw ConfigError("tiers", fmt::format("{}: each tier is {{\"age\": N or \"*\", \"format\": F}}", origin));
    items.push_back(fmt::format("{}:{}",
                                t["age"].is_string() ? std::string("*") : std::to_string(t["age"].get<long long>()),
                                t["format"].get<std::string>()));
  }
  try {
    return parseTiersSpec(std::string(kTiersPrefix) + fmt::format("{}", fmt::join(items, ",")));
  } catch (const ConfigError& e) {
    throw ConfigError(e.key(), fmt::format("{}: {}", origin, e.what()));
  }
}

std::string tiersToKvscopeJson(const CacheConfig& cfg) {
  json doc = json::object();
  doc["format"] = "kvscope-cache-config";
  doc["version"] = 1;
  json list = json::array();
  for (const AgeTier& t : cfg.tiers)
    list.push_back({{"age", t.age > 0 ? json(t.age) : json("*")}, {"format", t.format}});
  doc["tiers"] = list;
  return doc.dump(2);
}

std::string tiersToSpec(const CacheConfig& cfg) {
  std::vector<std::string> parts;
  parts.reserve(cfg.tiers.size());
  for (const AgeTier& t : cfg.tiers) parts.push_back(tierText(t));
  return std::string(kTiersPrefix) + fmt::format("{}", fmt::join(parts, ","));
}

std::string tiersNote(const CacheConfig& cfg, std::string_view target) {
  return fmt::format("{} has no tiers by age: this is the oldest tier's format ({}) for every token; kvscope keeps {}",
                     target, cfg.tiers.back().format, tiersToSpec(cfg).substr(kTiersPrefix.size()));
}

}  // namespace detail

}  // namespace kvscope::cache
