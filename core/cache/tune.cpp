#include "cache/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

namespace kvscope::cache {

namespace {

using nlohmann::json;

constexpr int kUnquantized = -1;

// One partial assignment of the solve: its bytes saved and KL so far, and how it was reached.
struct State {
  std::int64_t saved = 0;
  double kl = 0;
  int prev = -1;    // index into the previous stage
  int choice = -1;  // the option taken at this stage
};

// The states no other beats on both saved bytes (more is better) and KL (less is better). When the front grows past
// kMaxFront points, the bytes are bucketed in 1/kMaxFront of the reference's and each bucket keeps its lowest KL.
constexpr std::size_t kMaxFront = 4096;

std::vector<State> pruned(std::vector<State> s, std::int64_t referenceBytes) {
  std::sort(s.begin(), s.end(),
            [](const State& a, const State& b) { return a.saved != b.saved ? a.saved > b.saved : a.kl < b.kl; });
  std::vector<State> out;
  double best = std::numeric_limits<double>::infinity();
  for (const State& x : s)
    if (x.kl < best) {
      out.push_back(x);
      best = x.kl;
    }
  if (out.size() <= kMaxFront) return out;
  const std::int64_t width = std::max<std::int64_t>(1, referenceBytes / static_cast<std::int64_t>(kMaxFront));
  std::vector<State> thin;
  for (const State& x : out) {  // by saved descending, KL ascending: the first of each bucket is dominated by none
    if (!thin.empty() && thin.back().saved / width == x.saved / width) continue;
    thin.push_back(x);
  }
  return thin;
}

// A multiple-choice solve: stage i picks one of options[i] (saved bytes, KL); returns every front point's choices.
struct Option {
  std::int64_t saved;
  double kl;
};
std::vector<std::pair<std::vector<int>, State>> frontOf(const std::vector<std::vector<Option>>& options,
                                                        std::int64_t referenceBytes) {
  std::vector<std::vector<State>> stages;
  std::vector<State> cur{State{}};
  for (const auto& opts : options) {
    std::vector<State> next;
    next.reserve(cur.size() * opts.size());
    for (std::size_t p = 0; p < cur.size(); ++p)
      for (std::size_t o = 0; o < opts.size(); ++o) {
        if (!std::isfinite(opts[o].kl)) continue;
        next.push_back(
            {cur[p].saved + opts[o].saved, cur[p].kl + opts[o].kl, static_cast<int>(p), static_cast<int>(o)});
      }
    cur = pruned(std::move(next), referenceBytes);
    stages.push_back(cur);
  }
  std::vector<std::pair<std::vector<int>, State>> out;
  for (std::size_t f = 0; f < cur.size(); ++f) {
    std::vector<int> choices(options.size());
    int at = static_cast<int>(f);
    for (std::size_t st = options.size(); st-- > 0;) {
      const State& s = stages[st][static_cast<std::size_t>(at)];
      choices[st] = s.choice;
      at = s.prev;
    }
    out.emplace_back(std::move(choices), cur[f]);
  }
  return out;
}

// Options of one layer side: unquantized, then each candidate.
std::vector<Option> sideOptions(const Scan& scan, int layer, KvSide side) {
  std::vector<Option> o{{0, 0.0}};
  for (std::size_t c = 0; c < scan.plan.candidates.size(); ++c) {
    const Scan::Point& p = scan.at(layer, side, c);
    o.push_back({p.saved(scan.referenceBytes), p.meanKl});
  }
  return o;
}

Assignment uniformSides(const Scan& scan, int k, int v) {
  Assignment a;
  const int n = scan.plan.numLayers;
  a.keys.assign(static_cast<std::size_t>(n), k);
  a.values.assign(static_cast<std::size_t>(n), v);
  std::int64_t saved = 0;
  for (int l = 0; l < n; ++l) {
    for (const auto& [side, c] : {std::pair{KvSide::Keys, k}, std::pair{KvSide::Values, v}}) {
      if (c == kUnquantized) continue;
      const Scan::Point& p = scan.at(l, side, static_cast<std::size_t>(c));
      saved += p.saved(scan.referenceBytes);
      a.predictedKl += p.meanKl;
    }
  }
  a.storedBytes = scan.referenceBytes - saved;
  return a;
}

std::vector<Assignment> frontOfAssignments(std::vector<Assignment> all) {
  std::sort(all.begin(), all.end(), [](const Assignment& a, const Assignment& b) {
    return a.storedBytes != b.storedBytes ? a.storedBytes < b.storedBytes : a.predictedKl < b.predictedKl;
  });
  std::vector<Assignment> out;
  double best = std::numeric_limits<double>::infinity();
  for (auto& a : all)
    if (std::isfinite(a.predictedKl) && a.predictedKl < best) {
      best = a.predictedKl;
      out.push_back(std::move(a));
    }
  return out;
}

CacheConfig candidateOrDynamic(const Scan& scan, int c) {
  return c == kUnquantized ? CacheConfig{} : scan.plan.candidates[static_cast<std::size_t>(c)];
}

}  // namespace

std::string_view sideName(KvSide s) {
  return s == KvSide::Keys ? "K" : "V";
}

CacheConfig ScanPlan::config(const ScanItem& item) const {
  LayerRule one, rest;
  one.first = one.last = item.layer;
  (item.side == KvSide::Keys ? one.keys : one.values) = candidates.at(item.candidate);
  return perLayerConfig({one, rest});
}

ScanPlan planScan(const std::vector<CacheConfig>& candidates, int numLayers) {
  if (candidates.empty()) throw ConfigError("cache", "the tuner needs at least one candidate config (--cache SPEC)");
  if (numLayers < 1) throw ConfigError("num_layers", fmt::format("a scan needs at least one layer, got {}", numLayers));
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const CacheConfig& c = candidates[i];
    if (c.mixed())
      throw ConfigError("layers", fmt::format("candidate `{}` is a per-layer config: a candidate is one config the "
                                              "tuner tries on each layer side",
                                              toSpec(c)));
    if (c.backend == Backend::Dynamic)
      throw ConfigError("cache",
                        "candidate `dynamic` is the unquantized cache the tuner compares against: give "
                        "quantizing candidates");
    validate(c);
    for (std::size_t j = 0; j < i; ++j)
      if (candidates[j] == c) throw ConfigError("cache", fmt::format("candidate `{}` is given twice", toSpec(c)));
  }
  ScanPlan plan;
  plan.candidates = candidates;
  plan.numLayers = numLayers;
  for (std::size_t c = 0; c < candidates.size(); ++c)
    for (int l = 0; l < numLayers; ++l)
      for (KvSide s : {KvSide::Keys, KvSide::Values}) plan.items.push_back({l, s, c});
  return plan;
}

