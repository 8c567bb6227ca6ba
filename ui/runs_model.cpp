#include "runs_model.h"

#include <QColor>
#include <QMap>
#include <algorithm>
#include <cmath>
#include <optional>

#include "cache/config.h"
#include "util/metrics.h"

namespace kvscope::ui {

namespace {

/// exp(-mean log-prob) of the generated tokens under the run's own cache: not comparable between runs (a cache that
/// repeats one token scores well), so only the tooltip shows it.
QString ownPerplexity(const RunSnapshot& run) {
  if (!run.beamSteps.isEmpty() || !run.beamTexts.isEmpty()) return "-";  // beam hypotheses carry scores, not log-probs
  double s = 0;
  int n = 0;
  for (const auto& t : run.tokens)
    if (std::isfinite(t.logprob)) s += t.logprob, ++n;
  return n ? QString::number(kvscope::perplexity(-s, n), 'f', 3) : QString("-");
}

/// A figure as the table shows it: "NaN"/"inf" spelled out.
QString figure(double x, char format, int precision) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return QString::number(x, format, precision);
}

// A run's config as ordered (key, value) pairs: the backend, then every option resolved. A per-layer or tiered config
// is its SPEC whole (its rules or tiers are what tell it apart); a run without a recorded config is its label.
QVector<QPair<QString, QString>> facets(const RunSnapshot& run) {
  QVector<QPair<QString, QString>> out;
  if (!run.config || run.config->mixed() || run.config->tiered())
    return {qMakePair(QString("config"), parseRunLabel(run.spec).spec)};
  const cache::CacheConfig& c = *run.config;
  out.append(qMakePair(QString("backend"), QString::fromStdString(std::string(cache::backendName(c.backend)))));
  for (const auto& o : cache::backendOptions(c.backend))
    out.append(qMakePair(QString::fromStdString(o.name), QString::fromStdString(cache::optionValue(c, o.name))));
  if (!c.keyScales.empty()) out.append(qMakePair(QString("scales"), QString("calibrated")));
  return out;
}

// " (4 beams)" of a beam-search run's label.
QString decodingSuffix(const QString& label) {
  const int at = label.indexOf(" (");
  return at < 0 ? QString() : label.mid(at);
}

}  // namespace

QStringList configNames(const QVector<RunSnapshotPtr>& runs, QString* common) {
  QVector<QVector<QPair<QString, QString>>> all;
  for (const auto& r : runs) all.append(facets(*r));
  // A key is common when every run has it with one value (and there are two runs to compare).
  QMap<QString, QString> shared;
  QStringList sharedOrder;
  if (runs.size() > 1) {
    for (const auto& [k, v] : all.front()) {
      bool same = true;
      for (const auto& f : all) {
        const auto it = std::find_if(f.begin(), f.end(), [&key = k](const auto& p) { return p.first == key; });
        same = same && it != f.end() && it->second == v;
      }
      if (same) shared.insert(k, v), sharedOrder << k;
    }
  }
  QStringList names;
  for (int i = 0; i < all.size(); ++i) {
    QString backend;
    QStringList parts;
    for (const auto& [k, v] : all[i]) {
      if (k == "backend" || k == "config")
        backend = v;
      else if (!shared.contains(k))
        parts << (k == "scales" ? QString("[calibrated]") : k + "=" + v);
    }
    names << backend + (parts.isEmpty() ? QString() : ": " + parts.join(", ")) + decodingSuffix(runs[i]->spec);
  }
  if (common) {
    QStringList said;
    for (const QString& k : sharedOrder)
      if (k != "backend" && k != "config") said << k + "=" + shared[k];
    const QString backend = shared.value("backend", shared.value("config"));
    *common = sharedOrder.isEmpty()
                  ? QString()
                  : (backend.isEmpty() ? QString() : backend + (said.isEmpty() ? "" : ": ")) + said.join(", ");
  }
  return names;
}

