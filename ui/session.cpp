#include "session.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLocale>
#include <QSaveFile>
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "cache/error_history.h"

namespace kvscope::ui {

namespace {

// A number as JSON, which has neither NaN nor infinity: NaN as null, +-inf as the strings "inf" and "-inf" (a KL of
// inf is a finding, not a missing value). Reader::number() and Reader::floats() read them back.
QJsonValue numberJson(double d) {
  if (std::isnan(d)) return QJsonValue::Null;
  if (std::isinf(d)) return QString(d > 0 ? "inf" : "-inf");
  return d;
}

// A QVector or std::vector of floats, each as numberJson() writes it.
template <typename Floats>
QJsonArray floatsJson(const Floats& v) {
  QJsonArray a;
  for (float f : v) a.append(numberJson(f));
  return a;
}

// What the scales plot and the overflow advice read of a side's latest statistics.
QJsonObject scaleStatsJson(const cache::TensorStats& t) {
  return {{"scales", floatsJson(t.scales)},
          {"amax", floatsJson(t.amaxPerHead)},
          {"format_max", numberJson(t.formatMax)},
          {"overflow_total", double(t.overflowTotal)},
          {"non_finite_total", double(t.nonFiniteTotal)},
          {"recalibrations", double(t.recalibrations)}};
}

QJsonObject memoryJson(const cache::TensorMemory& m) {
  return {{"payload", double(m.payload)},     {"metadata", double(m.metadata)}, {"residual", double(m.residual)},
          {"transient", double(m.transient)}, {"reserved", double(m.reserved)}, {"unquantized", double(m.unquantized)}};
}

// Reading is strict: every key has one type, integers are whole and in range (a double outside int64 is undefined
// behaviour when cast, and bytes summed over layers must not overflow), and an error names the run, the token and
// the key. Numbers that a run may hold as NaN or inf (a log-prob or KL after an FP8 overflow) are written by
// numberJson(): null reads back as NaN there, "inf" and "-inf" as infinities.
constexpr qint64 kMaxBytes = qint64{1} << 48;  // per field: 256 TiB; 4096 layers x 5 fields stay below 2^63
constexpr int kMaxLayers = 4096;
constexpr qint64 kMaxFileBytes = qint64{1} << 30;
constexpr qsizetype kMaxValues = 1 << 20;  // per layer and side: scales per channel of 1024 heads x 1024 dims
// The token x channel map is written up to this many values a side (SmolLM2: 341 tokens). Every finished run rewrites
// the whole autosave on the GUI thread, so a long run's map is left out rather than megabytes per run each time.
constexpr qsizetype kMaxSavedTokenMap = 1 << 16;

class Reader {
 public:
  explicit Reader(const QString& file) : file_(file) {}
  QString where;  ///< "run #2 token #7: " and so on