const Scan::Point* Scan::find(int layer, KvSide side, std::size_t candidate) const {
  // The plan's order: candidate, layer, side.
  const std::size_t i = (candidate * static_cast<std::size_t>(plan.numLayers) + static_cast<std::size_t>(layer)) * 2 +
                        (side == KvSide::Keys ? 0 : 1);
  if (i < points.size() && points[i].item.layer == layer && points[i].item.side == side &&
      points[i].item.candidate == candidate)
    return &points[i];
  for (const Point& p : points)
    if (p.item.layer == layer && p.item.side == side && p.item.candidate == candidate) return &p;
  return nullptr;
}

Scan completedCandidates(const Scan& scan) {
  Scan out;
  out.referenceBytes = scan.referenceBytes;
  out.plan.numLayers = scan.plan.numLayers;
  for (std::size_t c = 0; c < scan.plan.candidates.size(); ++c) {
    std::vector<Scan::Point> pts;
    for (int l = 0; l < scan.plan.numLayers; ++l)
      for (KvSide s : {KvSide::Keys, KvSide::Values})
        if (const Scan::Point* p = scan.find(l, s, c)) pts.push_back(*p);
    if (pts.size() != static_cast<std::size_t>(scan.plan.numLayers) * 2) continue;
    const std::size_t renumbered = out.plan.candidates.size();
    out.plan.candidates.push_back(scan.plan.candidates[c]);
    for (Scan::Point& p : pts) {
      p.item.candidate = renumbered;
      out.plan.items.push_back(p.item);
      out.points.push_back(p);
    }
  }
  return out;
}