QString nothingQuantizedReason(const RunSnapshot& run) {
  QString head = QObject::tr("nothing quantized yet in run #%1").arg(run.runId);
  if (!run.config || run.config->mixed()) return head;
  const cache::CacheConfig& c = *run.config;
  const QString backend = QString::fromStdString(std::string(cache::backendName(c.backend)));
  if (c.backend == cache::Backend::Dynamic)
    return QObject::tr("run #%1: dynamic stores every token unquantized, so there is no error to show").arg(run.runId);
  if (c.tiered())
    return QObject::tr(
               "%1: tiers by age; the error views follow the newest tier (%2: 16 bits, nothing quantized), "
               "and what the older tiers' formats do to a token is not shown yet")
        .arg(head, QString::fromStdString(c.tiers.front().format));
  const QString held =
      QObject::tr("%1 prompt + %2 generated tokens so far").arg(run.promptTokens).arg(run.tokens.size());
  if (c.backend == cache::Backend::Kivi || c.backend == cache::Backend::Quanto || c.backend == cache::Backend::Hqq)
    return QObject::tr("%1: %2 keeps the newest %3 tokens in full precision; %4")
        .arg(head, backend)
        .arg(c.resolvedResidualLength())
        .arg(held);
  if (c.backend == cache::Backend::Vllm && cache::vllmBoundarySkip(c.vllmKv))
    return QObject::tr(
               "%1 (%2; %3): under %4 vLLM keeps the first and last two layers unquantized; the token map is "
               "of the layer selected while a run goes: select one between them, then run")
        .arg(head, backend, held, QString::fromStdString(std::string(cache::vllmKvName(c.vllmKv))));
  return QObject::tr("%1 (%2; %3)").arg(head, backend, held);
}

QStringList specNames(const QStringList& specs, QString* common) {
  QVector<RunSnapshotPtr> runs;
  for (const QString& spec : specs) {
    auto r = std::make_shared<RunSnapshot>();
    r->spec = spec;
    try {
      r->config = cache::parseSpec(parseRunLabel(spec).spec.toStdString());
    } catch (const cache::ConfigError&) {
      // a label (e.g. "dynamic (reference)"): named as it is
    }
    runs << r;
  }
  return configNames(runs, common);
}

std::optional<double> storedBitsPerValue(const RunSnapshot& run) {
  const double ratio = run.cache.total().compressionRatio();
  if (run.dtypeBits <= 0 || !(ratio > 0)) return std::nullopt;
  return run.dtypeBits / ratio;
}

bool brokenRun(const RunSnapshot& run) {
  if (run.cache.overflowTotals().nonFinite > 0) return true;
  if (run.shadow && (!std::isfinite(run.meanKl) || !std::isfinite(run.maxKl))) return true;
  return run.refTokens > 0 && !std::isfinite(run.refPerplexity);
}

RunsModel::RunsModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunsModel::sort(int column, Qt::SortOrder order) {
  if (column < 0 || column >= ColumnCount) return;
  // The figure a column sorts by; nullopt: the run has none ("-").
  auto key = [column, this](const RunSnapshot& r) -> std::optional<double> {
    const auto t = r.cache.total();
    switch (column) {
      case Run:
        return r.runId;
      case KvMiB:
        return static_cast<double>(t.stored());
      case Ratio:
        return t.compressionRatio();
      case BitsPerValue:
        return storedBitsPerValue(r);
      case DecodeTokS:
        return r.decodeTokS;
      case MeanKl:
        return r.shadow ? std::optional<double>(r.meanKl) : std::nullopt;
      case Fits:
        return fits_ ? fits_(r).tokens : std::nullopt;
      case Top1:
        return r.shadow ? std::optional<double>(r.top1Agreement) : std::nullopt;
      case FirstDivergence:
        return r.shadow && r.firstDivergence >= 0 ? std::optional<double>(r.firstDivergence) : std::nullopt;
      case MaxKl:
        return r.shadow ? std::optional<double>(r.maxKl) : std::nullopt;
      case Perplexity:
        return r.refTokens > 0 ? std::optional<double>(r.refPerplexity) : std::nullopt;
      default:
        return std::nullopt;
    }
  };
  Q_EMIT layoutAboutToBeChanged({}, QAbstractItemModel::VerticalSortHint);
  const QModelIndexList before = persistentIndexList();
  QVector<RunSnapshotPtr> was = runs_;
  std::stable_sort(runs_.begin(), runs_.end(), [&](const RunSnapshotPtr& a, const RunSnapshotPtr& b) {
    // Broken runs and runs without the figure go last, whatever the order.
    const bool ba = brokenRun(*a), bb = brokenRun(*b);
    if (ba != bb) return bb;
    if (column == Config) {
      const QString na = names_.value(static_cast<int>(was.indexOf(a))),
                    nb = names_.value(static_cast<int>(was.indexOf(b)));
      return order == Qt::AscendingOrder ? na < nb : nb < na;
    }
    const auto ka = key(*a), kb = key(*b);
    const bool ha = ka && std::isfinite(*ka), hb = kb && std::isfinite(*kb);
    if (ha != hb) return ha;
    if (!ha) return false;
    return order == Qt::AscendingOrder ? *ka < *kb : *kb < *ka;
  });
  QModelIndexList after;
  after.reserve(before.size());
  for (const QModelIndex& i : before) after << index(static_cast<int>(runs_.indexOf(was.value(i.row()))), i.column());
  changePersistentIndexList(before, after);
  names_ = configNames(runs_, &common_);
  Q_EMIT layoutChanged({}, QAbstractItemModel::VerticalSortHint);
}

