// Inside the config library: the option descriptors and the helpers its files share. Not installed, not included
// outside core/cache/config/.
#pragma once

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "cache/config.h"
#include "util/layer_ranges.h"

namespace kvscope::cache::detail {

using nlohmann::json;

/// One option as a field of CacheConfig: the only place that knows how the option is set from a SPEC or JSON value,
/// whether it is set, its resolved value, and what each export target says when it cannot express it. Which backends
/// take it, with which choices, default and help, is backendOptions()'s table (OptionInfo, in options.cpp).
struct OptionField {
  std::string_view name;
  /// Options several backends share (sink, attention) are written only when set; a backend's own options are written
  /// resolved, so that a file does not depend on any version's defaults.
  bool writtenOnlyWhenSet = false;
  void (*set)(CacheConfig& cfg, const json& value, const OptionInfo* info) = nullptr;
  bool (*isSet)(const CacheConfig& cfg) = nullptr;  ///< given explicitly, or differing from the default
  json (*value)(const CacheConfig& cfg) = nullptr;  ///< the resolved value
  /// Why a target cannot express a set value; empty: it can (or another note covers it). Notes read
  /// "NAME=VALUE has no transformers equivalent: WHY" and "NAME=VALUE: WHY" (vLLM, llama.cpp).
  std::string_view hfWhy, vllmWhy, llamaCppWhy;
};

/// transformers' group-wise keys (CacheConfig's std::optional<int> fields), in the order SPECs and messages list them.
inline constexpr std::array<std::string_view, 5> kGroupWiseKeys{"nbits", "axis_key", "axis_value", "q_group_size",
                                                                "residual_length"};
inline bool isGroupWiseKey(std::string_view key) {
  return std::find(kGroupWiseKeys.begin(), kGroupWiseKeys.end(), key) != kGroupWiseKeys.end();
}

/// The field behind an option name; nullptr for an unknown name.
const OptionField* findField(std::string_view name);
/// The option `name` of backend `b`, or nullptr.
const OptionInfo* findOption(Backend b, std::string_view name);
/// Sets `key` from a SPEC or JSON value, checking that `cfg.backend` takes it and the value's type. Throws ConfigError.
void applyOption(CacheConfig& cfg, std::string_view key, const json& value);
/// A SPEC value as JSON: integers stay integers (a JSON round trip keeps them numbers), everything else is text.
json specValue(std::string_view text);
/// A value as a SPEC writes it.
std::string valueText(const json& v);

std::string trim(std::string_view s);

/// transformers' cache_config of a uniform config: the backend and its transformers keys, resolved.
json hfDict(const CacheConfig& cfg);
/// The notes a target gives for the set options it cannot express (`why` picks the target's text).
/// `skip`: an option the caller knows carries over for this config (its note would be wrong), or empty.
std::vector<std::string> optionNotes(const CacheConfig& cfg, std::string_view OptionField::*why, bool hfWording,
                                     std::string_view skip = {});

/// The sliding-window layers of `windows` (those with a window > 0).
std::vector<int> slidingLayers(const LayerWindows& windows);

// Tiers by age (`tiers=...`, tiers.cpp).
inline constexpr std::string_view kTiersPrefix = "tiers=";
void validateTiers(const CacheConfig& cfg);
CacheConfig parseTiersSpec(const std::string& spec);
CacheConfig tiersFromJson(const json& doc, std::string_view origin);
std::string tiersToKvscopeJson(const CacheConfig& cfg);
std::string tiersToSpec(const CacheConfig& cfg);
/// What an export to `target` says of a tiered config: the oldest tier's format stands for every token.
std::string tiersNote(const CacheConfig& cfg, std::string_view target);
/// A tiered config exported to a target without tiers: `exportOf` of its oldest tier's config, tiersNote first.
template <class Export, class Fn>
Export exportOldestTier(const CacheConfig& cfg, std::string_view target, Fn exportOf) {
  CacheConfig oldest = cfg;
  oldest.tiers.clear();
  Export e = exportOf(oldest);
  e.notes.insert(e.notes.begin(), tiersNote(cfg, target));
  return e;
}

// Per-layer configs (`layers=...`, layers.cpp).
inline constexpr std::string_view kLayersPrefix = "layers=";
void validateLayers(const CacheConfig& cfg);
CacheConfig parseLayersSpec(const std::string& spec);
CacheConfig layersFromJson(const json& doc, std::string_view origin);
std::string layersToKvscopeJson(const CacheConfig& cfg);
std::string layersToSpec(const CacheConfig& cfg);
/// The `*` rule, or nullptr.
const LayerRule* wildcardRule(const CacheConfig& cfg);
/// "the `*` rule" or "layers N-M", for messages and notes.
std::string ruleWhat(const LayerRule& r);
/// The note each target gives for a rule it cannot export.
std::string notExported(const LayerRule& r, std::string_view why);

}  // namespace kvscope::cache::detail
