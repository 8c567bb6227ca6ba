// fromTokenizerJson: Hugging Face tokenizer.json (+ tokenizer_config.json beside it) -> TokenizerSpec. Only what
// byte-level BPE and SentencePiece-style BPE (Llama 2, Mistral) need is accepted; anything that would change ids or
// text in a way kvscope does not reproduce is an error.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/detail.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

namespace kvscope::tokenizer {

namespace {

using nlohmann::json;

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw TokenizerError(path_ + ": " + key + ": " + what);
  }

  json parse(std::string_view text) const {
    JsonParse parsed = parseBoundedJson(text);
    if (!parsed.problem.empty()) throw TokenizerError(path_ + ": " + parsed.problem);
    return std::move(parsed.value);
  }

  std::string str(const json& j, const std::string& key) const {
    if (!j.is_string()) fail(key, "expected a string, found " + std::string(j.type_name()));
    return j.get<std::string>();
  }
  bool flag(const json& obj, const char* name, const std::string& key, bool dflt = false) const {
    if (!obj.contains(name) || obj[name].is_null()) return dflt;
    if (!obj[name].is_boolean()) fail(key + "." + name, "expected true or false");
    return obj[name].get<bool>();
  }
  std::int32_t id(const json& j, const std::string& key) const {
    if (!j.is_number_integer() || j.get<std::int64_t>() < 0 || j.get<std::int64_t>() >= (1 << 24))
      fail(key, "expected a token id, found " + j.dump());
    return static_cast<std::int32_t>(j.get<std::int64_t>());
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string typeOf(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "?";
}

// The preset a pre_tokenizer chain amounts to.
Preset readPreTokenizer(const Reader& r, const json& pt) {
  if (pt.is_null()) r.fail("pre_tokenizer", "missing; a byte-level BPE needs a ByteLevel pre-tokenizer");
  std::vector<json> chain;
  if (typeOf(pt) == "Sequence") {
    if (!pt.contains("pretokenizers") || !pt["pretokenizers"].is_array())
      r.fail("pre_tokenizer.pretokenizers", "expected a list");
    chain.assign(pt["pretokenizers"].begin(), pt["pretokenizers"].end());
  } else {
    chain.push_back(pt);
  }
  std::string names;
  for (const auto& p : chain) names += (names.empty() ? "" : ", ") + typeOf(p);
  const auto unsupported = [&]() {
    r.fail("pre_tokenizer",
           "unsupported chain [" + names +
               "] (supported: ByteLevel; Digits(individual_digits), ByteLevel; Split(regex), ByteLevel)");
  };
  if (chain.empty() || typeOf(chain.back()) != "ByteLevel") unsupported();
  const json& bl = chain.back();
  if (r.flag(bl, "add_prefix_space", "pre_tokenizer.ByteLevel"))
    r.fail("pre_tokenizer.ByteLevel.add_prefix_space", "true is not supported");
  const bool useRegex = r.flag(bl, "use_regex", "pre_tokenizer.ByteLevel", true);
  if (chain.size() == 1) {
    if (!useRegex) r.fail("pre_tokenizer.ByteLevel.use_regex", "false with nothing before it would not split at all");
    return Preset::Gpt2;
  }
  if (chain.size() != 2) unsupported();
  const json& first = chain.front();
  if (typeOf(first) == "Digits") {
    if (!r.flag(first, "individual_digits", "pre_tokenizer.Digits"))
      r.fail("pre_tokenizer.Digits.individual_digits", "false (digit runs) is not supported");
    if (!useRegex) r.fail("pre_tokenizer.ByteLevel.use_regex", "false after Digits is not supported");
    return Preset::SmolLM;
  }
  if (typeOf(first) != "Split") unsupported();
  if (useRegex) r.fail("pre_tokenizer.ByteLevel.use_regex", "true after a Split is not supported");
  if (!first.contains("pattern") || !first["pattern"].is_object() || !first["pattern"].contains("Regex"))
    r.fail("pre_tokenizer.Split.pattern", "only {\"Regex\": ...} patterns are supported");
  const std::string behavior =
      first.contains("behavior") ? r.str(first["behavior"], "pre_tokenizer.Split.behavior") : "";
  if (behavior != "Isolated")
    r.fail("pre_tokenizer.Split.behavior", "'" + behavior + "' is not supported (only Isolated)");
  if (r.flag(first, "invert", "pre_tokenizer.Split")) r.fail("pre_tokenizer.Split.invert", "true is not supported");
  const std::string regex = r.str(first["pattern"]["Regex"], "pre_tokenizer.Split.pattern.Regex");
  for (const Preset p : {Preset::Gpt2, Preset::Llama3, Preset::Qwen2, Preset::Gpt4o})
    if (detail::presetRegexes(p).back() == regex) return p;
  r.fail("pre_tokenizer.Split.pattern.Regex",
         "/" + regex + "/ is not a known preset regex (gpt2, llama3, qwen2, gpt-4o)");
}

// A one-character string field (Metaspace replacement, Strip content).
std::string oneChar(const Reader& r, const json& obj, const char* name, const std::string& key) {
  std::string s = r.str(obj.value(name, json()), key + "." + name);
  char32_t cp = 0;
  int bad = 0;
  if (s.empty() || detail::decodeUtf8(s, 0, cp, bad) != static_cast<int>(s.size()))
    r.fail(key + "." + name, "expected one character, found '" + s + "'");
  return s;
}

// Metaspace's fields, as tokenizers deserializes them (pre-tokenizer and decoder alike).
MetaspaceSpec readMetaspace(const Reader& r, const json& j, const std::string& key) {
  MetaspaceSpec ms;
  ms.replacement = oneChar(r, j, "replacement", key);
  ms.prependScheme = PrependScheme::Always;
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    const std::string s = r.str(j["prepend_scheme"], key + ".prepend_scheme");
    if (s == "always")
      ms.prependScheme = PrependScheme::Always;
    else if (s == "first")
      ms.prependScheme = PrependScheme::First;
    else if (s == "never")
      ms.prependScheme = PrependScheme::Never;
    else
      r.fail(key + ".prepend_scheme", "'" + s + "' is not always, first or never");
  }
  if (j.contains("add_prefix_space") && !r.flag(j, "add_prefix_space", key, true)) {
    if (ms.prependScheme != PrependScheme::Never)
      r.fail(key + ".add_prefix_space", "false does not match prepend_scheme (tokenizers rejects it too)");
  }
  ms.split = r.flag(j, "split", key, true);
  return ms;
}

// A String pattern ({"String": "x"}); Regex patterns are not supported.
std::string stringPattern(const Reader& r, const json& obj, const std::string& key) {
  const json p = obj.value("pattern", json());
  if (!p.is_object() || !p.contains("String"))
    r.fail(key + ".pattern", "only {\"String\": ...} patterns are supported, found " + p.dump());
  return r.str(p["String"], key + ".pattern.String");
}

// normalizer for SentencePiece mode: Prepend, Replace(String) or Sequence of them.
void readNormalizer(const Reader& r, const json& n, const std::string& key, std::vector<NormalizerStep>& out) {
  if (n.is_null()) return;
  const std::string type = typeOf(n);
  if (type == "Sequence") {
    if (!n.contains("normalizers") || !n["normalizers"].is_array()) r.fail(key + ".normalizers", "expected a list");
    for (std::size_t i = 0; i < n["normalizers"].size(); ++i)
      readNormalizer(r, n["normalizers"][i], key + ".normalizers[" + std::to_string(i) + "]", out);
  } else if (type == "Prepend") {
    out.push_back({NormalizerStep::Kind::Prepend, "", r.str(n.value("prepend", json()), key + ".prepend")});
  } else if (type == "Replace") {
    out.push_back(
        {NormalizerStep::Kind::Replace, stringPattern(r, n, key), r.str(n.value("content", json()), key + ".content")});
  } else {
    r.fail(key, "'" + type + "' is not supported (Prepend, Replace, Sequence of them)");
  }
}

// decoder for SentencePiece mode: Replace(String), ByteFallback, Fuse, Strip, Metaspace or Sequence of them.
void readDecoder(const Reader& r, const json& d, const std::string& key, std::vector<DecoderStep>& out) {
  using K = DecoderStep::Kind;
  const std::string type = d.is_null() ? "none" : typeOf(d);
  DecoderStep st;
  if (type == "Sequence") {
    if (!d.contains("decoders") || !d["decoders"].is_array()) r.fail(key + ".decoders", "expected a list");
    for (std::size_t i = 0; i < d["decoders"].size(); ++i)
      readDecoder(r, d["decoders"][i], key + ".decoders[" + std::to_string(i) + "]", out);
    return;
  } else if (type == "Replace") {
    st = {K::Replace, stringPattern(r, d, key), r.str(d.value("content", json()), key + ".content")};
  } else if (type == "ByteFallback") {
    st.kind = K::ByteFallback;
  } else if (type == "Fuse") {
    st.kind = K::Fuse;
  } else if (type == "Strip") {
    st.kind = K::Strip;
    st.content = oneChar(r, d, "content", key);
    for (const char* f : {"start", "stop"}) {
      const json v = d.value(f, json());
      if (!v.is_number_unsigned()) r.fail(key + "." + f, "expected a count, found " + v.dump());
      (std::string(f) == "start" ? st.start : st.stop) = v.get<std::size_t>();
    }
  } else if (type == "Metaspace") {
    const MetaspaceSpec ms = readMetaspace(r, d, key);
    st.kind = K::Metaspace;
    st.pattern = ms.replacement;
    st.prependScheme = ms.prependScheme;
  } else {
    r.fail(key, "'" + type +
                    "' is not supported with a SentencePiece-style model (Metaspace, Replace, ByteFallback, "
                    "Fuse, Strip, Sequence of them)");
  }
  out.push_back(std::move(st));
}

// SentencePiece mode: pre_tokenizer null, Metaspace, or a Split on a string the normalizer replaces everywhere
// (Gemma's: Replace " " -> "▁", then Split on " ", which finds nothing left to split); normalizer, decoder.
void readSentencePiece(const Reader& r, const json& j, TokenizerSpec& spec) {
  spec.mode = Mode::SentencePiece;
  const json pt = j.value("pre_tokenizer", json());
  const bool split = !pt.is_null() && typeOf(pt) == "Split";
  if (!pt.is_null() && !split) spec.metaspace = readMetaspace(r, pt, "pre_tokenizer");
  readNormalizer(r, j.value("normalizer", json()), "normalizer", spec.normalizer);
  if (split) {
    if (r.flag(pt, "invert", "pre_tokenizer")) r.fail("pre_tokenizer.invert", "true is not supported");
    const std::string on = stringPattern(r, pt, "pre_tokenizer");
    const bool removed = !on.empty() && std::any_of(spec.normalizer.begin(), spec.normalizer.end(), [&](const auto& n) {
      return n.kind == NormalizerStep::Kind::Replace && n.pattern == on && n.content.find(on) == std::string::npos;
    });
    if (!removed)
      r.fail("pre_tokenizer", "a Split on '" + on + "' is supported only after a normalizer that replaces every '" +
                                  on + "' (Gemma's layout); here it would split");
  }
  if (!spec.normalizer.empty() && spec.metaspace)
    r.fail("normalizer", "a normalizer together with a Metaspace pre-tokenizer is not supported");
  const json decoder = j.value("decoder", json());
  if (decoder.is_null()) r.fail("decoder", "missing (a SentencePiece-style model needs one)");
  readDecoder(r, decoder, "decoder", spec.decoder);
}

// Ids TemplateProcessing puts before and after a single sequence.
void readPostProcessor(const Reader& r, const json& pp, std::vector<std::int32_t>& prefix,
                       std::vector<std::int32_t>& suffix) {
  if (pp.is_null()) return;
  const std::string type = typeOf(pp);
  if (type == "ByteLevel") return;  // only offsets
  if (type == "Sequence") {
    if (!pp.contains("processors") || !pp["processors"].is_array())
      r.fail("post_processor.processors", "expected a list");
    for (const auto& p : pp["processors"]) readPostProcessor(r, p, prefix, suffix);
    return;
  }
  if (type != "TemplateProcessing")
    r.fail("post_processor", "'" + type + "' is not supported (TemplateProcessing, ByteLevel, Sequence)");
  if (!pp.contains("single") || !pp["single"].is_array()) r.fail("post_processor.single", "expected a list");
  const json specials = pp.value("special_tokens", json::object());
  bool seenA = false;
  for (const auto& item : pp["single"]) {
    if (item.contains("Sequence")) {
      seenA = true;
      continue;
    }
    if (!item.contains("SpecialToken") || !item["SpecialToken"].is_object())
      r.fail("post_processor.single", "unexpected item " + item.dump() +
                                          " (expected {\"SpecialToken\": {\"id\": ...}} or "
                                          "{\"Sequence\": ...})");
    const std::string name = r.str(item["SpecialToken"].value("id", json()), "post_processor.single.SpecialToken.id");
    if (!specials.contains(name) || !specials[name].contains("ids") || !specials[name]["ids"].is_array())
      r.fail("post_processor.special_tokens", "no ids for '" + name + "'");
    for (const auto& i : specials[name]["ids"])
      (seenA ? suffix : prefix).push_back(r.id(i, "post_processor.special_tokens." + name + ".ids"));
  }
}

}  // namespace