void RunsModel::setFits(std::function<FitCell(const RunSnapshot&)> fits, const QString& settings) {
  fits_ = std::move(fits);
  refreshFits(settings);
}

void RunsModel::refreshFits(const QString& settings) {
  fitSettings_ = settings;
  if (!runs_.isEmpty()) Q_EMIT dataChanged(index(0, Fits), index(static_cast<int>(runs_.size()) - 1, Fits));
  Q_EMIT headerDataChanged(Qt::Horizontal, Fits, Fits);
}

int RunsModel::rowOf(int runId) const {
  for (int r = 0; r < runs_.size(); ++r)
    if (runs_[r]->runId == runId) return r;
  return -1;
}

void RunsModel::append(const RunSnapshotPtr& run) {
  beginInsertRows({}, static_cast<int>(runs_.size()), static_cast<int>(runs_.size()));
  runs_.append(run);
  endInsertRows();
  rename();
}

void RunsModel::setRuns(const QVector<RunSnapshotPtr>& runs) {
  beginResetModel();
  runs_ = runs;
  endResetModel();
  rename();
}

void RunsModel::rename() {
  // A new run can change every name (what differs between the runs): the whole column is redrawn.
  names_ = configNames(runs_, &common_);
  if (!runs_.isEmpty()) Q_EMIT dataChanged(index(0, Config), index(static_cast<int>(runs_.size()) - 1, Config));
  Q_EMIT headerDataChanged(Qt::Horizontal, Config, Config);
}

int RunsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(runs_.size());
}
int RunsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QString RunsModel::cell(int row, int column, bool fullLabel) const {
  const RunSnapshot& r = *runs_[row];
  const auto t = r.cache.total();
  switch (column) {
    case Run:
      return QString::number(r.runId);
    case Config:
      return fullLabel ? r.spec : names_.value(row);
    case KvMiB:
      return QString::number(t.stored() / 1048576.0, 'f', 3);
    case Ratio:
      return QString::number(t.compressionRatio(), 'f', 2);
    case BitsPerValue: {
      const auto bits = storedBitsPerValue(r);
      return bits ? QString::number(*bits, 'f', 2) : QString("-");
    }
    case DecodeTokS:
      return QString::number(r.decodeTokS, 'f', 1);
    case MeanKl:
      return r.shadow ? figure(r.meanKl, 'g', 3) : "-";
    case Fits: {
      if (!fits_) return "-";
      const FitCell f = fits_(r);
      return f.tokens ? f.text : QString("-");
    }
    case Top1:
      return r.shadow ? QString::number(100.0 * r.top1Agreement, 'f', 1) + "%" : "-";
    case FirstDivergence:
      return r.shadow && r.firstDivergence >= 0 ? QString::number(r.firstDivergence) : "-";
    case MaxKl:
      return r.shadow ? figure(r.maxKl, 'g', 3) : "-";
    case Perplexity:
      return r.refTokens > 0 ? figure(r.refPerplexity, 'f', 3) : QString("-");
    default:
      return {};
  }
}

