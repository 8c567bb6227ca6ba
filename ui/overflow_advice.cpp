#include "overflow_advice.h"

#include <QCoreApplication>

#include "message_bar.h"

#include <QStringList>
#include <vector>

#include "cache/config.h"
#include "kernels/fp8.h"

namespace kvscope::ui {

namespace {
QString tr(const char* text) { return QCoreApplication::translate("OverflowAdvice", text); }

float formatMax(cache::Fp8Format f) {
  return kernels::fp8Max(f == cache::Fp8Format::E5M2 ? kernels::Fp8Format::E5M2 : kernels::Fp8Format::E4M3FN);
}
}  // namespace

std::optional<OverflowAdvice> overflowAdvice(const RunSnapshot& run) {
  const std::int64_t stored = run.cache.overflowTotals().nonFinite;
  if (stored == 0) return std::nullopt;
  const auto [label, calibrated] = parseRunLabel(run.spec);
  cache::CacheConfig cfg;
  try {
    cfg = cache::parseSpec(label.toStdString());
  } catch (const cache::ConfigError&) {
    return std::nullopt;  // not a SPEC: nothing to say about its policy
  }
  std::vector<const cache::CacheConfig*> sides;  // the fp8 configs that store NaN/inf on overflow
  auto consider = [&](const cache::CacheConfig& c) {
    if (c.backend == cache::Backend::Fp8 && c.overflow == cache::OverflowPolicy::Nan) sides.push_back(&c);
  };
  if (cfg.mixed()) {
    for (const auto& rule : cfg.layers) consider(rule.keys), consider(rule.values);
  } else {
    consider(cfg);
  }
  if (sides.empty()) return std::nullopt;

  QStringList granularities, maxima, written;
  for (const auto* c : sides) {
    const QString g = tr("per-%1").arg(QString::fromStdString(std::string(cache::granularityName(c->granularity))));
    const bool e5m2 = c->fp8Format == cache::Fp8Format::E5M2;
    const QString m = tr("%1 for %2").arg(formatMax(c->fp8Format), 0, 'f', 0).arg(e5m2 ? "e5m2" : "e4m3fn");
    // PyTorch's cast: e4m3fn has no infinity and gives NaN, e5m2 gives inf.
    const QString w = e5m2 ? QString("inf") : QString("NaN");
    if (!granularities.contains(g)) granularities << g;
    if (!maxima.contains(m)) maxima << m;
    if (!written.contains(w)) written << w;
  }
  OverflowAdvice a;
  a.text = tr("NaN/inf stored: %1 values. The fp8 cache's frozen %2 scale (%3) overflowed: values above the "
              "format's max (%4) x scale were stored as %5 (overflow=nan, as transformers' cast does), and attention "
              "spread them to the tokens after, so the output is garbage. overflow=saturate clamps them to the max "
              "instead.")
               .arg(stored)
               .arg(granularities.join("/"),
                    calibrated ? tr("calibrated offline") : tr("calibrated on the prompt"),
                    maxima.join(", "), written.join("/"));
  if (!cfg.mixed() && !calibrated) {
    cache::CacheConfig fixed = cfg;
    fixed.overflow = cache::OverflowPolicy::Saturate;
    a.saturatedSpec = QString::fromStdString(cache::toSpec(fixed));
  }
  return a;
}

void showOverflowAdvice(MessageBar* bar, const RunSnapshot& run, bool offerRerun,
                        const std::function<void(const QString& spec)>& rerun) {
  const auto advice = overflowAdvice(run);
  if (!advice) return;
  QVector<MessageBar::Action> fix;
  if (!advice->saturatedSpec.isEmpty() && offerRerun)
    fix.push_back({QCoreApplication::translate("MainWindow", "Rerun with overflow=saturate"), "rerunSaturate",
                   [rerun, spec = advice->saturatedSpec] { rerun(spec); }});
  bar->showMessage(MessageBar::Kind::Warning, advice->text, fix);
}

}  // namespace kvscope::ui
