#include "session.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSaveFile>

namespace kvscope::ui {

namespace {

QJsonObject memoryJson(const cache::TensorMemory& m) {
  return {{"payload", double(m.payload)},     {"metadata", double(m.metadata)},   {"residual", double(m.residual)},
          {"transient", double(m.transient)}, {"reserved", double(m.reserved)}, {"unquantized", double(m.unquantized)}};
}

cache::TensorMemory memoryFrom(const QJsonObject& o) {
  cache::TensorMemory m;
  m.payload = static_cast<std::int64_t>(o["payload"].toDouble());
  m.metadata = static_cast<std::int64_t>(o["metadata"].toDouble());
  m.residual = static_cast<std::int64_t>(o["residual"].toDouble());
  m.transient = static_cast<std::int64_t>(o["transient"].toDouble());
  m.reserved = static_cast<std::int64_t>(o["reserved"].toDouble());
  m.unquantized = static_cast<std::int64_t>(o["unquantized"].toDouble());
  return m;
}

}  // namespace

void saveSession(const Session& s, const QString& path) {
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
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly) || f.write(QJsonDocument(doc).toJson()) < 0 || !f.commit())
    throw SessionError(QString("cannot write %1: %2").arg(path, f.errorString()).toStdString());
}

Session loadSession(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) throw SessionError(QString("cannot read %1: %2").arg(path, f.errorString()).toStdString());
  QJsonParseError err{};
  const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &err);
  auto fail = [&](const QString& what) { throw SessionError(QString("%1: %2").arg(path, what).toStdString()); };
  if (doc.isNull()) fail("not valid JSON (" + err.errorString() + ")");
  const QJsonObject root = doc.object();
  if (root["format"].toString() != "kvscope-session") fail("not a kvscope session file (no \"format\": \"kvscope-session\")");
  if (root["version"].toInt() != 1) fail(QString("session version %1 is not supported").arg(root["version"].toInt()));
  if (!root["runs"].isArray()) fail("`runs` must be an array");
  Session s;
  s.modelPath = root["model"].toString();
  int i = 0;
  for (const auto& v : root["runs"].toArray()) {
    const QJsonObject o = v.toObject();
    if (!o["config"].isString() || !o["tokens"].isArray())
      fail(QString("run #%1 needs a `config` string and a `tokens` array").arg(i));
    auto r = std::make_shared<RunSnapshot>();
    r->runId = o["run"].toInt();
    r->spec = o["config"].toString();
    r->shadow = o["shadow"].toBool();
    r->promptTokens = o["prompt_tokens"].toInt();
    for (const auto& tv : o["tokens"].toArray()) {
      const QJsonObject t = tv.toObject();
      TokenView tok;
      tok.id = static_cast<qint64>(t["id"].toDouble());
      tok.text = t["text"].toString();
      tok.logprob = static_cast<float>(t["logprob"].toDouble());
      tok.kl = static_cast<float>(t["kl"].toDouble());
      tok.top1Agrees = t["top1"].toBool(true);
      tok.kvStored = static_cast<qint64>(t["kv_stored"].toDouble());  // absent in older sessions: 0
      tok.kvUnquantized = static_cast<qint64>(t["kv_unquantized"].toDouble());
      r->tokens.append(tok);
    }
    for (const auto& mv : o["memory"].toArray()) {
      cache::LayerMemory lm;
      lm.keys = memoryFrom(mv.toObject()["k"].toObject());
      lm.values = memoryFrom(mv.toObject()["v"].toObject());
      r->cache.memory.push_back(lm);
    }
    r->prefillTokS = o["prefill_tok_s"].toDouble();
    r->decodeTokS = o["decode_tok_s"].toDouble();
    r->meanKl = o["mean_kl"].toDouble();
    r->maxKl = o["max_kl"].toDouble();
    r->top1Agreement = o["top1_agreement"].toDouble(1.0);
    r->firstDivergence = o["first_divergence"].toInt(-1);
    r->stopReason = o["stop_reason"].toString();
    for (const auto& bv : o["beams"].toArray()) {
      r->beamTexts << bv.toObject()["text"].toString();
      r->beamScores << static_cast<float>(bv.toObject()["score"].toDouble());
    }
    r->finished = true;
    s.runs.append(r);
    ++i;
  }
  return s;
}

}  // namespace kvscope::ui
