#include "session.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLocale>
#include <QSaveFile>
#include <cmath>
#include <limits>

namespace kvscope::ui {

namespace {

QJsonObject memoryJson(const cache::TensorMemory& m) {
  return {{"payload", double(m.payload)},     {"metadata", double(m.metadata)},   {"residual", double(m.residual)},
          {"transient", double(m.transient)}, {"reserved", double(m.reserved)}, {"unquantized", double(m.unquantized)}};
}

// Reading is strict: every key has one type, integers are whole and in range (a double outside int64 is undefined
// behaviour when cast, and bytes summed over layers must not overflow), and an error names the run, the token and
// the key. Numbers that a run may hold as NaN (a log-prob or KL after an FP8 overflow) are written as null by
// QJsonDocument, so null reads back as NaN there.
constexpr qint64 kMaxBytes = qint64{1} << 48;  // per field: 256 TiB; 4096 layers x 5 fields stay below 2^63
constexpr int kMaxLayers = 4096;
constexpr qint64 kMaxFileBytes = qint64{1} << 30;

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
    const double d = v.toDouble(std::nan(""));
    if (!v.isDouble() || d != std::floor(d) || d < double(lo) || d > double(hi))
      fail(QString("`%1` must be a whole number in [%2, %3] (got %4)").arg(key).arg(lo).arg(hi).arg(shown(v)));
    return static_cast<qint64>(d);
  }
  /// A number within +-FLT_MAX when `asFloat`; null reads as NaN.
  double number(const QJsonObject& o, const char* key, double dflt, bool asFloat = false) const {
    const QJsonValue v = o[key];
    if (v.isUndefined()) return dflt;
    if (v.isNull()) return std::nan("");
    if (!v.isDouble()) fail(QString("`%1` must be a number or null (got %2)").arg(key, shown(v)));
    const double d = v.toDouble();
    if (asFloat && std::abs(d) > double(std::numeric_limits<float>::max()))
      fail(QString("`%1` is out of the float range (got %2)").arg(key).arg(d));
    return d;
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

 private:
  static QString shown(const QJsonValue& v) {
    switch (v.type()) {
      case QJsonValue::Double: return QString::number(v.toDouble(), 'g', QLocale::FloatingPointShortest);
      case QJsonValue::String: return "a string";
      case QJsonValue::Bool: return "a boolean";
      case QJsonValue::Null: return "null";
      case QJsonValue::Array: return "an array";
      default: return "an object";
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
      tokens.append(QJsonObject{{"id", double(t.id)}, {"text", t.text}, {"logprob", t.logprob}, {"kl", t.kl},
                                {"top1", t.top1Agrees}, {"kv_stored", double(t.kvStored)},
                                {"kv_unquantized", double(t.kvUnquantized)}});
    for (const auto& m : r->cache.memory) memory.append(QJsonObject{{"k", memoryJson(m.keys)}, {"v", memoryJson(m.values)}});
    QJsonArray beams;
    for (int i = 0; i < r->beamTexts.size(); ++i)
      beams.append(QJsonObject{{"text", r->beamTexts[i]}, {"score", r->beamScores.value(i)}});
    runs.append(QJsonObject{{"run", r->runId},
                            {"config", r->spec},
                            {"shadow", r->shadow},
                            {"prompt_tokens", r->promptTokens},
                            {"tokens", tokens},
                            {"memory", memory},
                            {"prefill_tok_s", r->prefillTokS},
                            {"decode_tok_s", r->decodeTokS},
                            {"mean_kl", r->meanKl},
                            {"max_kl", r->maxKl},
                            {"top1_agreement", r->top1Agreement},
                            {"first_divergence", r->firstDivergence},
                            {"stop_reason", r->stopReason},
                            {"beams", beams}});
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
  if (!f.open(QIODevice::ReadOnly)) throw SessionError(QString("cannot read %1: %2").arg(path, f.errorString()).toStdString());
  if (f.size() > kMaxFileBytes)
    throw SessionError(QString("%1: %2 bytes is larger than a session file can be (1 GiB)").arg(path).arg(f.size()).toStdString());
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
    const QJsonArray memory = rd.array(o, "memory");
    if (memory.size() > kMaxLayers) {
      rd.where = QString("run #%1: ").arg(i);
      rd.fail(QString("`memory` lists %1 layers (at most %2)").arg(memory.size()).arg(kMaxLayers));
    }
    for (qsizetype j = 0; j < memory.size(); ++j) {
      rd.where = QString("run #%1 memory layer %2: ").arg(i).arg(j);
      const QJsonObject m = rd.object(memory[j], "the layer");
      cache::LayerMemory lm;
      lm.keys = rd.memory(rd.object(m["k"], "`k`"));
      lm.values = rd.memory(rd.object(m["v"], "`v`"));
      r->cache.memory.push_back(lm);
    }
    rd.where = QString("run #%1: ").arg(i);
    r->prefillTokS = rd.number(o, "prefill_tok_s", 0.0);
    r->decodeTokS = rd.number(o, "decode_tok_s", 0.0);
    r->meanKl = rd.number(o, "mean_kl", 0.0);
    r->maxKl = rd.number(o, "max_kl", 0.0);
    r->top1Agreement = rd.number(o, "top1_agreement", 1.0);
    r->firstDivergence = static_cast<int>(rd.integer(o, "first_divergence", -1, std::numeric_limits<int>::max(), -1));
    r->stopReason = rd.string(o, "stop_reason");
    const QJsonArray beams = rd.array(o, "beams");
    for (qsizetype j = 0; j < beams.size(); ++j) {
      rd.where = QString("run #%1 beam #%2: ").arg(i).arg(j);
      const QJsonObject b = rd.object(beams[j], "the beam");
      r->beamTexts << rd.string(b, "text");
      r->beamScores << static_cast<float>(rd.number(b, "score", 0.0, true));
    }
    r->finished = true;
    s.runs.append(r);
  }
  return s;
}

}  // namespace kvscope::ui
