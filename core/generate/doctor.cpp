#include "generate/doctor.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string_view>

#include "cache/calibration.h"
#include "cache/config.h"
#include "cache/kv_cache.h"
#include "generate/eval.h"
#include "kernels/cpu/simd.h"
#include "model/llama.h"
#include "util/error.h"
#include "util/layer_ranges.h"

namespace kvscope::generate {
namespace {

constexpr float kE4m3Max = 448.0f;
constexpr std::array<const char*, 2> kSideNames = {"keys", "values"};

float median(std::vector<float> v) {
  if (v.empty()) return 0.0f;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

std::string layerList(const std::vector<int>& layers) {
  std::string s;
  for (std::size_t i = 0; i < layers.size(); ++i)
    s += (i == 0 ? "" : i + 1 == layers.size() ? " and " : ", ") + std::to_string(layers[i]);
  return s;
}

// `base` with 8-bit keys (or values) at `layers`: one llamacpp rule per layer, then `*`.
std::string eightBitAt(const std::vector<int>& layers, bool keys, const cache::CacheConfig& base) {
  cache::CacheConfig wide = base;
  (keys ? wide.typeK : wide.typeV) = cache::LlamaCppType::Q8_0;
  std::string spec = "layers=";
  for (int l : layers) spec += fmt::format("{}:{};", l, cache::toSpec(wide));
  return spec + "*:" + cache::toSpec(base);
}

// The sliding-window layers, and what each engine does with them: they hold their window at any context, so
// quantizing them saves little at long context; vLLM 0.33 and llama.cpp quantize them with the rest unless told,
// transformers' QuantizedCache refuses them. What to try: the base config on the global layers alone (vLLM's
// --kv-cache-dtype-skip-layers sliding_window, as `export --format vllm --model` writes it).
// Layers that read another's KV (Gemma 4's shared layers) hold nothing and are left out.
std::optional<DoctorVerdict> slidingWindowVerdict(const model::ModelConfig& c, const cache::CacheConfig& base) {
  std::vector<int> sliding;
  std::int64_t window = 0;
  std::size_t own = 0;
  // Each layer's K/V values a token (Gemma 4's full layers differ) times the tokens it holds at 32,768 of context.
  double slidingValues = 0.0, globalValues = 0.0;
  for (std::size_t l = 0; l < c.layerSpecs.size(); ++l) {
    if (c.layerSpecs[l].kvFrom >= 0) continue;
    ++own;
    const double perToken = c.kvValuesOf(static_cast<int>(l));
    if (c.layerSpecs[l].window > 0) {
      sliding.push_back(static_cast<int>(l));
      window = std::max(window, c.layerSpecs[l].window);
      slidingValues += perToken * static_cast<double>(std::min<std::int64_t>(c.layerSpecs[l].window, 32768));
    } else {
      globalValues += perToken * 32768.0;
    }
  }
  if (sliding.empty()) return std::nullopt;
  const std::size_t global = own - sliding.size();
  std::string spec = "layers=";  // a rule a run: 0-4:dynamic;6-10:dynamic;...
  for (const auto& [first, last] : util::layerRuns(sliding))
    spec += last > first ? fmt::format("{}-{}:dynamic;", first, last) : fmt::format("{}:dynamic;", first);
  return DoctorVerdict{
      "sliding_window", "keys and values", sliding,
      fmt::format(
          "layer{} {} slide over {} tokens ({} of {}): each holds at most its window at any context, "
          "so at 32,768 tokens {} hold{} {:.1f}% of the KV bytes; vLLM 0.33 and llama.cpp quantize them "
          "with the rest unless told (vLLM: --kv-cache-dtype-skip-layers sliding_window; llama.cpp: the same "
          "-ctk/-ctv for its SWA cache), transformers' QuantizedCache refuses them: quantize the global "
          "layers{}",
          sliding.size() > 1 ? "s" : "", layerList(sliding), window, sliding.size(),
          own == c.layerSpecs.size() ? fmt::format("{}", own) : fmt::format("{} with a cache of their own", own),
          sliding.size() > 1 ? "they" : "it", sliding.size() > 1 ? "" : "s",
          100.0 * slidingValues / (slidingValues + globalValues),
          global > 0 ? " and keep these in the model's dtype" : " only where a long context needs it"),
      global > 0 ? spec + "*:" + cache::toSpec(base) : cache::toSpec(base)};
}

// A JSON number, null where not finite.
nlohmann::json num(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

// What the fp8 verdicts suggest: calibrating the scales on the doctor's text.
std::string calibrateCommand(const std::string& text) {
  return fmt::format("kvscope-cli calibrate --cache fp8 --text {} -o fp8.json", text);
}

// How much of the unit scale's KL calibration removes, as a parenthesis ("" where not known).
std::string recoveryText(const DoctorFp8& f) {
  const double x = f.recovered();
  if (!std::isfinite(x)) return {};
  return x >= 0 ? fmt::format(" (calibration recovers {:.0f}% of the unit-scale KL)", 100 * x)
                : fmt::format(" (calibrated scales do no better here: {:.0f}% more KL)", -100 * x);
}

std::string klText(double kl, std::int64_t nonFinite) {
  return nonFinite > 0 ? fmt::format("not finite ({} positions)", nonFinite) : fmt::format("{:.4g}", kl);
}

}  // namespace

void checkDoctorOptions(const DoctorOptions& o) {
  if (!(o.outlierRatio > 1.0) || !(o.biasRatio > 1.0) || !(o.biasFloor >= 0.0))
    throw Error(ErrorCode::BadInput, "doctor: the outlier and bias ratios must be above 1, the bias floor at least 0");
  const cache::CacheConfig base = cache::parseSpec(o.base);
  if (base.backend != cache::Backend::LlamaCpp || base.mixed() || base.tiered())
    throw Error(ErrorCode::BadInput,
                fmt::format("doctor: the base config must be one llamacpp config, got `{}`", o.base));
}

DoctorReport diagnose(model::LlamaModel& m, const std::vector<std::vector<std::int64_t>>& windows,
                      const DoctorOptions& o) {
  checkDoctorOptions(o);
  if (windows.empty() || windows.front().empty())
    throw Error(ErrorCode::BadInput, "doctor: no calibration tokens (the text is empty)");
  const cache::CacheConfig base = cache::parseSpec(o.base);

  const model::ModelConfig& c = m.config();
  DoctorReport r;
  r.arch = c.arch;
  r.cpuKernels = kernels::isaSummary();
  r.layers = c.layers;
  r.heads = c.heads;
  r.kvHeads = c.kvHeads;
  r.headDim = c.headDim;
  for (int l = 0; l < c.layers; ++l) {
    r.headDims.push_back(c.headDimOf(l));
    r.kvHeadsPerLayer.push_back(c.kvHeadsOf(l));
    r.kvSources.push_back(c.layerSpecs[static_cast<std::size_t>(l)].kvFrom);
  }
  // Every head size the layers have must qualify.
  r.llamaCppRotation = std::all_of(r.headDims.begin(), r.headDims.end(), [](int d) { return d % 64 == 0; });
  r.powerOfTwoHead =
      std::all_of(r.headDims.begin(), r.headDims.end(), [](int d) { return d >= 32 && (d & (d - 1)) == 0; });
  for (int l : {0, 1, c.layers - 2, c.layers - 1})
    if (l >= 0 && l < c.layers &&
        std::find(r.boundaryLayers.begin(), r.boundaryLayers.end(), l) == r.boundaryLayers.end())
      r.boundaryLayers.push_back(l);
  r.sides.resize(static_cast<std::size_t>(c.layers));

  // Each channel's max |x| over every window, per layer and side: [kvHeads * headDim].
  std::vector<std::array<at::Tensor, 2>> channelMax(static_cast<std::size_t>(c.layers));
  cache::Fp8Calibrator calibrator(c.layers, {});  // per tensor, amax, e4m3: vLLM's calibrated k_scale / v_scale
  calibrator.setSources(c.kvSources());
  for (const auto& w : windows) {
    auto kv = m.makeCache(cache::parseSpec("dynamic"));
    m.forward(model::idsTensor(w, 0, w.size()), *kv, [&](int l, const char* name, const at::Tensor& t) {
      const std::string_view n(name);
      if (n != "k" && n != "v") return;
      const int side = n == "k" ? 0 : 1;
      if (o.fp8Kl) calibrator.add(l, side == 0, t);
      const at::Tensor x = t.detach().to(at::kCPU, at::kFloat).abs();  // [B, H, T, D]
      DoctorSide& s = r.sides[static_cast<std::size_t>(l)][static_cast<std::size_t>(side)];
      s.values += x.numel();
      s.overUnitScale += (x > kE4m3Max).sum().item<std::int64_t>();
      const at::Tensor cm = x.amax({0, 2}).reshape({-1});  // [H * D]
      at::Tensor& acc = channelMax[static_cast<std::size_t>(l)][static_cast<std::size_t>(side)];
      acc = acc.defined() ? at::maximum(acc, cm) : cm;
    });
    r.tokens += static_cast<std::int64_t>(w.size());
  }

  for (int l = 0; l < c.layers; ++l)
    for (int side = 0; side < 2; ++side) {
      DoctorSide& s = r.sides[static_cast<std::size_t>(l)][static_cast<std::size_t>(side)];
      const at::Tensor& cm = channelMax[static_cast<std::size_t>(l)][static_cast<std::size_t>(side)];
      if (!cm.defined()) continue;
      const at::Tensor cc = cm.contiguous();
      const std::vector<float> v(cc.const_data_ptr<float>(), cc.const_data_ptr<float>() + cc.numel());
      const auto top = std::max_element(v.begin(), v.end());
      s.amax = *top;
      s.outlierHead = static_cast<int>((top - v.begin()) / c.headDimOf(l));
      s.outlierChannel = static_cast<int>((top - v.begin()) % c.headDimOf(l));
      s.medianChannel = median(v);
      s.outlierRatio = s.medianChannel > 0.0f ? double(s.amax) / s.medianChannel : 0.0;
      const at::Tensor b = m.projectionBias(l, side == 0 ? 'k' : 'v');
      if (b.defined()) {
        const at::Tensor ab = b.detach().to(at::kCPU, at::kFloat).abs().reshape({-1});
        s.hasBias = true;
        s.biasMax = ab.max().item<float>();
        s.biasChannel = static_cast<int>(ab.argmax().item<std::int64_t>());
      }
    }

  if (o.fp8Kl && windows.front().size() >= 2) {
    // Both saturate, as vLLM's cast into its fp8 cache does (a value past 448 becomes 448).
    cache::CacheConfig unit = cache::parseSpec("fp8:scale=unit,overflow=saturate"),
                       calibrated = cache::parseSpec("fp8:overflow=saturate");
    calibrated.keyScales = calibrator.scales(true);
    calibrated.valueScales = calibrator.scales(false);
    EvalOptions eo;
    eo.prompt = std::max<int>(1, static_cast<int>(windows.front().size() / 4));
    eo.step = 32;
    const auto figs = evaluate(m, windows, {unit, calibrated}, eo);
    r.fp8.unitKl = figs[1].meanKl();
    r.fp8.calibratedKl = figs[2].meanKl();
    r.fp8.positions = figs[1].scored;
    r.fp8.unitNonFinite = figs[1].nonFinitePositions;
    r.fp8.calibratedNonFinite = figs[2].nonFinitePositions;
  }

  // Key-fragile models: q8_0 keys on every layer, then, on a sink model or where that costs 0.001 or more, on each
  // layer alone (the tuner's scan, from the reference's residual stream); in float32 activations, where the cache's
  // cost is its own.
  std::vector<int> sinkLayers;
  for (std::size_t l = 0; l < c.layerSpecs.size(); ++l)
    if (c.layerSpecs[l].sinks) sinkLayers.push_back(static_cast<int>(l));
  if (o.keyKl && (!sinkLayers.empty() || c.headDim == 64) && windows.front().size() >= 2) {
    r.keyQ8.sinks = !sinkLayers.empty();
    r.keyQ8.why = r.keyQ8.sinks ? "learned attention sinks on layers " + util::layerRanges(sinkLayers) : "";
    if (c.headDim == 64) r.keyQ8.why += (r.keyQ8.why.empty() ? "" : " and ") + std::string("head size 64");
    const ScanArithmetic arithmetic(m);
    const std::string q8 = "llamacpp:type_k=q8_0,type_v=f16";
    EvalOptions eo;
    eo.prompt = std::max<int>(1, static_cast<int>(windows.front().size() / 4));
    eo.step = 32;
    const auto all = evaluate(m, windows, {cache::parseSpec(q8)}, eo);
    r.keyQ8.allKl = all[1].meanKl();
    r.keyQ8.positions = all[1].scored;
    if (r.keyQ8.sinks || r.keyQ8.allKl >= 1e-3 || o.keyLayers) {
      std::vector<LayerRun> runs;
      runs.reserve(static_cast<std::size_t>(c.layers));
      for (int l = 0; l < c.layers; ++l)
        runs.push_back({l, cache::parseSpec(fmt::format("layers={}:{};*:dynamic", l, q8))});
      const auto perLayer = evaluateLayerRuns(m, windows, runs, eo);
      for (int l = 0; l < c.layers; ++l) r.keyQ8.layerKl.push_back(perLayer[static_cast<std::size_t>(l) + 1].meanKl());
    }
  }

  // Verdicts, keys first.
  for (int side = 0; side < 2; ++side) {
    const bool keys = side == 0;
    const char* name = kSideNames[static_cast<std::size_t>(side)];
    auto sideOf = [&](int l) -> const DoctorSide& {
      return r.sides[static_cast<std::size_t>(l)][static_cast<std::size_t>(side)];
    };
    std::vector<int> outliers, spikes, overflow;
    std::vector<float> biases;
    for (int l = 0; l < c.layers; ++l) {
      if (sideOf(l).outlierRatio >= o.outlierRatio) outliers.push_back(l);
      if (sideOf(l).overUnitScale > 0) overflow.push_back(l);
      if (sideOf(l).hasBias) biases.push_back(sideOf(l).biasMax);
    }
    const float biasMedian = median(biases);
    for (int l = 0; l < c.layers; ++l)
      if (sideOf(l).hasBias && sideOf(l).biasMax >= o.biasFloor && sideOf(l).biasMax >= o.biasRatio * biasMedian)
        spikes.push_back(l);
    auto worst = [&](const std::vector<int>& ls, auto key) {
      return *std::max_element(ls.begin(), ls.end(), [&](int a, int b) { return key(sideOf(a)) < key(sideOf(b)); });
    };
    if (!outliers.empty()) {
      const int w = worst(outliers, [](const DoctorSide& s) { return s.outlierRatio; });
      const DoctorSide& s = sideOf(w);
      r.verdicts.push_back(
          {"outlier_channels", name, outliers,
           fmt::format("{} of layer{} {} have channels up to {:.0f}x the median channel (layer {}: head {} channel {}, "
                       "|x| {:.4g} against a median of {:.3g}): keep them in 8 bits{}",
                       name, outliers.size() > 1 ? "s" : "", layerList(outliers), s.outlierRatio, w, s.outlierHead,
                       s.outlierChannel, s.amax, s.medianChannel,
                       r.llamaCppRotation ? " or rotate (llama.cpp's rotation applies to this head size)" : ""),
           eightBitAt(outliers, keys, base)});
    }
    if (!spikes.empty()) {
      const int w = worst(spikes, [](const DoctorSide& s) { return s.biasMax; });
      r.verdicts.push_back(
          {"bias_spikes", name, spikes,
           fmt::format(
               "the {} projection's bias reaches {:.4g} at layer{} {} (layer {}, channel {}; the median layer's "
               "largest is {:.3g}): a bias that large dominates its channel, which 4-bit {} cannot hold; keep "
               "those layers in 8 bits",
               keys ? "k" : "v", sideOf(w).biasMax, spikes.size() > 1 ? "s" : "", layerList(spikes), w,
               sideOf(w).biasChannel, biasMedian, name),
           eightBitAt(spikes, keys, base)});
    }
    if (!overflow.empty()) {
      std::int64_t over = 0, values = 0;
      for (int l : overflow) over += sideOf(l).overUnitScale;
      for (int l = 0; l < c.layers; ++l) values += sideOf(l).values;
      const int w = worst(overflow, [](const DoctorSide& s) { return double(s.overUnitScale) / double(s.values); });
      r.verdicts.push_back(
          {"fp8_overflow", name, overflow,
           fmt::format("fp8 with scale 1.0 (vLLM without calibrated scales) overflows on {:.3g}% of the {} at layer{} "
                       "{} ({:.3g}% at layer {}, |x| up to {:.4g} > 448): calibrate the scales",
                       100.0 * double(over) / double(std::max<std::int64_t>(values, 1)), name,
                       overflow.size() > 1 ? "s" : "", layerList(overflow),
                       100.0 * double(sideOf(w).overUnitScale) / double(sideOf(w).values), w, sideOf(w).amax),
           calibrateCommand(o.text)});
    }
  }
  if (auto v = fp8CalibrationVerdict(r.fp8, c.layers, o.text)) r.verdicts.push_back(std::move(*v));
  if (auto v = slidingWindowVerdict(c, cache::parseSpec(o.base))) r.verdicts.push_back(std::move(*v));
  if (auto v = keyFragileVerdict(r.keyQ8, o.base)) r.verdicts.push_back(std::move(*v));
  return r;
}

std::optional<DoctorVerdict> keyFragileVerdict(const DoctorKeyQ8& k, const std::string& base) {
  // Where 8-bit keys cost little on this text (below 0.001, about what llama.cpp's q8_0 K/V costs a head-size-128
  // model), a sink model's verdict says so rather than alarm, and a head-size-64 model gets none.
  const bool costly = k.allKl >= 1e-3;
  if (!k.measured() || k.layerKl.empty() || !(costly || k.sinks)) return std::nullopt;
  // The layers that cost most: at least twice the median layer's KL, at most a quarter of the layers (one at least).
  std::vector<int> order(k.layerKl.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return k.layerKl[static_cast<std::size_t>(a)] > k.layerKl[static_cast<std::size_t>(b)];
  });
  std::vector<float> kls(k.layerKl.begin(), k.layerKl.end());
  const double med = median(kls), sum = std::accumulate(k.layerKl.begin(), k.layerKl.end(), 0.0);
  std::vector<int> worst;
  const std::size_t most = std::max<std::size_t>(1, k.layerKl.size() / 4);
  for (const int l : order)
    if (worst.size() < most && (worst.empty() || k.layerKl[static_cast<std::size_t>(l)] >= 2 * med)) worst.push_back(l);
  std::sort(worst.begin(), worst.end());
  double worstSum = 0;
  std::string each;
  for (const int l : worst) {
    worstSum += k.layerKl[static_cast<std::size_t>(l)];
    each += fmt::format("{}{}: {:.3g}", each.empty() ? "" : ", ", l, k.layerKl[static_cast<std::size_t>(l)]);
  }
  cache::CacheConfig keep = cache::parseSpec(base);
  keep.typeK = cache::LlamaCppType::F16;
  std::string spec = "layers=";
  for (const int l : worst) spec += fmt::format("{}:{};", l, cache::toSpec(keep));
  const std::string share =
      sum > 0 ? fmt::format(", {:.0f}% of the per-layer sum from layer{} {} ({})", 100.0 * worstSum / sum,
                            worst.size() > 1 ? "s" : "", layerList(worst), each)
              : std::string();
  return DoctorVerdict{
      "key_fragile", "keys", worst,
      fmt::format("keys {} here ({}): llama.cpp's q8_0 keys alone cost a mean KL of {:.4g} over this text ({} scored "
                  "positions){}; on gpt-oss-20b llama.cpp's q8_0 K/V gave a median KLD of 0.055 against about 0.018 "
                  "on a head-size-128 model (TheTom/llama-cpp-turboquant #305), the output fluent while the "
                  "distribution moves: {}",
                  costly ? "are fragile" : "may be fragile", k.why, k.allKl, k.positions, share,
                  costly ? "keep those layers' keys in f16"
                         : "8-bit keys hold on this text; before 4-bit keys, keep the costliest layers' keys in f16"),
      spec + "*:" + base};
}

std::optional<DoctorVerdict> fp8CalibrationVerdict(const DoctorFp8& f, int layers, const std::string& text) {
  if (!f.measured()) return std::nullopt;
  std::vector<int> all(static_cast<std::size_t>(std::max(layers, 0)));
  std::iota(all.begin(), all.end(), 0);
  const std::string calibrate = calibrateCommand(text);
  if (f.unitNonFinite > 0 && f.calibratedNonFinite < f.unitNonFinite)
    return DoctorVerdict{"fp8_calibration", "keys and values", all,
                         fmt::format("fp8 with scale 1.0 gives non-finite logits at {} of the text's {} scored "
                                     "positions; with scales calibrated on it, at {} (mean KL {:.4g}): calibrate the "
                                     "scales",
                                     f.unitNonFinite, f.positions, f.calibratedNonFinite, f.calibratedKl),
                         calibrate};
  if (f.unitKl >= 1e-3 && f.recovered() >= 0.5)
    return DoctorVerdict{"fp8_calibration", "keys and values", all,
                         fmt::format("fp8 with scale 1.0 costs a mean KL of {:.4g} on this text, with calibrated "
                                     "scales {:.4g}: calibration recovers {:.0f}% of the unit-scale KL; calibrate the "
                                     "scales",
                                     f.unitKl, f.calibratedKl, 100.0 * f.recovered()),
                         calibrate};
  return std::nullopt;
}

std::string doctorJson(const DoctorReport& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (std::size_t l = 0; l < r.sides.size(); ++l) {
    nlohmann::json row = {{"layer", l}};
    for (int side = 0; side < 2; ++side) {
      const DoctorSide& s = r.sides[l][static_cast<std::size_t>(side)];
      row[kSideNames[static_cast<std::size_t>(side)]] = {
          {"amax", s.amax},
          {"median_channel_amax", s.medianChannel},
          {"outlier_ratio", s.outlierRatio},
          {"outlier_head", s.outlierHead},
          {"outlier_channel", s.outlierChannel},
          {"values", s.values},
          {"over_448", s.overUnitScale},
          {"bias_max", s.hasBias ? nlohmann::json(s.biasMax) : nlohmann::json(nullptr)},
          {"bias_channel", s.hasBias ? nlohmann::json(s.biasChannel) : nlohmann::json(nullptr)}};
    }
    layers.push_back(row);
  }
  nlohmann::json verdicts = nlohmann::json::array();
  for (const auto& v : r.verdicts)
    verdicts.push_back(
        {{"kind", v.kind}, {"side", v.side}, {"layers", v.layers}, {"text", v.text}, {"config", v.config}});
  const nlohmann::json doc = {
      {"model",
       {{"arch", r.arch},
        {"layers", r.layers},
        {"heads", r.heads},
        {"kv_heads", r.kvHeads},
        {"gqa_ratio", r.kvHeads > 0 ? r.heads / r.kvHeads : 0},
        {"head_dim", r.headDim},
        {"head_dims", r.headDims},
        {"kv_heads_per_layer", r.kvHeadsPerLayer},
        {"kv_sources", r.kvSources}}},
      {"tokens", r.tokens},
      {"llamacpp_rotation", r.llamaCppRotation},
      {"power_of_two_head", r.powerOfTwoHead},
      {"boundary_layers", r.boundaryLayers},
      {"cpu_kernels", r.cpuKernels},
      {"fp8", !r.fp8.measured() ? nlohmann::json(nullptr)
                                : nlohmann::json{{"positions", r.fp8.positions},
                                                 {"unit_scale_mean_kl", num(r.fp8.unitKl)},
                                                 {"calibrated_mean_kl", num(r.fp8.calibratedKl)},
                                                 {"unit_scale_non_finite", r.fp8.unitNonFinite},
                                                 {"calibrated_non_finite", r.fp8.calibratedNonFinite},
                                                 {"recovered", num(r.fp8.recovered())}}},
      {"key_q8", !r.keyQ8.measured() ? nlohmann::json(nullptr)
                                     : nlohmann::json{{"why", r.keyQ8.why},
                                                      {"positions", r.keyQ8.positions},
                                                      {"all_layers_mean_kl", num(r.keyQ8.allKl)},
                                                      {"layer_mean_kl", r.keyQ8.layerKl}}},
      {"layers", layers},
      {"verdicts", verdicts}};
  return doc.dump(2) + "\n";
}

std::string doctorFp8Text(const DoctorFp8& f) {
  if (!f.measured()) return {};
  return fmt::format(
      "fp8 (e4m3) on every layer, {} scored positions: mean KL {} with scale 1.0 (vLLM's default), {} with calibrated "
      "scales{}",
      f.positions, klText(f.unitKl, f.unitNonFinite), klText(f.calibratedKl, f.calibratedNonFinite), recoveryText(f));
}

std::string doctorText(const DoctorReport& r) {
  // Layers of another head size (Gemma 4's full ones): "head size 256 (512, 4 KV heads on layers 5,11)".
  std::vector<int> other;
  for (std::size_t l = 0; l < r.headDims.size(); ++l)
    if (r.headDims[l] != r.headDim) other.push_back(static_cast<int>(l));
  const std::string heads =
      other.empty() ? fmt::format("{}", r.headDim)
                    : fmt::format("{} ({}, {} KV heads on layers {})", r.headDim,
                                  r.headDims[static_cast<std::size_t>(other.front())],
                                  r.kvHeadsPerLayer[static_cast<std::size_t>(other.front())], layerList(other));
  std::string out = fmt::format(
      "model: {} · {} layers · {} query heads, {} KV heads (GQA {}:1) · head size {} · {} calibration tokens\n", r.arch,
      r.layers, r.heads, r.kvHeads, r.kvHeads > 0 ? r.heads / r.kvHeads : 0, heads, r.tokens);
  out += fmt::format(
      "rotation: llama.cpp's K/V rotation {} (quantized types q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl; head size {} {} "
      "a multiple of 64); TurboQuant, UltraQuant and mxfp4:rot=on {}\n",
      r.llamaCppRotation ? "applies" : "does not apply", other.empty() ? fmt::format("{}", r.headDim) : "each",
      r.llamaCppRotation ? "is" : "is not",
      r.powerOfTwoHead ? "apply (a power-of-two head size)" : "do not (the head size is not a power of two)");
  out +=
      fmt::format("boundary layers: {} (vLLM leaves them unquantized for TurboQuant)\n", layerList(r.boundaryLayers));
  out += fmt::format("CPU kernels: {}\n\n", r.cpuKernels);
  out += fmt::format("{:>5}  {:>10} {:>8} {:>9} {:>9}   {:>10} {:>8} {:>9} {:>9}\n", "layer", "|k| max", "x median",
                     "k > 448", "k bias", "|v| max", "x median", "v > 448", "v bias");
  for (std::size_t l = 0; l < r.sides.size(); ++l) {
    const auto& k = r.sides[l][0];
    const auto& v = r.sides[l][1];
    if (l < r.kvSources.size() && r.kvSources[l] >= 0) {
      out += fmt::format("{:>5}  reads layer {}'s keys and values (stores none)\n", l, r.kvSources[l]);
      continue;
    }
    auto bias = [](const DoctorSide& s) { return s.hasBias ? fmt::format("{:.3g}", s.biasMax) : std::string("-"); };
    auto pct = [](const DoctorSide& s) {
      return s.overUnitScale ? fmt::format("{:.3g}%", 100.0 * double(s.overUnitScale) / double(s.values))
                             : std::string("0");
    };
    out += fmt::format("{:>5}  {:>10.4g} {:>7.1f}x {:>9} {:>9}   {:>10.4g} {:>7.1f}x {:>9} {:>9}\n", l, k.amax,
                       k.outlierRatio, pct(k), bias(k), v.amax, v.outlierRatio, pct(v), bias(v));
  }
  out += "\n";
  if (r.fp8.measured()) out += doctorFp8Text(r.fp8) + "\n";
  if (r.keyQ8.measured())
    out += fmt::format(
        "key-fragile ({}): llama.cpp's q8_0 keys (values f16) cost a mean KL of {:.4g} on every layer{}\n", r.keyQ8.why,
        r.keyQ8.allKl,
        r.keyQ8.layerKl.empty() ? std::string(" (below 0.001: not scanned layer by layer)")
                                : fmt::format(", {:.4g} summed layer by layer",
                                              std::accumulate(r.keyQ8.layerKl.begin(), r.keyQ8.layerKl.end(), 0.0)));
  if (r.verdicts.empty()) out += "verdict: nothing alarming: no outlier channels, bias spikes or fp8 overflow\n";
  for (const auto& v : r.verdicts) out += fmt::format("verdict: {}\n  try: {}\n", v.text, v.config);
  return out;
}

}  // namespace kvscope::generate
