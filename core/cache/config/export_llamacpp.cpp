// Export to llama.cpp: -ctk/-ctv block types (and -fa for a quantized V), with what does not carry over.
#include "cache/config/detail.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvscope::cache {

namespace {

// The -ctk/-ctv type of a uniform config, and the notes of its mapping.
std::string cacheType(const CacheConfig& cfg, std::vector<std::string>& notes) {
  switch (cfg.backend) {
    case Backend::Dynamic:
      notes.push_back("f16 is llama.cpp's default cache type (kvscope's dynamic cache keeps the model's dtype)");
      return "f16";
    case Backend::Fp8:
      notes.push_back("nearest equivalent only: llama.cpp has no FP8 cache type; q8_0 (int8, one scale per 32 "
                      "values) is its 8-bit type");
      return "q8_0";
    case Backend::Quanto:
    case Backend::Hqq:
    case Backend::Kivi: {
      const int nb = cfg.resolvedNbits();
      std::string type = nb >= 8 ? "q8_0" : nb >= 4 ? "q4_1" : "q4_0";
      notes.push_back(fmt::format("nearest equivalent only: {}-bit groups of {} with a full-precision residual map to "
                                  "llama.cpp's {} (blocks of 32, no residual window){}",
                                  nb, cfg.resolvedGroupSize(), type,
                                  nb < 4 ? "; llama.cpp has no cache type below 4 bits" : ""));
      return type;
    }
  }
  return "f16";
}

FlagExport flags(const std::string& kt, const std::string& vt, std::vector<std::string> notes) {
  FlagExport e;
  e.flags = fmt::format("-ctk {} -ctv {}", kt, vt);
  if (vt != "f16") e.flags += " -fa";
  e.notes = std::move(notes);
  return e;
}

}  // namespace

FlagExport toLlamaCppFlags(const CacheConfig& cfg) {
  validate(cfg);
  std::vector<std::string> notes;
  const auto addUnique = [&](std::vector<std::string> more) {
    for (auto& n : more)
      if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(std::move(n));
  };
  if (!cfg.mixed()) {
    const std::string type = cacheType(cfg, notes);
    addUnique(detail::optionNotes(cfg, &detail::OptionField::llamaCppWhy, false));
    if (type != "f16") notes.push_back("a quantized V cache needs flash attention (-fa)");
    return flags(type, type, std::move(notes));
  }
  const LayerRule* all = detail::wildcardRule(cfg);
  if (!all) throw ConfigError("layers", "llama.cpp takes one K and one V cache type: add a `*` rule");
  const FlagExport k = toLlamaCppFlags(all->keys), v = toLlamaCppFlags(all->values);
  const auto typeOf = [](const std::string& f, const char* flag) {
    const auto p = f.find(flag) + std::string(flag).size() + 1;
    return f.substr(p, f.find(' ', p) - p);
  };
  addUnique(k.notes);
  addUnique(v.notes);
  for (const auto& r : cfg.layers)
    if (!r.wildcard()) notes.push_back(detail::notExported(r, "llama.cpp's cache types apply to every layer"));
  return flags(typeOf(k.flags, "-ctk"), typeOf(v.flags, "-ctv"), std::move(notes));
}

}  // namespace kvscope::cache