  [[noreturn]] void fail(const QString& what) const {
    throw SessionError(QString("%1: %2%3").arg(file_, where, what).toStdString());
  }
  QJsonObject object(const QJsonValue& v, const QString& what) const {
    if (!v.isObject()) fail(what + " must be an object");
    return v.toObject();
  }
  QJsonArray array(const QJsonObject& o, const char* key, bool required = false) const {
    const QJsonValue v = o[key];
    if (v.isUndefined() && !required) return {};
    if (!v.isArray()) fail(QString("`%1` must be an array").arg(key));
    return v.toArray();
  }
  QString string(const QJsonObject& o, const char* key, bool required = false) const {
    const QJsonValue v = o[key];
    if (v.isUndefined() && !required) return {};
    if (!v.isString()) fail(QString("`%1` must be a string").arg(key));
    return v.toString();
  }
  bool boolean(const QJsonObject& o, const char* key, bool dflt) const {
    const QJsonValue v = o[key];
    if (v.isUndefined()) return dflt;
    if (!v.isBool()) fail(QString("`%1` must be true or false").arg(key));
    return v.toBool();
  }
  qint64 integer(const QJsonObject& o, const char* key, qint64 lo, qint64 hi, qint64 dflt) const {
    const QJsonValue v = o[key];
    if (v.isUndefined()) return dflt;
    const std::optional<qint64> n = wholeIn(v, lo, hi);
    if (!n) fail(QString("`%1` must be a whole number in [%2, %3] (got %4)").arg(key).arg(lo).arg(hi).arg(shown(v)));
    return *n;
  }
  /// The array `o[key]` (required) of whole numbers in [lo, hi].
  QVector<qint64> integers(const QJsonObject& o, const char* key, qint64 lo, qint64 hi) const {
    QVector<qint64> out;
    for (const auto& v : array(o, key, true)) {
      const std::optional<qint64> n = wholeIn(v, lo, hi);
      if (!n) fail(QString("`%1` must hold whole numbers in [%2, %3]").arg(key).arg(lo).arg(hi));
      out << *n;
    }
    return out;
  }
  /// A number (within +-FLT_MAX when `asFloat`) as numberJson() writes it: null reads as NaN, "inf" and "-inf" as
  /// infinities.
  double number(const QJsonObject& o, const char* key, double dflt, bool asFloat = false) const {
    const QJsonValue v = o[key];
    if (v.isUndefined()) return dflt;
    const std::optional<double> d = numberOf(v);
    if (!d) fail(QString("`%1` must be a number, null, \"inf\" or \"-inf\" (got %2)").arg(key, shown(v)));
    if (asFloat && std::isfinite(*d) && std::abs(*d) > double(std::numeric_limits<float>::max()))
      fail(QString("`%1` is out of the float range (got %2)").arg(key).arg(*d));
    return *d;
  }
  cache::TensorMemory memory(const QJsonObject& o) const {
    cache::TensorMemory m;
    m.payload = integer(o, "payload", 0, kMaxBytes, 0);
    m.metadata = integer(o, "metadata", 0, kMaxBytes, 0);
    m.residual = integer(o, "residual", 0, kMaxBytes, 0);
    m.transient = integer(o, "transient", 0, kMaxBytes, 0);
    m.reserved = integer(o, "reserved", 0, kMaxBytes, 0);
    m.unquantized = integer(o, "unquantized", 0, kMaxBytes, 0);
    return m;
  }
  /// Each layer object of `o[key]` (at most kMaxLayers), with `where` naming run `run` and the layer.
  template <typename F>
  void layers(const QJsonObject& o, const char* key, qsizetype run, F&& each) {
    const QJsonArray a = array(o, key);
    where = QString("run #%1: ").arg(run);
    if (a.size() > kMaxLayers)
      fail(QString("`%1` lists %2 layers (at most %3)").arg(key).arg(a.size()).arg(kMaxLayers));
    for (qsizetype j = 0; j < a.size(); ++j) {
      where = QString("run #%1 %2 layer %3: ").arg(run).arg(key).arg(j);
      each(object(a[j], "the layer"));
    }
    where = QString("run #%1: ").arg(run);
  }
  /// An array of at most `max` numbers (null: NaN).
  QVector<float> floats(const QJsonObject& o, const char* key, qsizetype max) const {
    const QJsonArray a = array(o, key);
    if (a.size() > max) fail(QString("`%1` holds %2 values (at most %3)").arg(key).arg(a.size()).arg(max));
    QVector<float> out;
    for (const auto& v : a) {
      const std::optional<double> d = numberOf(v);
      if (!d) fail(QString("`%1` must hold numbers, null, \"inf\" or \"-inf\" (got %2)").arg(key, shown(v)));
      if (std::isfinite(*d) && std::abs(*d) > double(std::numeric_limits<float>::max()))
        fail(QString("`%1` holds %2, out of the float range").arg(key).arg(*d));
      out << static_cast<float>(*d);
    }
    return out;
  }
  cache::TensorStats scaleStats(const QJsonObject& o) const {
    cache::TensorStats t;
    const auto toStd = [](const QVector<float>& v) { return std::vector<float>(v.begin(), v.end()); };
    t.scales = toStd(floats(o, "scales", kMaxValues));
    if (!t.scales.empty()) t.scaleShape = {static_cast<std::int64_t>(t.scales.size())};
    t.amaxPerHead = toStd(floats(o, "amax", kMaxValues));
    t.formatMax = static_cast<float>(number(o, "format_max", 0.0, true));
    t.overflowTotal = integer(o, "overflow_total", 0, kMaxBytes, 0);
    t.nonFiniteTotal = integer(o, "non_finite_total", 0, kMaxBytes, 0);
    t.recalibrations = integer(o, "recalibrations", 0, kMaxBytes, 0);
    return t;
  }

