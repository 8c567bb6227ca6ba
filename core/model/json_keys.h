// A config.json object read key by key: every value type-checked and range-checked, and a bad one a FormatError
// naming the file and the key (with its path, e.g. `text_config.head_dim`). The model loader's reader
// (model/hf_config.cpp) and the capacity planner's (plan/layout.cpp) read configs through it.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/safetensors.h"  // FormatError
#include "util/json.h"

namespace kvscope::model {

class JsonKeys {
 public:
  JsonKeys(const nlohmann::json& obj, std::string where, std::string prefix = "")
      : j_(obj), where_(std::move(where)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw FormatError(fmt::format("{}: `{}{}` {}", where_, prefix_, key, what));
  }
  bool has(const char* key) const {
    const auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }
  double num(const char* key, std::optional<double> dflt = std::nullopt) const {
    if (!has(key)) {
      if (dflt) return *dflt;
      fail(key, "is missing");
    }
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number()) fail(key, fmt::format("must be a number, found {}", v.type_name()));
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(key, "must be finite");
    return d;
  }
  double positiveNum(const char* key, double dflt) const {
    const double v = num(key, dflt);
    if (!(v > 0)) fail(key, fmt::format("= {} must be positive", v));
    return v;
  }
  /// The file the keys are read from (what every message starts with).
  const std::string& where() const { return where_; }
  /// The object itself, for keys of other shapes (lists, nested objects).
  const nlohmann::json& object() const { return j_; }
  /// A whole number in [0, 2^24] (a count that may be zero).
  int count0(const char* key, std::optional<double> dflt = std::nullopt) const {
    const double v = num(key, dflt);
    if (v < 0 || v > (1 << 24) || v != std::floor(v))
      fail(key, fmt::format("= {} is not a whole number from 0 to 2^24", v));
    return static_cast<int>(v);
  }
  int count(const char* key, std::optional<double> dflt = std::nullopt) const {
    const double v = num(key, dflt);
    if (v <= 0 || v > (1 << 24) || v != std::floor(v))
      fail(key, fmt::format("= {} is not a positive integer (at most 2^24)", v));
    return static_cast<int>(v);
  }
  std::string str(const char* key, const std::string& dflt) const {
    if (!has(key)) return dflt;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_string()) fail(key, fmt::format("must be a string, found {}", v.type_name()));
    return v.get<std::string>();
  }
  bool flag(const char* key, bool dflt) const {
    if (!has(key)) return dflt;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_boolean()) fail(key, fmt::format("must be true or false, found {}", v.type_name()));
    return v.get<bool>();
  }

 private:
  const nlohmann::json& j_;
  std::string where_, prefix_;
};

/// A config.json's text parsed: the whole object, and the object the text model's keys are in (a multimodal
/// wrapper's `text_config`, else the whole) with the prefix messages give its keys. Throws FormatError.
struct ConfigJson {  // NOLINT(bugprone-exception-escape): as JsonParse (util/json.h)
  nlohmann::json top;
  const nlohmann::json* text = nullptr;
  std::string prefix;  ///< "text_config." or ""
};
inline ConfigJson parseConfigJson(std::string_view body, const std::string& where) {
  JsonParse parsed = parseBoundedJson(body);
  if (!parsed.problem.empty()) throw FormatError(fmt::format("{}: {}", where, parsed.problem));
  ConfigJson c;
  c.top = std::move(parsed.value);
  if (!c.top.is_object())
    throw FormatError(fmt::format("{}: expected a JSON object, found {}", where, c.top.type_name()));
  c.text = &c.top;
  if (const auto it = c.top.find("text_config"); it != c.top.end() && !it->is_null()) {
    if (!it->is_object())
      throw FormatError(fmt::format("{}: `text_config` must be an object, found {}", where, it->type_name()));
    c.text = &*it;
    c.prefix = "text_config.";
  }
  return c;
}

}  // namespace kvscope::model