const Scan::Point& Scan::at(int layer, KvSide side, std::size_t candidate) const {
  if (const Point* p = find(layer, side, candidate)) return *p;
  throw ConfigError(
      "scan", fmt::format("the scan has no point for layer {} {} with candidate {}", layer, sideName(side), candidate));
}

std::string_view targetName(TuneTarget t) {
  switch (t) {
    case TuneTarget::Kvscope:
      return "kvscope";
    case TuneTarget::LlamaCpp:
      return "llamacpp";
    case TuneTarget::Vllm:
      return "vllm";
    case TuneTarget::Transformers:
      return "transformers";
    case TuneTarget::ModelOpt:
      return "modelopt";
  }
  return "?";
}

std::vector<TuneTarget> allTargets() {
  return {TuneTarget::Kvscope, TuneTarget::LlamaCpp, TuneTarget::Vllm, TuneTarget::Transformers, TuneTarget::ModelOpt};
}

TuneTarget parseTarget(std::string_view name) {
  for (TuneTarget t : allTargets())
    if (targetName(t) == name) return t;
  throw ConfigError("target",
                    fmt::format("unknown tuning target `{}` (kvscope, llamacpp, vllm, transformers, modelopt)", name));
}

std::vector<Assignment> paretoFront(const Scan& scan, TuneTarget target) {
  const int n = scan.plan.numLayers;
  const int cands = static_cast<int>(scan.plan.candidates.size());
  std::vector<Assignment> all;
  switch (target) {
    case TuneTarget::Kvscope: {
      std::vector<std::vector<Option>> options;
      for (int l = 0; l < n; ++l)
        for (KvSide s : {KvSide::Keys, KvSide::Values}) options.push_back(sideOptions(scan, l, s));
      for (auto& [choices, st] : frontOf(options, scan.referenceBytes)) {
        Assignment a;
        for (int l = 0; l < n; ++l) {
          a.keys.push_back(choices[2 * static_cast<std::size_t>(l)] - 1);
          a.values.push_back(choices[2 * static_cast<std::size_t>(l) + 1] - 1);
        }
        a.predictedKl = st.kl;
        a.storedBytes = scan.referenceBytes - st.saved;
        all.push_back(std::move(a));
      }
      break;
    }
    case TuneTarget::LlamaCpp:
      for (int k = kUnquantized; k < cands; ++k)
        for (int v = kUnquantized; v < cands; ++v) all.push_back(uniformSides(scan, k, v));
      break;
    case TuneTarget::Vllm:
      all.push_back(uniformSides(scan, kUnquantized, kUnquantized));
      for (int c = 0; c < cands; ++c) {
        std::vector<std::vector<Option>> options;
        for (int l = 0; l < n; ++l) {
          const Scan::Point &pk = scan.at(l, KvSide::Keys, static_cast<std::size_t>(c)),
                            &pv = scan.at(l, KvSide::Values, static_cast<std::size_t>(c));
          options.push_back(
              {{0, 0.0}, {pk.saved(scan.referenceBytes) + pv.saved(scan.referenceBytes), pk.meanKl + pv.meanKl}});
        }
        for (auto& [choices, st] : frontOf(options, scan.referenceBytes)) {
          Assignment a;
          for (int l = 0; l < n; ++l) {
            const int pick = choices[static_cast<std::size_t>(l)] == 1 ? c : kUnquantized;
            a.keys.push_back(pick);
            a.values.push_back(pick);
          }
          a.predictedKl = st.kl;
          a.storedBytes = scan.referenceBytes - st.saved;
          all.push_back(std::move(a));
        }
      }
      break;
    case TuneTarget::Transformers:
      for (int c = kUnquantized; c < cands; ++c) all.push_back(uniformSides(scan, c, c));
      break;
    case TuneTarget::ModelOpt:  // the candidates with a kv_cache_quant_algo (FP8, NVFP4), every layer alike
      all.push_back(uniformSides(scan, kUnquantized, kUnquantized));
      for (int c = 0; c < cands; ++c) {
        try {
          toModelOptConfig(scan.plan.candidates[static_cast<std::size_t>(c)]);
        } catch (const ConfigError&) {
          continue;
        }
        all.push_back(uniformSides(scan, c, c));
      }
      break;
  }
  return frontOfAssignments(std::move(all));
}

