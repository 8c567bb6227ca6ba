#include "overflow_advice.h"

#include <QCoreApplication>
#include <QStringList>
#include <string_view>
#include <vector>

#include "message_bar.h"

namespace kvscope::ui {

namespace {
QString tr(const char* text) {
  return QCoreApplication::translate("OverflowAdvice", text);
}
QString qs(std::string_view s) {
  return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size()));
}

/// A uniform config (or one side of a per-layer rule) that stores NaN/inf where a value overflows its frozen scale.
bool storesNonFinite(const cache::CacheConfig& c) {
  return c.backend == cache::Backend::Fp8 && c.overflow == cache::OverflowPolicy::Nan;
}

/// `cfg` with overflow=saturate wherever it stores NaN/inf. A per-layer config's own fields mirror one of its sides
/// (cache::CacheConfig::layers): they change with it.
cache::CacheConfig saturated(cache::CacheConfig cfg) {
  auto fix = [](cache::CacheConfig& c) {
    if (storesNonFinite(c)) c.overflow = cache::OverflowPolicy::Saturate;
  };
  fix(cfg);
  for (auto& rule : cfg.layers) fix(rule.keys), fix(rule.values);
  return cfg;
}
}  // namespace

std::optional<OverflowAdvice> overflowAdvice(const RunSnapshot& run) {
  const std::int64_t stored = run.cache.overflowTotals().nonFinite;
  if (stored == 0 || !run.config) return std::nullopt;
  const cache::CacheConfig& cfg = *run.config;
  std::vector<const cache::CacheConfig*> sides;  // the fp8 configs that store NaN/inf on overflow
  if (cfg.mixed()) {
    for (const auto& rule : cfg.layers)
      for (const auto* c : {&rule.keys, &rule.values})
        if (storesNonFinite(*c)) sides.push_back(c);
  } else if (storesNonFinite(cfg)) {
    sides.push_back(&cfg);
  }
  if (sides.empty()) return std::nullopt;

  QStringList granularities, sources, maxima, written;
  auto add = [](QStringList& list, const QString& s) {
    if (!list.contains(s)) list << s;
  };
  for (const auto* c : sides) {
    add(granularities, tr("per-%1").arg(qs(cache::granularityName(c->granularity))));
    add(sources, !c->keyScales.empty()                  ? tr("calibrated offline")
                 : c->fp8Scale == cache::Fp8Scale::Unit ? tr("fixed at 1.0")
                                                        : tr("calibrated on the prompt"));
    add(maxima,
        tr("%1 for %2").arg(cache::fp8Max(c->fp8Format), 0, 'f', 0).arg(qs(cache::fp8FormatName(c->fp8Format))));
    // PyTorch's cast: e4m3fn has no infinity and gives NaN, e5m2 gives inf.
    add(written, c->fp8Format == cache::Fp8Format::E5M2 ? QString("inf") : QString("NaN"));
  }
  const QString nan = qs(cache::overflowName(cache::OverflowPolicy::Nan));
  const QString saturate = qs(cache::overflowName(cache::OverflowPolicy::Saturate));
  OverflowAdvice a;
  a.text = tr("NaN/inf stored: %1 values. The fp8 cache's frozen %2 scale (%3) overflowed: values above the "
              "format's max (%4) x scale were stored as %5 (overflow=%6, as transformers' cast does), and attention "
              "spread them to the tokens after, so the output is garbage. overflow=%7 clamps them to the max "
              "instead.")
               .arg(stored)
               .arg(granularities.join("/"), sources.join("/"), maxima.join(", "), written.join("/"), nan, saturate);
  a.rerun = saturated(cfg);
  return a;
}

void showOverflowAdvice(MessageBar* bar, const RunSnapshot& run, bool offerRerun,
                        const std::function<void(const cache::CacheConfig& config)>& rerun) {
  const auto advice = overflowAdvice(run);
  if (!advice) return;
  QVector<MessageBar::Action> fix;
  if (offerRerun)
    fix.push_back({QCoreApplication::translate("MainWindow", "Rerun with overflow=%1")
                       .arg(qs(cache::overflowName(cache::OverflowPolicy::Saturate))),
                   "rerunSaturate", [rerun, cfg = advice->rerun] { rerun(cfg); }});
  bar->showMessage(MessageBar::Kind::Warning, advice->text, fix);
}

}  // namespace kvscope::ui