QVariant RunsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= runs_.size()) return {};
  if (role == Qt::DisplayRole) return cell(index.row(), index.column(), false);
  const RunSnapshot& r = *runs_[index.row()];
  if (role == Qt::ToolTipRole && index.column() == Config)
    return tr("%1\nDouble-click: load this config into the form%2")
        .arg(r.spec, brokenRun(r) ? tr("\nIts cache stored NaN/inf (or its figures are not finite): never ranked best")
                                  : QString());
  if (role == Qt::ToolTipRole && index.column() == Perplexity) {
    const QString scored =
        r.refTokens > 0
            ? tr("on %1 reference tokens (the unquantized cache's greedy answer to the prompt, teacher-forced through "
                 "this config)")
                  .arg(r.refTokens)
            : (r.refPerplexityNote.isEmpty() ? tr("not scored") : r.refPerplexityNote);
    return tr("%1\nOn its own generated tokens: %2 (not comparable between runs)").arg(scored, ownPerplexity(r));
  }
  if (role == Qt::ToolTipRole && index.column() == Fits && fits_) {
    const FitCell f = fits_(r);
    return f.tokens ? tr("%1 tokens fit (%2) under %3 (the Capacity tab)").arg(f.text, f.why, fitSettings_) : f.why;
  }
  if (role == Qt::BackgroundRole && brokenRun(r)) return QColor(255, 215, 215);
  if (role == Qt::TextAlignmentRole && index.column() != Config)
    return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant RunsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal) return {};
  if (section < 0 || section >= ColumnCount) return {};
  // Short headers, so that every figure fits beside the config without scrolling; the tooltips say them in full.
  // Two lines where a header is wider than its figures: the config column keeps the width its names need (at 1366 px
  // one-line headers left it ~40 px).
  static const char* kNames[] = {"run",      "config",      "KV\nMiB", "ratio",     "bits/\nvalue", "tok/s",
                                 "mean\nKL", "fits\n(tok)", "top-1",   "1st\ndiv.", "max\nKL",      "ppl\n(ref)"};
  static const char* const kPerplexityTip =
      "perplexity on the reference tokens: the unquantized cache's greedy answer to the same prompt, teacher-forced "
      "through each run's cache, so that every run is scored on the same tokens";
  static const char* const kBitsTip =
      "bits stored per cached value, scales, residual window and unquantized layers included: the model dtype's bits "
      "÷ the compression ratio (as eval and tune report them)";
  static const char* kTips[] = {
      "the run's number (the overlay's legend and the session use it)",
      nullptr,
      "stored KV bytes (payload, scales/zeros and residual), MiB",
      "compression: the same tokens unquantized ÷ stored",
      kBitsTip,
      "decode tokens per second",
      "mean KL divergence of each step's next-token distribution from the unquantized reference (nats)",
      nullptr,
      "share of steps whose top-1 token is the reference's",
      "first generated step whose token differs from the reference's",
      "largest per-step KL (nats)",
      kPerplexityTip};
  if (role == Qt::DisplayRole) return tr(kNames[section]);
  if (role != Qt::ToolTipRole) return {};
  if (section == Fits)
    return tr("What fits with each run's config: the tokens the engine's cache holds and the requests they make, "
              "under %1 (set on the Capacity tab)")
        .arg(fitSettings_.isEmpty() ? tr("the Capacity tab's settings") : fitSettings_);
  if (section == Config)
    return common_.isEmpty() ? tr("Each run's config") : tr("What tells the runs apart; every run has %1").arg(common_);
  return tr(kTips[section]);
}

QString RunsModel::csv() const {
  auto quoted = [](QString s) { return QString("\"%1\"").arg(s.replace('"', "\"\"")); };
  QString out;
  static const char* kCsvNames[] = {"run",          "config",        "kv_mib", "ratio", "bits_per_value",
                                    "decode_tok_s", "mean_kl",       "fits",   "top1",  "first_divergence",
                                    "max_kl",       "ref_perplexity"};
  for (int c = 0; c < ColumnCount; ++c) out += QString(c ? "," : "") + kCsvNames[c];
  out += "\n";
  for (int r = 0; r < runs_.size(); ++r) {
    for (int c = 0; c < ColumnCount; ++c) out += (c ? "," : "") + quoted(cell(r, c, true));
    out += "\n";
  }
  return out;
}

}  // namespace kvscope::ui