std::optional<Assignment> solve(const std::vector<Assignment>& front, const SweepBudget& budget) {
  std::vector<SweepOutcome> outcomes;
  outcomes.reserve(front.size());
  for (const Assignment& a : front) outcomes.push_back({a.storedBytes, a.predictedKl, true, true});
  const auto best = bestUnderBudget(outcomes, budget);
  if (!best) return std::nullopt;
  return front[*best];
}

CacheConfig assignmentConfig(const Scan& scan, const Assignment& a) {
  const int n = scan.plan.numLayers;
  if (static_cast<int>(a.keys.size()) != n || static_cast<int>(a.values.size()) != n)
    throw ConfigError("layers", fmt::format("the assignment covers {} layers, the scan {}", a.keys.size(), n));
  // The most common (keys, values) pair that quantizes becomes the `*` rule (vLLM's form: one dtype, the unquantized
  // layers named as skipped); the other layers are runs of equal pairs.
  std::map<std::pair<int, int>, int> count;
  for (int l = 0; l < n; ++l) ++count[{a.keys[static_cast<std::size_t>(l)], a.values[static_cast<std::size_t>(l)]}];
  const auto common = std::max_element(count.begin(), count.end(), [](const auto& x, const auto& y) {
                        const bool xq = x.first != std::pair{kUnquantized, kUnquantized},
                                   yq = y.first != std::pair{kUnquantized, kUnquantized};
                        return xq != yq ? yq : x.second < y.second;
                      })->first;
  if (count.size() == 1 && common.first == common.second) return candidateOrDynamic(scan, common.first);
  std::vector<LayerRule> rules;
  for (int l = 0; l < n;) {
    const std::pair<int, int> p{a.keys[static_cast<std::size_t>(l)], a.values[static_cast<std::size_t>(l)]};
    int end = l;
    while (end + 1 < n && a.keys[static_cast<std::size_t>(end) + 1] == p.first &&
           a.values[static_cast<std::size_t>(end) + 1] == p.second)
      ++end;
    if (p != common) {
      LayerRule r;
      r.first = l;
      r.last = end;
      r.keys = candidateOrDynamic(scan, p.first);
      r.values = candidateOrDynamic(scan, p.second);
      rules.push_back(std::move(r));
    }
    l = end + 1;
  }
  LayerRule rest;
  rest.keys = candidateOrDynamic(scan, common.first);
  rest.values = candidateOrDynamic(scan, common.second);
  rules.push_back(std::move(rest));
  return perLayerConfig(std::move(rules));
}

std::int64_t ScanFeed::held(std::int64_t window) const {
  if (window <= 0) return tokens;
  // KvCache::trim before each step, then the step's tokens.
  std::int64_t held = 0;
  for (std::int64_t fed = 0; fed < tokens;) {
    const std::int64_t n = std::min(fed == 0 ? std::max<std::int64_t>(prompt, 1) : step, tokens - fed);
    if (held > window - 1 + kWindowSlack) held = window - 1;
    held += n;
    fed += n;
  }
  return held;
}