 private:
  // A whole number in [lo, hi]; nothing for any other value (a double outside int64 must never be cast).
  static std::optional<qint64> wholeIn(const QJsonValue& v, qint64 lo, qint64 hi) {
    const double d = v.toDouble(std::nan(""));
    if (!v.isDouble() || d != std::floor(d) || d < double(lo) || d > double(hi)) return std::nullopt;
    return static_cast<qint64>(d);
  }
  // numberJson()'s inverse; nothing for any other value.
  static std::optional<double> numberOf(const QJsonValue& v) {
    if (v.isNull()) return std::nan("");
    if (v.isDouble()) return v.toDouble();
    if (v == QJsonValue("inf")) return std::numeric_limits<double>::infinity();
    if (v == QJsonValue("-inf")) return -std::numeric_limits<double>::infinity();
    return std::nullopt;
  }
  static QString shown(const QJsonValue& v) {
    switch (v.type()) {
      case QJsonValue::Double:
        return QString::number(v.toDouble(), 'g', QLocale::FloatingPointShortest);
      case QJsonValue::String:
        return "a string";
      case QJsonValue::Bool:
        return "a boolean";
      case QJsonValue::Null:
        return "null";
      case QJsonValue::Array:
        return "an array";
      default:
        return "an object";
    }
  }
  QString file_;
};

}  // namespace

QByteArray sessionJson(const Session& s) {
  QJsonArray runs;
  for (const auto& r : s.runs) {
    QJsonArray tokens, memory;
    for (const auto& t : r->tokens)
      tokens.append(QJsonObject{{"id", double(t.id)},
                                {"text", t.text},
                                {"logprob", numberJson(t.logprob)},
                                {"kl", numberJson(t.kl)},
                                {"top1", t.top1Agrees},
                                {"kv_stored", double(t.kvStored)},
                                {"kv_unquantized", double(t.kvUnquantized)}});
    for (const auto& m : r->cache.memory)
      memory.append(QJsonObject{{"k", memoryJson(m.keys)}, {"v", memoryJson(m.values)}});
    QJsonArray scales, headError;
    for (const auto& st : r->cache.stats)
      scales.append(QJsonObject{{"k", scaleStatsJson(st.keys)}, {"v", scaleStatsJson(st.values)}});
    for (qsizetype l = 0; l < r->headErrorK.size(); ++l)
      headError.append(QJsonObject{{"k", floatsJson(r->headErrorK[l])}, {"v", floatsJson(r->headErrorV.value(l))}});
    QJsonArray beams, beamSteps;
    for (const BeamStepView& b : r->beamSteps) {
      QJsonArray parents, ids, tokens, rows;
      for (qint64 p : b.parents) parents.append(double(p));
      for (qint64 id : b.ids) ids.append(double(id));
      for (const QString& t : b.tokens) tokens.append(t);
      for (qint64 row : b.storeRows) rows.append(double(row));
      beamSteps.append(QJsonObject{{"step", b.step},
                                   {"parents", parents},
                                   {"ids", ids},
                                   {"tokens", tokens},
                                   {"scores", floatsJson(b.scores)},
                                   {"store_rows", rows}});
    }
    for (int i = 0; i < r->beamTexts.size(); ++i)
      beams.append(QJsonObject{{"text", r->beamTexts[i]}, {"score", numberJson(r->beamScores.value(i))}});
    QJsonObject run{{"run", r->runId},
                    {"config", r->spec},
                    {"shadow", r->shadow},
                    {"prompt_tokens", r->promptTokens},
                    {"dtype_bits", r->dtypeBits},
                    {"tokens", tokens},
                    {"memory", memory},
                    {"prefill_tok_s", numberJson(r->prefillTokS)},
                    {"decode_tok_s", numberJson(r->decodeTokS)},
                    {"mean_kl", numberJson(r->meanKl)},
                    {"max_kl", numberJson(r->maxKl)},
                    {"top1_agreement", numberJson(r->top1Agreement)},
                    {"first_divergence", r->firstDivergence},
                    {"ref_perplexity", numberJson(r->refPerplexity)},
                    {"ref_tokens", r->refTokens},
                    {"stop_reason", r->stopReason},
                    {"beams", beams},
                    {"beam_steps", beamSteps},
                    {"scales", scales},
                    {"head_error", headError}};
    // The inspected layer's token x channel error (the map of a reopened run), coarsened to at most
    // kMaxSavedTokenMap values a side, and every token's own mean error.
    if (const auto& te = r->tokenErrors; te && te->heads > 0 && te->channels > 0) {
      const qint64 cells = qint64(te->heads) * te->channels;
      qint64 perRow = te->tokensPerRow;
      int times = 0;
      while (cache::ErrorHistory::rowsFor(te->tokens, perRow) * cells > kMaxSavedTokenMap && perRow < te->tokens)
        perRow *= 2, ++times;
      auto side = [&](const std::vector<float>& v) {
        return floatsJson(v.empty() ? v : cache::ErrorHistory::merged(v, cells, te->rows(), times));
      };
      if (cache::ErrorHistory::rowsFor(te->tokens, perRow) * cells <= kMaxSavedTokenMap && te->tokens <= kMaxValues)
        run["token_errors"] = QJsonObject{{"layer", te->layer},
                                          {"tokens", double(te->tokens)},
                                          {"tokens_per_row", double(perRow)},
                                          {"heads", te->heads},
                                          {"channels", te->channels},
                                          {"k", side(te->keys)},
                                          {"v", side(te->values)},
                                          {"token_mean_k", floatsJson(te->tokenMeanK)},
                                          {"token_mean_v", floatsJson(te->tokenMeanV)}};
    }
    if (const auto& q = r->request)
      run["request"] = QJsonObject{{"prompt", q->prompt},
                                   {"chat", q->chat},
                                   {"max_new", q->maxNew},
                                   {"sample", q->sample},
                                   {"temperature", numberJson(q->temperature)},
                                   {"top_p", numberJson(q->topP)},
                                   {"top_k", q->topK},
                                   {"seed", QString::number(q->seed)},  // a quint64: a string keeps every digit
                                   {"shadow", q->shadow},
                                   {"beams", q->beams},
                                   {"prefill_chunk", q->prefillChunk}};
    // The whole config: its SPEC (which parses back to the same config), or, where offline-calibrated scales make it
    // more than a SPEC holds, kvscope's config file.
    if (r->config) {
      const std::string spec = cache::toSpec(*r->config);
      if (spec.find(" [calibrated]") == std::string::npos)
        run["cache"] = QString::fromStdString(spec);
      else
        run["cache"] = QJsonDocument::fromJson(QByteArray::fromStdString(cache::toKvscopeJson(*r->config))).object();
    }
    runs.append(run);
  }
  const QJsonObject doc{{"format", "kvscope-session"}, {"version", 1}, {"model", s.modelPath}, {"runs", runs}};
  return QJsonDocument(doc).toJson();
}

void saveSession(const Session& s, const QString& path) {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly) || f.write(sessionJson(s)) < 0 || !f.commit())
    throw SessionError(QString("cannot write %1: %2").arg(path, f.errorString()).toStdString());
}