namespace {
std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

Tokenizer fromTokenizerJson(const std::string& path) {
  const std::string text = readFile(path);
  const auto dir = std::filesystem::path(path).parent_path();
  const auto cfgPath = dir / "tokenizer_config.json";
  std::optional<std::string> cfg;
  if (std::filesystem::exists(cfgPath)) cfg = readFile(cfgPath.string());
  // transformers 5 saves the template in a file of its own.
  const auto jinjaPath = dir / "chat_template.jinja";
  std::string jinja;
  if (std::filesystem::exists(jinjaPath)) jinja = readFile(jinjaPath.string());
  return fromTokenizerJsonText(text, path, cfg ? std::optional<std::string_view>(*cfg) : std::nullopt, cfgPath.string(),
                               jinja);
}

Tokenizer fromTokenizerJsonText(std::string_view text, const std::string& path,
                                std::optional<std::string_view> tokenizerConfig, const std::string& configSource,
                                const std::string& chatTemplate) {
  const Reader r(path);
  const json j = r.parse(text);
  if (!j.is_object()) r.fail("(top level)", "expected an object");
  TokenizerSpec spec;
  spec.source = path;

  // -- model
  if (!j.contains("model") || !j["model"].is_object()) r.fail("model", "missing");
  const json& m = j["model"];
  if (m.contains("type") && typeOf(m) != "BPE") r.fail("model.type", "'" + typeOf(m) + "' is not supported (only BPE)");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"] != 0.0) r.fail("model.dropout", "must be null");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
      r.fail(std::string("model.") + k, "must be empty");
  // SentencePiece-style (Llama 2, Mistral): no pre-tokenizer, or Metaspace. Everything else is byte-level.
  const json pre = j.value("pre_tokenizer", json());
  // Gemma's Split on a string pattern rides on a SentencePiece-style normalizer (readSentencePiece checks it).
  const bool stringSplit = !pre.is_null() && typeOf(pre) == "Split" && pre.contains("pattern") &&
                           pre["pattern"].is_object() && pre["pattern"].contains("String");
  const bool sentencePiece = pre.is_null() || typeOf(pre) == "Metaspace" || stringSplit;
  spec.byteFallback = r.flag(m, "byte_fallback", "model");
  if (spec.byteFallback && !sentencePiece)
    r.fail("model.byte_fallback", "true is not supported with a byte-level pre-tokenizer ('" + typeOf(pre) + "')");
  spec.fuseUnk = r.flag(m, "fuse_unk", "model");
  spec.ignoreMerges = r.flag(m, "ignore_merges", "model");
  if (!m.contains("vocab") || !m["vocab"].is_object()) r.fail("model.vocab", "expected an object token -> id");
  // Ids may leave holes (filled by added tokens) but cannot exceed the number of tokens given: a lone id of 2^24
  // would otherwise make a vocabulary of 16 million empty entries.
  const std::size_t entries =
      m["vocab"].size() + (j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"].size() : 0);
  const auto inRange = [&](std::int32_t id, const std::string& key) {
    if (static_cast<std::size_t>(id) >= entries)
      r.fail(key, "id " + std::to_string(id) + " is beyond the " + std::to_string(entries) +
                      " tokens of model.vocab and added_tokens");
    return id;
  };
  for (const auto& [tok, idj] : m["vocab"].items()) {
    const std::int32_t id = inRange(r.id(idj, "model.vocab['" + tok + "']"), "model.vocab['" + tok + "']");
    if (id >= static_cast<std::int32_t>(spec.tokens.size())) spec.tokens.resize(id + 1);
    if (!spec.tokens[id].empty()) r.fail("model.vocab", "id " + std::to_string(id) + " is given to two tokens");
    spec.tokens[id] = tok;
  }
  if (!m.contains("merges") || !m["merges"].is_array()) r.fail("model.merges", "expected a list");
  const json& merges = m["merges"];
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    const std::string key = "model.merges[" + std::to_string(i) + "]";
    if (e.is_string()) {  // "a b" (tokenizers before 0.20 and many files on the Hub)
      const std::string s = e.get<std::string>();
      const auto sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.fail(key, "'" + s + "' is not two tokens separated by one space");
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2) {  // ["a", "b"]
      spec.merges.emplace_back(r.str(e[0], key), r.str(e[1], key));
    } else {
      r.fail(key, "expected \"a b\" or [\"a\", \"b\"], found " + e.dump());
    }
  }
  if (m.contains("unk_token") && !m["unk_token"].is_null()) {
    const std::string unk = r.str(m["unk_token"], "model.unk_token");
    const auto it = m["vocab"].find(unk);
    if (it == m["vocab"].end()) r.fail("model.unk_token", "'" + unk + "' is not in the vocabulary");
    spec.bpeUnk = r.id(*it, "model.unk_token");
  }

  // -- added tokens
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) r.fail("added_tokens", "expected a list");
    for (std::size_t i = 0; i < j["added_tokens"].size(); ++i) {
      const json& a = j["added_tokens"][i];
      const std::string key = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object() || !a.contains("id") || !a.contains("content")) r.fail(key, "expected {id, content, ...}");
      AddedToken t;
      t.id = inRange(r.id(a["id"], key + ".id"), key + ".id");
      t.content = r.str(a["content"], key + ".content");
      t.special = r.flag(a, "special", key);
      t.lstrip = r.flag(a, "lstrip", key);
      t.rstrip = r.flag(a, "rstrip", key);
      t.normalized = r.flag(a, "normalized", key);
      if (r.flag(a, "single_word", key)) r.fail(key + ".single_word", "true is not supported ('" + t.content + "')");
      spec.added.push_back(std::move(t));
    }
  }

  // -- pipeline
  if (sentencePiece) {
    readSentencePiece(r, j, spec);
  } else {
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      r.fail("normalizer", "'" + typeOf(j["normalizer"]) + "' is not supported with a byte-level pre-tokenizer");
    spec.preset = readPreTokenizer(r, pre);
    const json decoder = j.value("decoder", json());
    if (typeOf(decoder) != "ByteLevel")
      r.fail("decoder", "'" + (decoder.is_null() ? std::string("none") : typeOf(decoder)) +
                            "' is not supported with a byte-level pre-tokenizer (only ByteLevel)");
  }
  readPostProcessor(r, j.value("post_processor", json()), spec.prefix, spec.suffix);

  // -- special ids and chat template: tokenizer_config.json beside it, when there is one
  const auto idOf = [&](const std::string& text) -> std::int32_t {
    for (const auto& a : spec.added)
      if (a.content == text) return a.id;
    for (std::size_t i = 0; i < spec.tokens.size(); ++i)
      if (spec.tokens[i] == text) return static_cast<std::int32_t>(i);
    return -1;
  };
  if (tokenizerConfig) {
    const Reader cr(configSource);
    const json cfg = cr.parse(*tokenizerConfig);
    if (!cfg.is_object()) cr.fail("(top level)", "expected an object");
    const auto special = [&](const char* name) -> std::int32_t {
      if (!cfg.contains(name) || cfg[name].is_null()) return -1;
      const json& v = cfg[name];
      const std::string text =
          v.is_object() ? cr.str(v.value("content", json()), std::string(name) + ".content") : cr.str(v, name);
      const std::int32_t id = idOf(text);
      if (id < 0) cr.fail(name, "'" + text + "' is not a token of " + path);
      return id;
    };
    spec.special = {special("bos_token"), special("eos_token"), special("unk_token"), special("pad_token")};
    if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
      spec.chatTemplate = cfg["chat_template"].get<std::string>();
  } else {
    if (spec.prefix.size() == 1) spec.special.bos = spec.prefix.front();
    if (spec.bpeUnk >= 0) spec.special.unk = spec.bpeUnk;
  }
  if (spec.chatTemplate.empty()) spec.chatTemplate = chatTemplate;
  return Tokenizer(std::move(spec));
}

}  // namespace kvscope::tokenizer