Scan pricedAt(const Scan& scan, const ScanFeed& feed, std::int64_t context, const LayerWindows& windows,
              const std::vector<double>& values) {
  const int layers = scan.plan.numLayers;
  if (feed.tokens < 1 || feed.step < 1 || context < 1)
    throw ConfigError("context", fmt::format("pricing at {} tokens from runs of {} (steps of {}): each must be at "
                                             "least 1",
                                             context, feed.tokens, feed.step));
  if (!windows.empty() && windows.size() != static_cast<std::size_t>(layers))
    throw ConfigError("context", fmt::format("{} sliding windows for a scan of {} layers", windows.size(), layers));
  if (!values.empty() && values.size() != static_cast<std::size_t>(layers))
    throw ConfigError("context", fmt::format("{} layer shapes for a scan of {} layers", values.size(), layers));
  const auto window = [&](int l) { return windows.empty() ? 0 : windows[static_cast<std::size_t>(l)]; };
  const auto weight = [&](int l) { return values.empty() ? 1.0 : values[static_cast<std::size_t>(l)]; };
  // The reference's bytes per token and layer (each layer's values a token, or one head shape for all), from the
  // tokens each layer held; at the context a sliding layer holds its window.
  std::vector<double> scale(static_cast<std::size_t>(layers));
  double before = 0, after = 0;
  for (int l = 0; l < layers; ++l) {
    const auto was = static_cast<double>(feed.held(window(l)));
    const auto will = static_cast<double>(window(l) > 0 ? std::min(context, window(l)) : context);
    scale[static_cast<std::size_t>(l)] = will / was;
    before += weight(l) * was;
    after += weight(l) * will;
  }
  if (!(before > 0)) throw ConfigError("context", "no layer of the scan stores keys or values");
  Scan out = scan;
  out.referenceBytes = std::llround(static_cast<double>(scan.referenceBytes) * after / before);
  for (Scan::Point& p : out.points) {
    const double saved =
        static_cast<double>(p.saved(scan.referenceBytes)) * scale[static_cast<std::size_t>(p.item.layer)];
    p.storedBytes = out.referenceBytes - std::llround(saved);
  }
  return out;
}

TargetExport exportFor(TuneTarget t, const CacheConfig& cfg, const LayerWindows& windows) {
  TargetExport e;
  try {
    switch (t) {
      case TuneTarget::Kvscope:
        e.text = toSpec(cfg);
        break;
      case TuneTarget::Transformers: {
        e.notes.push_back("transformers' QuantizedCache takes one config for every layer and both sides");
        if (cfg.backend == Backend::Dynamic && !cfg.mixed()) {
          e.text = "(no cache_config: transformers' default cache)";
          break;
        }
        const HfExport hf = toHfCacheConfig(cfg);
        e.text = hf.json;
        e.notes.insert(e.notes.end(), hf.notes.begin(), hf.notes.end());
        break;
      }
      case TuneTarget::ModelOpt: {
        if (cfg.backend == Backend::Dynamic && !cfg.mixed()) {
          e.text = "(no kv_cache_quant_algo: an unquantized KV cache)";
          break;
        }
        const ModelOptExport m = toModelOptConfig(cfg);
        e.text = m.hfQuantConfig;
        e.notes = m.notes;
        e.notes.push_back("config.json \"quantization_config\": " + m.quantizationConfig);
        break;
      }
      case TuneTarget::Vllm:
      case TuneTarget::LlamaCpp: {
        const FlagExport f = t == TuneTarget::Vllm ? toVllmFlags(cfg, windows) : toLlamaCppFlags(cfg, windows);
        e.text = (f.env.empty() ? "" : f.env + " ") + f.flags;
        e.notes = f.notes;
        break;
      }
    }
  } catch (const ConfigError& err) {
    e.text = "(not exported)";
    e.notes.push_back(err.what());
  }
  return e;
}

