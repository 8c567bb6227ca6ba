// `calibrate`: FP8 scales from a text's K/V states, written into a kvscope config file, with the overflow the seed's
// frozen-on-prompt scale would have produced on the same states.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cache/calibration.h"
#include "cache/kv_cache.h"
#include "cli/commands.h"
#include "cli/runtime.h"
#include "cli/text_windows.h"

namespace kvscope::cli {

Runner addCalibrate(CLI::App& app) {
  struct Opts : TextOpts {
    std::string spec = "fp8", method = "amax", output = "-";
    double percentile = 99.99;
    int prompt = 64;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "FP8 scales from a calibration text, written into a kvscope config (used from the first token)");
  addTextOpts(cmd, *o);
  cmd->add_option("--cache", o->spec, "the fp8 SPEC to calibrate (granularity, format, headroom, overflow, sink)");
  cmd->add_option("--method", o->method, "amax: the largest |x|; percentile: that percentile of |x| (x headroom)")
      ->check(CLI::IsMember({"amax", "percentile"}));
  cmd->add_option("--percentile", o->percentile, "with --method percentile, in (0, 100]");
  cmd->add_option("--prompt", o->prompt, "the seed comparison: tokens of each window its scale is frozen on");
  cmd->add_option("-o,--output", o->output, "write the config here (atomically) instead of stdout");
  return [o, cmd]() {
    if (!*cmd) return -1;
    cache::CacheConfig cfg = cache::parseSpec(o->spec);
    if (cfg.backend != cache::Backend::Fp8 || cfg.mixed())
      throw UsageError(fmt::format("calibrate takes an fp8 config, got `{}`", cache::toSpec(cfg)));
    cache::CalibrationOptions co;
    co.granularity = cfg.granularity;
    co.format = cfg.fp8Format;
    co.percentile = o->method == "percentile";
    co.percentileValue = o->percentile;
    co.headroom = cfg.headroom;
    if (o->threads > 0) at::set_num_threads(o->threads);
    const runtime::Session m = openSession(o->model, o->how);
    const auto windows = windowsOf(m, *o);
    const int L = m.model().config().layers;
    cache::Fp8Calibrator cal(L, co);
    cal.setSources(m.model().config().kvSources());  // shared-KV layers take their source's scales
    // The states each window puts in the cache (keys after RoPE), from an unquantized run.
    std::vector<std::vector<std::pair<at::Tensor, at::Tensor>>> states(windows.size());
    std::int64_t tokens = 0;
    for (std::size_t wi = 0; wi < windows.size(); ++wi) {
      std::cerr << fmt::format("calibrate: window {}/{}\n", wi + 1, windows.size());
      states[wi].resize(static_cast<std::size_t>(L));
      auto kv = m.model().makeCache(cache::parseSpec("dynamic"));
      m.model().forward(
          model::idsTensor(windows[wi], 0, windows[wi].size()), *kv, [&](int l, const char* name, const at::Tensor& t) {
            const bool k = std::string(name) == "k", v = std::string(name) == "v";
            if (!k && !v) return;
            cal.add(l, k, t);
            (k ? states[wi][static_cast<std::size_t>(l)].first : states[wi][static_cast<std::size_t>(l)].second) =
                t.clone();
          });
      tokens += static_cast<std::int64_t>(windows[wi].size());
    }
    const std::string label = cache::toSpec(cfg);
    cfg.keyScales = cal.scales(true);
    cfg.valueScales = cal.scales(false);
    // Overflow on the same states, past each window's first --prompt tokens: the seed's per-tensor scale frozen on
    // those tokens against the calibrated scales.
    cache::OverflowCount seed, calibrated;
    for (std::size_t wi = 0; wi < windows.size(); ++wi) {
      const std::int64_t T = static_cast<std::int64_t>(windows[wi].size());
      const std::int64_t P = std::min<std::int64_t>(o->prompt, T - 1);
      for (int l = 0; l < L; ++l)
        for (bool k : {true, false}) {
          const at::Tensor& x =
              k ? states[wi][static_cast<std::size_t>(l)].first : states[wi][static_cast<std::size_t>(l)].second;
          if (!x.defined()) continue;  // a shared-KV layer stores nothing
          const at::Tensor rest = x.narrow(2, P, T - P);
          const auto s = cache::countOverflow(rest, {cache::seedScale(x.narrow(2, 0, P))},
                                              cache::Fp8Granularity::Tensor, cache::Fp8Format::E4M3FN);
          const auto c = cache::countOverflow(rest, (k ? cfg.keyScales : cfg.valueScales)[static_cast<std::size_t>(l)],
                                              cfg.granularity, cfg.fp8Format);
          seed.values += s.values, seed.beyondMax += s.beyondMax, seed.nonFinite += s.nonFinite;
          calibrated.values += c.values, calibrated.beyondMax += c.beyondMax, calibrated.nonFinite += c.nonFinite;
        }
    }
    nlohmann::json doc = nlohmann::json::parse(cache::toKvscopeJson(cfg));
    doc["calibration"] = {
        {"text", o->text},
        {"tokens", tokens},
        {"windows", windows.size()},
        {"method", o->method},
        {"percentile", co.percentile ? nlohmann::json(o->percentile) : nlohmann::json(nullptr)},
        {"headroom", cfg.headroom},
        {"seed_overflow",
         {{"prompt_tokens", o->prompt},
          {"values", seed.values},
          {"beyond_max", seed.beyondMax},
          {"non_finite", seed.nonFinite}}},
        {"calibrated_overflow",
         {{"values", calibrated.values}, {"beyond_max", calibrated.beyondMax}, {"non_finite", calibrated.nonFinite}}}};
    writeOutput(o->output, doc.dump(2) + "\n");
    auto pct = [](std::int64_t n, std::int64_t of) {
      return 100.0 * double(n) / double(std::max<std::int64_t>(of, 1));
    };
    std::cerr << fmt::format(
        "calibrate: {} scales (granularity={}, {}{}, headroom {}) from {} tokens in {} window(s) of {}\n"
        "calibrate: on the same K/V states after each window's first {} tokens ({} values):\n"
        "  seed (one scale per tensor, frozen on those {} tokens): {} beyond the format max ({:.4f}%), {} NaN "
        "({:.4f}%)\n"
        "  calibrated:                                          {} beyond the format max ({:.4f}%), {} NaN/inf "
        "({:.4f}%)\n",
        label, cache::granularityName(cfg.granularity), o->method,
        co.percentile ? fmt::format(" {}", o->percentile) : std::string(), cfg.headroom, tokens, windows.size(),
        windows[0].size(), o->prompt, seed.values, o->prompt, seed.beyondMax, pct(seed.beyondMax, seed.values),
        seed.nonFinite, pct(seed.nonFinite, seed.values), calibrated.beyondMax,
        pct(calibrated.beyondMax, calibrated.values), calibrated.nonFinite,
        pct(calibrated.nonFinite, calibrated.values));
    return 0;
  };
}

}  // namespace kvscope::cli