Session loadSession(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly))
    throw SessionError(QString("cannot read %1: %2").arg(path, f.errorString()).toStdString());
  if (f.size() > kMaxFileBytes)
    throw SessionError(
        QString("%1: %2 bytes is larger than a session file can be (1 GiB)").arg(path).arg(f.size()).toStdString());
  const QByteArray bytes = f.readAll();
  if (f.error() != QFileDevice::NoError)
    throw SessionError(QString("cannot read %1: %2").arg(path, f.errorString()).toStdString());
  return parseSession(bytes, path);
}

Session parseSession(const QByteArray& bytes, const QString& name) {
  Reader rd(name);
  QJsonParseError err{};
  const QJsonDocument doc = QJsonDocument::fromJson(bytes, &err);
  if (doc.isNull()) rd.fail("not valid JSON (" + err.errorString() + " at byte " + QString::number(err.offset) + ")");
  if (!doc.isObject()) rd.fail("not a kvscope session file (the top level is not an object)");
  const QJsonObject root = doc.object();
  if (root["format"] != QJsonValue("kvscope-session"))
    rd.fail("not a kvscope session file (no \"format\": \"kvscope-session\")");
  const qint64 version = rd.integer(root, "version", 0, std::numeric_limits<int>::max(), 0);
  if (version != 1) rd.fail(QString("session version %1 is not supported (this kvscope reads version 1)").arg(version));
  Session s;
  s.modelPath = rd.string(root, "model");
  const QJsonArray runs = rd.array(root, "runs", true);
  for (qsizetype i = 0; i < runs.size(); ++i) {
    rd.where = QString("run #%1: ").arg(i);
    const QJsonObject o = rd.object(runs[i], "the run");
    auto r = std::make_shared<RunSnapshot>();
    r->runId = static_cast<int>(rd.integer(o, "run", 0, std::numeric_limits<int>::max(), 0));
    r->spec = rd.string(o, "config", true);
    r->shadow = rd.boolean(o, "shadow", false);
    r->promptTokens = static_cast<int>(rd.integer(o, "prompt_tokens", 0, std::numeric_limits<int>::max(), 0));
    r->dtypeBits = static_cast<int>(rd.integer(o, "dtype_bits", 0, 64, 0));
    const QJsonArray tokens = rd.array(o, "tokens", true);
    r->tokens.reserve(tokens.size());
    for (qsizetype j = 0; j < tokens.size(); ++j) {
      rd.where = QString("run #%1 token #%2: ").arg(i).arg(j);
      const QJsonObject t = rd.object(tokens[j], "the token");
      TokenView tok;
      tok.id = rd.integer(t, "id", 0, std::numeric_limits<int>::max(), 0);
      tok.text = rd.string(t, "text");
      tok.logprob = static_cast<float>(rd.number(t, "logprob", 0.0, true));
      tok.kl = static_cast<float>(rd.number(t, "kl", 0.0, true));
      tok.top1Agrees = rd.boolean(t, "top1", true);
      tok.kvStored = rd.integer(t, "kv_stored", 0, kMaxBytes, 0);  // absent in older sessions: 0
      tok.kvUnquantized = rd.integer(t, "kv_unquantized", 0, kMaxBytes, 0);
      r->tokens.append(tok);
    }
    rd.layers(o, "memory", i, [&](const QJsonObject& m) {
      cache::LayerMemory lm;
      lm.keys = rd.memory(rd.object(m["k"], "`k`"));
      lm.values = rd.memory(rd.object(m["v"], "`v`"));
      r->cache.memory.push_back(lm);
    });
    rd.where = QString("run #%1: ").arg(i);
    r->prefillTokS = rd.number(o, "prefill_tok_s", 0.0);
    r->decodeTokS = rd.number(o, "decode_tok_s", 0.0);
    r->meanKl = rd.number(o, "mean_kl", 0.0);
    r->maxKl = rd.number(o, "max_kl", 0.0);
    r->top1Agreement = rd.number(o, "top1_agreement", 1.0);
    r->firstDivergence = static_cast<int>(rd.integer(o, "first_divergence", -1, std::numeric_limits<int>::max(), -1));
    r->refTokens = static_cast<int>(rd.integer(o, "ref_tokens", 0, std::numeric_limits<int>::max(), 0));
    r->refPerplexity = rd.number(o, "ref_perplexity", std::nan(""));
    r->stopReason = rd.string(o, "stop_reason");
    r->cancelled = r->stopReason == QLatin1String("cancelled");  // the file's word for it
    const QJsonArray beams = rd.array(o, "beams");
    for (qsizetype j = 0; j < beams.size(); ++j) {
      rd.where = QString("run #%1 beam #%2: ").arg(i).arg(j);
      const QJsonObject b = rd.object(beams[j], "the beam");
      r->beamTexts << rd.string(b, "text");
      r->beamScores << static_cast<float>(rd.number(b, "score", 0.0, true));
    }
    const QJsonArray steps = rd.array(o, "beam_steps");
    if (steps.size() > kMaxValues) rd.fail(QString("`beam_steps` lists %1 steps").arg(steps.size()));
    for (qsizetype j = 0; j < steps.size(); ++j) {
      rd.where = QString("run #%1 beam step #%2: ").arg(i).arg(j);
      const QJsonObject b = rd.object(steps[j], "the beam step");
      BeamStepView v;
      v.step = static_cast<int>(rd.integer(b, "step", 0, std::numeric_limits<int>::max(), j));
      v.ids = rd.integers(b, "ids", 0, std::numeric_limits<int>::max());
      const qint64 beamsHere = v.ids.size();
      v.parents = rd.integers(b, "parents", 0, std::max<qint64>(beamsHere - 1, 0));
      v.storeRows = rd.integers(b, "store_rows", 0, std::max<qint64>(beamsHere - 1, 0));
      for (const auto& t : rd.array(b, "tokens", true)) {
        if (!t.isString()) rd.fail("`tokens` must hold strings");
        v.tokens << t.toString();
      }
      v.scores = rd.floats(b, "scores", kMaxValues);
      if (v.parents.size() != beamsHere || v.tokens.size() != beamsHere || v.scores.size() != beamsHere)
        rd.fail(QString("`parents`, `tokens` and `scores` must list the %1 beams of `ids`").arg(beamsHere));
      for (qint64 p : v.parents)  // beamSequence() walks back through the parents
        if (j > 0 && p >= r->beamSteps.back().ids.size())
          rd.fail(QString("parent %1 names a beam the step before does not have").arg(p));
      r->beamSteps << v;
    }
    rd.where = QString("run #%1: ").arg(i);
    rd.layers(o, "scales", i, [&](const QJsonObject& m) {
      cache::LayerStats st;
      st.keys = rd.scaleStats(rd.object(m["k"], "`k`"));
      st.values = rd.scaleStats(rd.object(m["v"], "`v`"));
      r->cache.stats.push_back(st);
    });
    rd.layers(o, "head_error", i, [&](const QJsonObject& m) {
      r->headErrorK << rd.floats(m, "k", kMaxLayers);
      r->headErrorV << rd.floats(m, "v", kMaxLayers);
    });
    if (o.contains("token_errors")) {
      rd.where = QString("run #%1 token_errors: ").arg(i);
      const QJsonObject t = rd.object(o["token_errors"], "`token_errors`");
      auto te = std::make_shared<TokenErrorView>();
      te->runId = r->runId;
      te->layer = static_cast<int>(rd.integer(t, "layer", 0, kMaxLayers, 0));
      te->tokens = rd.integer(t, "tokens", 0, kMaxValues, 0);
      te->heads = static_cast<int>(rd.integer(t, "heads", 0, kMaxValues, 0));
      te->channels = static_cast<int>(rd.integer(t, "channels", 0, kMaxValues, 0));
      te->tokensPerRow = rd.integer(t, "tokens_per_row", 1, kMaxValues, 1);  // absent before the bounded summary
      if ((te->tokensPerRow & (te->tokensPerRow - 1)) != 0)
        rd.fail(QString("`tokens_per_row` must be a power of two (got %1)").arg(te->tokensPerRow));
      const qint64 cells = te->rows() * te->heads * te->channels;
      for (auto [key, side] : {std::pair{"k", &te->keys}, std::pair{"v", &te->values}}) {
        const QVector<float> v = rd.floats(t, key, kMaxValues);
        if (!v.isEmpty() && v.size() != cells)
          rd.fail(QString("`%1` holds %2 values, not rows x heads x channels = %3 (%4 tokens, %5 per row)")
                      .arg(key)
                      .arg(v.size())
                      .arg(cells)
                      .arg(te->tokens)
                      .arg(te->tokensPerRow));
        side->assign(v.begin(), v.end());
      }
      for (auto [key, means] :
           {std::pair{"token_mean_k", &te->tokenMeanK}, std::pair{"token_mean_v", &te->tokenMeanV}}) {
        if (!t.contains(key)) continue;  // a session from before: tokenMean() reads the one-token rows
        const QVector<float> v = rd.floats(t, key, kMaxValues);
        if (!v.isEmpty() && v.size() != te->tokens)
          rd.fail(QString("`%1` holds %2 values, not one per token (%3)").arg(key).arg(v.size()).arg(te->tokens));
        means->assign(v.begin(), v.end());
      }
      r->tokenErrors = te;
    }
    rd.where = QString("run #%1: ").arg(i);
    if (o.contains("cache")) {
      const QJsonValue c = o["cache"];
      if (!c.isString() && !c.isObject()) rd.fail("`cache` must be a SPEC string or a config object");
      const QString spec = c.toString();
      if (c.isString() && (spec.contains('/') || spec.contains(".json")))
        rd.fail("`cache` must be a SPEC, not a path");  // a session never makes kvscope read another file
      try {
        r->config = c.isString() ? cache::parseSpec(spec.toStdString())
                                 : cache::configFromJson(QJsonDocument(c.toObject()).toJson().toStdString(), "`cache`");
      } catch (const cache::ConfigError& e) {
        rd.fail(QString("`cache`: %1").arg(QString::fromStdString(e.what())));
      }
    } else if (const RunLabel label = parseRunLabel(r->spec);
               !label.calibrated && !label.spec.contains('/') && !label.spec.contains(".json")) {
      try {  // a session written before configs were recorded: the label is the SPEC
        r->config = cache::parseSpec(label.spec.toStdString());
      } catch (const cache::ConfigError&) {
      }
    }
    if (o.contains("request")) {
      rd.where = QString("run #%1 request: ").arg(i);
      const QJsonObject q = rd.object(o["request"], "`request`");
      RunRequest req;
      req.prompt = rd.string(q, "prompt");
      req.chat = rd.boolean(q, "chat", true);
      req.maxNew = static_cast<int>(rd.integer(q, "max_new", 0, 1 << 20, req.maxNew));
      req.sample = rd.boolean(q, "sample", false);
      req.temperature = rd.number(q, "temperature", req.temperature);
      req.topP = rd.number(q, "top_p", req.topP);
      req.topK = static_cast<int>(rd.integer(q, "top_k", 0, std::numeric_limits<int>::max(), 0));
      bool ok = true;
      const QString seed = rd.string(q, "seed");
      req.seed = seed.isEmpty() ? 0 : seed.toULongLong(&ok);
      if (!ok) rd.fail(QString("`seed` must be a whole number written as a string (got \"%1\")").arg(seed));
      req.shadow = rd.boolean(q, "shadow", true);
      req.beams = static_cast<int>(rd.integer(q, "beams", 0, 1 << 10, 0));
      req.prefillChunk = static_cast<int>(rd.integer(q, "prefill_chunk", -1, 1 << 30, -1));
      if (r->config) req.config = *r->config;
      r->request = req;
    }
    r->finished = true;
    s.runs.append(r);
  }
  return s;
}

}  // namespace kvscope::ui