std::string scanToJson(const Scan& scan, const std::string& settingsJson) {
  json doc = {{"format", "kvscope-tune-scan"}, {"version", 1}};
  doc["settings"] = settingsJson.empty() ? json::object() : json::parse(settingsJson);
  json cands = json::array();
  // A SPEC where it says everything (it reads back as the same config); kvscope's file for calibrated scales.
  for (const CacheConfig& c : scan.plan.candidates)
    cands.push_back(c.keyScales.empty() ? json(toSpec(c)) : json::parse(toKvscopeJson(c)));
  doc["candidates"] = std::move(cands);
  doc["num_layers"] = scan.plan.numLayers;
  doc["reference_bytes"] = scan.referenceBytes;
  json pts = json::array();
  for (const Scan::Point& p : scan.points)
    pts.push_back({{"layer", p.item.layer},
                   {"side", std::string(sideName(p.item.side))},
                   {"candidate", p.item.candidate},
                   {"mean_kl", std::isfinite(p.meanKl) ? json(p.meanKl) : json(nullptr)},
                   {"stored_bytes", p.storedBytes}});
  doc["points"] = std::move(pts);
  return doc.dump(1);
}

Scan scanFromJson(std::string_view text, std::string_view origin, std::string* settingsJson) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw ConfigError("scan", fmt::format("{}: not JSON ({})", origin, e.what()));
  }
  auto bad = [&](const std::string& what) { return ConfigError("scan", fmt::format("{}: {}", origin, what)); };
  if (!doc.is_object() || doc.value("format", "") != "kvscope-tune-scan")
    throw bad("not a kvscope tune scan (no \"format\": \"kvscope-tune-scan\")");
  if (doc.value("version", 0) != 1) throw bad("unsupported scan version (this kvscope reads version 1)");
  try {
    std::vector<CacheConfig> cands;
    for (const json& c : doc.at("candidates"))
      cands.push_back(c.is_string() ? parseSpec(c.get<std::string>())
                                    : configFromJson(c.dump(), fmt::format("{}: candidate {}", origin, cands.size())));
    Scan scan;
    scan.plan = planScan(cands, doc.at("num_layers").get<int>());
    scan.referenceBytes = doc.at("reference_bytes").get<std::int64_t>();
    const json& pts = doc.at("points");
    if (!pts.is_array() || pts.size() != scan.plan.items.size())
      throw bad(
          fmt::format("{} points for {} candidate(s) x {} layers x K/V: a scan has one point per layer side and "
                      "candidate",
                      pts.is_array() ? pts.size() : 0, cands.size(), scan.plan.numLayers));
    for (const json& j : pts) {
      Scan::Point p;
      p.item.layer = j.at("layer").get<int>();
      const std::string side = j.at("side").get<std::string>();
      if (side != "K" && side != "V") throw bad(fmt::format("point side `{}` (K or V)", side));
      p.item.side = side == "K" ? KvSide::Keys : KvSide::Values;
      p.item.candidate = j.at("candidate").get<std::size_t>();
      if (p.item.layer < 0 || p.item.layer >= scan.plan.numLayers || p.item.candidate >= cands.size())
        throw bad(fmt::format("point for layer {} candidate {} is outside the scan", p.item.layer, p.item.candidate));
      p.meanKl = j.at("mean_kl").is_null() ? std::nan("") : j.at("mean_kl").get<double>();
      p.storedBytes = j.at("stored_bytes").get<std::int64_t>();
      scan.points.push_back(p);
    }
    for (const ScanItem& it : scan.plan.items) scan.at(it.layer, it.side, it.candidate);  // each exactly once
    std::sort(scan.points.begin(), scan.points.end(), [](const Scan::Point& a, const Scan::Point& b) {
      return std::tie(a.item.candidate, a.item.layer, a.item.side) <
             std::tie(b.item.candidate, b.item.layer, b.item.side);
    });
    if (settingsJson) *settingsJson = doc.contains("settings") ? doc["settings"].dump() : "{}";
    return scan;
  } catch (const json::exception& e) {
    throw bad(fmt::format("malformed scan ({})", e.what()));
  }
}

}  // namespace kvscope::cache
