// Validation of a config's combination, with the reference's own limits and messages.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "cache/config/detail.h"

namespace kvscope::cache {

namespace {

// Group-wise backends: a positive group size and a residual window of 0 or more tokens.
void checkGroupAndWindow(const CacheConfig& cfg) {
  if (cfg.resolvedGroupSize() <= 0)
    throw ConfigError("q_group_size",
                      fmt::format("`q_group_size` must be a positive integer, got {}", cfg.resolvedGroupSize()));
  if (cfg.resolvedResidualLength() < 0)
    throw ConfigError("residual_length",
                      fmt::format("`residual_length` must be 0 or more, got {}", cfg.resolvedResidualLength()));
}

void validateScales(const CacheConfig& cfg) {
  if (cfg.keyScales.empty() && cfg.valueScales.empty()) return;
  if (cfg.backend != Backend::Fp8)
    throw ConfigError("key_scales",
                      fmt::format("calibrated scales are for the `fp8` backend, not `{}`", backendName(cfg.backend)));
  if (cfg.keyScales.size() != cfg.valueScales.size())
    throw ConfigError("key_scales", fmt::format("calibrated scales for {} layers of keys but {} of values",
                                                cfg.keyScales.size(), cfg.valueScales.size()));
  for (const auto* side : {&cfg.keyScales, &cfg.valueScales})
    for (std::size_t l = 0; l < side->size(); ++l) {
      const auto& s = (*side)[l];
      if (s.empty() || (cfg.granularity == Fp8Granularity::Tensor && s.size() != 1))
        throw ConfigError("key_scales", fmt::format("layer {}: {} calibrated scales, granularity={} takes {}", l,
                                                    s.size(), granularityName(cfg.granularity),
                                                    cfg.granularity == Fp8Granularity::Tensor ? "1"
                                                                                              : "one per head "
                                                                                                "(or channel)"));
      for (float x : s)
        if (!std::isfinite(x) || x <= 0.0f)
          throw ConfigError("key_scales", fmt::format("layer {}: calibrated scale {} is not a positive number", l, x));
    }
}

// An int option with a fixed set of values (the option table's choices for `cfg.backend`): transformers' message
// (`what` names the backend as the reference does) when `value` is not one of them.
void checkIntChoice(const CacheConfig& cfg, std::string_view key, int value, std::string_view what) {
  const std::vector<std::string>& allowed = detail::findOption(cfg.backend, key)->choices;
  if (std::find(allowed.begin(), allowed.end(), std::to_string(value)) != allowed.end()) return;
  std::vector<std::string> quoted;
  quoted.reserve(allowed.size());
  for (const auto& a : allowed) quoted.push_back(fmt::format("`{}`", a));
  throw ConfigError(std::string(key), fmt::format("`{}` for `{}` backend has to be one of [{}] but got {}", key, what,
                                                  fmt::join(quoted, ", "), value));
}

}  // namespace

void validate(const CacheConfig& cfg) {
  if (cfg.mixed()) return detail::validateLayers(cfg);
  if (cfg.tiered()) return detail::validateTiers(cfg);
  const std::optional<int>* groupWise[] = {&cfg.nbits, &cfg.axisKey, &cfg.axisValue, &cfg.qGroupSize,
                                           &cfg.residualLength};
  if (cfg.sink < 0) throw ConfigError("sink", fmt::format("`sink` must be 0 or more tokens, got {}", cfg.sink));
  validateScales(cfg);
  if (cfg.sink > 0 && cfg.backend == Backend::Dynamic)
    throw ConfigError("sink", "the `dynamic` backend keeps every token in full precision: `sink` does not apply");
  switch (cfg.backend) {
    case Backend::Dynamic: {
      for (int i = 0; i < 5; ++i)
        if (groupWise[i]->has_value())
          throw ConfigError(
              std::string(detail::kGroupWiseKeys[i]),
              fmt::format("the `dynamic` backend takes no options (got `{}`)", detail::kGroupWiseKeys[i]));
      return;
    }
    case Backend::Fp8: {
      // transformers' own message, word for word (QuantizedCache.__init__).
      std::vector<std::string> unsupported;
      for (int i = 0; i < 5; ++i)
        if (groupWise[i]->has_value()) unsupported.push_back(fmt::format("'{}'", detail::kGroupWiseKeys[i]));
      if (!unsupported.empty()) {
        throw ConfigError(unsupported.front().substr(1, unsupported.front().size() - 2),
                          fmt::format("The `fp8` backend quantizes per-tensor and does not support [{}]. Use the "
                                      "`quanto` or `hqq` backend to quantize group-wise.",
                                      fmt::join(unsupported, ", ")));
      }
      if (!std::isfinite(cfg.headroom) || cfg.headroom <= 0.0)
        throw ConfigError("headroom", fmt::format("`headroom` must be a positive number, got {}", cfg.headroom));
      if (cfg.fp8Scale == Fp8Scale::Unit && !cfg.keyScales.empty())
        throw ConfigError("scale", "scale=unit fixes every scale at 1.0: it does not combine with calibrated scales");
      if (cfg.fp8Scale == Fp8Scale::Unit && cfg.headroom != 1.0)
        throw ConfigError("headroom", "`headroom` multiplies the first update's amax: with scale=unit there is none");
      return;
    }
    case Backend::Quanto:
    case Backend::Hqq: {
      // transformers' messages, word for word (QuantizedCache's checks); the allowed values are the option table's.
      const char* name = cfg.backend == Backend::Quanto ? "quanto" : "HQQ";
      checkIntChoice(cfg, "nbits", cfg.resolvedNbits(), name);
      checkIntChoice(cfg, "axis_key", cfg.resolvedAxisKey(), name);
      checkIntChoice(cfg, "axis_value", cfg.resolvedAxisValue(), name);
      checkGroupAndWindow(cfg);
      return;
    }
    case Backend::LlamaCpp: {
      for (int i = 0; i < 5; ++i)
        if (groupWise[i]->has_value())
          throw ConfigError(std::string(detail::kGroupWiseKeys[i]),
                            fmt::format("the `llamacpp` backend stores llama.cpp's blocks of 32 values (choose them "
                                        "with type_k / type_v): `{}` does not apply",
                                        detail::kGroupWiseKeys[i]));
      return;
    }
    case Backend::Vllm:
    case Backend::Mxfp4: {
      for (int i = 0; i < 5; ++i)
        if (groupWise[i]->has_value())
          throw ConfigError(
              std::string(detail::kGroupWiseKeys[i]),
              fmt::format("the `{}` backend stores its format's fixed blocks ({} values): `{}` does "
                          "not apply",
                          backendName(cfg.backend), cfg.backend == Backend::Vllm ? 16 : 32, detail::kGroupWiseKeys[i]));
      return;
    }
    case Backend::Kivi: {
      const int nb = cfg.resolvedNbits();
      const std::vector<std::string>& bits = detail::findOption(Backend::Kivi, "nbits")->choices;
      if (std::find(bits.begin(), bits.end(), std::to_string(nb)) == bits.end())
        throw ConfigError("nbits", fmt::format("`nbits` for `kivi` has to be {}, got {}", fmt::join(bits, " or "), nb));
      for (auto [key, v] : {std::pair{"axis_key", cfg.axisKey}, std::pair{"axis_value", cfg.axisValue}})
        if (v)
          throw ConfigError(key, fmt::format("`kivi` fixes the axes (keys per channel, values per token): `{}` "
                                             "does not apply",
                                             key));
      checkGroupAndWindow(cfg);
      return;
    }
  }
}

bool allFused(const CacheConfig& cfg) {
  if (!cfg.mixed()) return cfg.attention == AttentionMode::Fused;
  for (const auto& r : cfg.layers)
    if (!allFused(r.keys) || !allFused(r.values)) return false;
  return true;
}

}  // namespace kvscope::cache
