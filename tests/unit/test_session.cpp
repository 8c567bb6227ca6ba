// The session reader (ui/session.cpp) on files a user may have: our own output round-trips, NaN figures survive,
// and every malformed file is refused with the file, the run/token/layer and the key named.
#include <gtest/gtest.h>

#include <QByteArray>
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <cmath>
#include <string>

#include "cache/config.h"
#include "session.h"

namespace ui = kvscope::ui;

namespace {

ui::Session sample() {
  auto r = std::make_shared<ui::RunSnapshot>();
  r->runId = 3;
  r->spec = "quanto:nbits=4";
  r->shadow = true;
  r->promptTokens = 12;
  for (int i = 0; i < 4; ++i) {
    ui::TokenView t;
    t.id = 100 + i;
    t.text = i == 2 ? QString::fromUtf8("é\n") : " the";
    t.logprob = i == 1 ? std::nanf("") : -0.5f * float(i);
    t.kl = i == 1 ? std::nanf("") : i == 3 ? INFINITY : 0.01f * float(i);
    t.top1Agrees = i != 3;
    t.kvStored = qint64{1000} * (i + 1);
    t.kvUnquantized = qint64{4000} * (i + 1);
    r->tokens.append(t);
  }
  kvscope::cache::LayerMemory lm;
  lm.keys.payload = 4096;
  lm.keys.metadata = 64;
  lm.values.residual = 1 << 20;
  r->cache.memory = {lm, lm};
  r->decodeTokS = 25.25;
  r->maxKl = std::nan("");
  r->meanKl = INFINITY;
  r->firstDivergence = 2;
  r->refPerplexity = std::nan("");  // a cache whose logits were NaN on the reference tokens
  r->refTokens = 40;
  r->stopReason = "eos";
  r->beamTexts = {"a", "b"};
  r->beamScores = {-1.0f, -INFINITY};
  for (int step = 0; step < 2; ++step) {
    ui::BeamStepView b;
    b.step = step;
    b.parents = {0, step};
    b.ids = {7 + step, 9};
    b.tokens = {"x", "y"};
    b.scores = {-0.5f * float(step + 1), -1.0f};
    b.storeRows = {1, 0};
    r->beamSteps << b;
  }
  ui::RunRequest q;
  q.prompt = "Say \"hi\"";
  q.chat = false;
  q.maxNew = 7;
  q.beams = 2;
  q.seed = 18446744073709551557ull;  // beyond a double's whole numbers
  q.topP = 0.5;
  r->request = q;
  r->finished = true;
  r->config = kvscope::cache::parseSpec("quanto:nbits=4");
  return ui::Session{"/models/m.gguf", {r}};
}

std::string error(const QByteArray& bytes) {
  try {
    ui::parseSession(bytes, "s.kvscope.json");
  } catch (const ui::SessionError& e) {
    return e.what();
  }
  return "(accepted)";
}

/// A valid one-run file with `patch` replacing the token object.
QByteArray withToken(const char* token) {
  return QByteArray(R"({"format":"kvscope-session","version":1,"runs":[{"config":"fp8","tokens":[{"id":1},)") + token +
         "]}]}";
}

}  // namespace

TEST(Session, RoundTripKeepsEverythingWrittenIncludingNaN) {
  const ui::Session s = sample();
  const QByteArray json = ui::sessionJson(s);
  const ui::Session back = ui::parseSession(json, "s.kvscope.json");
  ASSERT_EQ(back.runs.size(), 1);
  const auto& r = *back.runs[0];
  EXPECT_EQ(back.modelPath, "/models/m.gguf");
  EXPECT_EQ(r.runId, 3);
  EXPECT_EQ(r.spec, "quanto:nbits=4");
  EXPECT_TRUE(r.shadow);
  ASSERT_EQ(r.tokens.size(), 4);
  EXPECT_EQ(r.tokens[2].text, QString::fromUtf8("é\n"));
  EXPECT_TRUE(std::isnan(r.tokens[1].kl));  // written as null, read back as NaN (not 0, which would read as exact)
  EXPECT_TRUE(std::isnan(r.tokens[1].logprob));
  EXPECT_FLOAT_EQ(r.tokens[3].logprob, -1.5f);
  EXPECT_FALSE(r.tokens[3].top1Agrees);
  EXPECT_EQ(r.tokens[3].kvStored, 4000);
  ASSERT_EQ(r.cache.memory.size(), 2u);
  EXPECT_EQ(r.cache.memory[1].values.residual, 1 << 20);
  EXPECT_TRUE(std::isnan(r.maxKl));
  EXPECT_EQ(r.meanKl, INFINITY);  // inf stays inf: a KL of inf is a finding, not a missing value
  EXPECT_EQ(r.tokens[3].kl, INFINITY);
  EXPECT_EQ(r.beamScores.value(1), -INFINITY);
  ASSERT_EQ(r.beamSteps.size(), 2);  // the Beams view of a reopened run
  EXPECT_EQ(r.beamSteps[1].parents, (QVector<qint64>{0, 1}));
  EXPECT_EQ(r.beamSteps[1].ids, (QVector<qint64>{8, 9}));
  EXPECT_EQ(r.beamSteps[1].tokens, QStringList({"x", "y"}));
  EXPECT_EQ(r.beamSteps[1].storeRows, (QVector<qint64>{1, 0}));
  EXPECT_FLOAT_EQ(r.beamSteps[1].scores.value(0), -1.0f);
  ASSERT_TRUE(r.request.has_value());  // the prompt and the decoding come back
  EXPECT_EQ(r.request->prompt, "Say \"hi\"");
  EXPECT_FALSE(r.request->chat);
  EXPECT_EQ(r.request->maxNew, 7);
  EXPECT_EQ(r.request->beams, 2);
  EXPECT_EQ(r.request->seed, 18446744073709551557ull);
  EXPECT_DOUBLE_EQ(r.request->topP, 0.5);
  EXPECT_EQ(r.request->config, *r.config);
  EXPECT_EQ(r.firstDivergence, 2);
  EXPECT_TRUE(std::isnan(r.refPerplexity));
  EXPECT_EQ(r.refTokens, 40);
  EXPECT_EQ(r.beamTexts, QStringList({"a", "b"}));
  ASSERT_TRUE(r.config.has_value());
  EXPECT_EQ(*r.config, kvscope::cache::parseSpec("quanto:nbits=4"));
  EXPECT_EQ(ui::sessionJson(back), json);
}

TEST(Session, AnOlderFileWithoutConfigsTakesTheConfigFromTheLabel) {
  const auto s = ui::parseSession(R"J({"format":"kvscope-session","version":1,"runs":[
      {"config":"fp8:overflow=saturate (4 beams)","tokens":[]}, {"config":"fp8 [calibrated]","tokens":[]},
      {"config":"/etc/passwd","tokens":[]}]})J",
                                  "old.json");
  ASSERT_EQ(s.runs.size(), 3);
  ASSERT_TRUE(s.runs[0]->config.has_value());
  EXPECT_EQ(*s.runs[0]->config, kvscope::cache::parseSpec("fp8:overflow=saturate"));
  EXPECT_FALSE(s.runs[1]->config.has_value());  // its scales were never in the file
  EXPECT_FALSE(s.runs[2]->config.has_value());  // a session never makes kvscope read another file
  EXPECT_NE(
      error(R"({"format":"kvscope-session","version":1,"runs":[{"config":"x","tokens":[],"cache":"quanto:nbits=3"}]})")
          .find("`cache`: `nbits` for `quanto`"),
      std::string::npos);
  EXPECT_NE(
      error(R"({"format":"kvscope-session","version":1,"runs":[{"config":"x","tokens":[],"cache":"/tmp/c.json"}]})")
          .find("not a path"),
      std::string::npos);
}

TEST(Session, SaveAndLoadThroughAFile) {
  QTemporaryDir dir;
  const QString path = dir.filePath("s.kvscope.json");
  ui::saveSession(sample(), path);
  EXPECT_EQ(ui::loadSession(path).runs.size(), 1);
  EXPECT_THROW(ui::saveSession(sample(), dir.filePath("missing/dir/s.json")), ui::SessionError);
  try {
    ui::loadSession(dir.filePath("absent.json"));
    FAIL();
  } catch (const ui::SessionError& e) {
    EXPECT_NE(std::string(e.what()).find("absent.json"), std::string::npos) << e.what();
  }
}

TEST(Session, MalformedFilesNameTheKeyAndWhere) {
  struct Case {
    QByteArray bytes;
    const char* expected;
  };
  const Case cases[] = {
      {"", "s.kvscope.json: not valid JSON"},
      {"[1,2]", "the top level is not an object"},
      {R"({"format":"other"})", "not a kvscope session file"},
      {R"({"format":"kvscope-session","version":2,"runs":[]})", "session version 2 is not supported"},
      {R"({"format":"kvscope-session","version":"1","runs":[]})", "`version` must be a whole number"},
      {R"({"format":"kvscope-session","version":1})", "`runs` must be an array"},
      {R"({"format":"kvscope-session","version":1,"model":7,"runs":[]})", "`model` must be a string"},
      {R"({"format":"kvscope-session","version":1,"runs":[5]})", "run #0: the run must be an object"},
      {R"({"format":"kvscope-session","version":1,"runs":[{"tokens":[]}]})", "run #0: `config` must be a string"},
      {withToken(R"({"id":1e300})"), "run #0 token #1: `id` must be a whole number in [0, 2147483647] (got 1e+300)"},
      {withToken(R"({"id":-1})"), "token #1: `id` must be a whole number"},
      {withToken(R"({"id":2.5})"), "token #1: `id` must be a whole number"},
      {withToken(R"({"text":3})"), "token #1: `text` must be a string"},
      {withToken(R"({"kl":"x"})"), "token #1: `kl` must be a number, null, \"inf\" or \"-inf\" (got a string)"},
      {withToken(R"({"logprob":1e300})"), "token #1: `logprob` is out of the float range"},
      {withToken(R"({"top1":1})"), "token #1: `top1` must be true or false"},
      {withToken(R"({"kv_stored":9.3e18})"), "token #1: `kv_stored` must be a whole number"},
      {withToken("[]"), "token #1: the token must be an object"},
      {R"({"format":"kvscope-session","version":1,"runs":[{"config":"fp8","tokens":[],"memory":[{"k":{},"v":[]}]}]})",
       "run #0 memory layer 0: `v` must be an object"},
      {R"({"format":"kvscope-session","version":1,"runs":[{"config":"fp8","tokens":[],"memory":[{"k":{"payload":-4},"v":{}}]}]})",
       "run #0 memory layer 0: `payload` must be a whole number in [0, 281474976710656]"},
      {R"({"format":"kvscope-session","version":1,"runs":[{"config":"fp8","tokens":[],"beams":[{"score":true}]}]})",
       "run #0 beam #0: `score` must be a number, null"},
      {R"({"format":"kvscope-session","version":1,"runs":[{"config":"fp8","tokens":[],"beam_steps":[{"ids":[1,2],"parents":[0,5],"tokens":["a","b"],"scores":[0,0],"store_rows":[]}]}]})",
       "run #0 beam step #0: `parents` must hold whole numbers in [0, 1]"},
      {R"({"format":"kvscope-session","version":1,"runs":[{"config":"fp8","tokens":[],"beam_steps":[{"ids":[1,2],"parents":[0],"tokens":["a","b"],"scores":[0,0],"store_rows":[]}]}]})",
       "run #0 beam step #0: `parents`, `tokens` and `scores` must list the 2 beams of `ids`"},
      {R"({"format":"kvscope-session","version":1,"runs":[{"config":"fp8","tokens":[],"beam_steps":[{"ids":[1],"parents":[0],"tokens":["a"],"scores":[0],"store_rows":[]},{"ids":[1,2],"parents":[0,1],"tokens":["a","b"],"scores":[0,0],"store_rows":[]}]}]})",
       "run #0 beam step #1: parent 1 names a beam the step before does not have"},
      {R"({"format":"kvscope-session","version":1,"runs":[{"config":"fp8","tokens":[],"request":{"seed":"-3"}}]})",
       "run #0 request: `seed` must be a whole number written as a string"},
      {R"({"format":"kvscope-session","version":1,"runs":[{"config":"fp8","tokens":[],"request":{"beams":1e9}}]})",
       "run #0 request: `beams` must be a whole number in [0, 1024]"},
      {R"({"format":"kvscope-session","version":1,"runs":[{"config":"fp8","tokens":[],"first_divergence":-2}]})",
       "run #0: `first_divergence` must be a whole number in [-1,"},
  };
  for (const auto& c : cases) {
    const std::string e = error(c.bytes);
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.bytes.toStdString() << "\n  -> " << e;
    EXPECT_EQ(e.rfind("s.kvscope.json: ", 0), 0u) << e;
  }
}

TEST(Session, TooManyLayersIsRefused) {
  QByteArray many = R"({"format":"kvscope-session","version":1,"runs":[{"config":"fp8","tokens":[],"memory":[)";
  for (int i = 0; i < 4097; ++i) many += i ? ",{\"k\":{},\"v\":{}}" : "{\"k\":{},\"v\":{}}";
  many += "]}]}";
  EXPECT_NE(error(many).find("`memory` lists 4097 layers (at most 4096)"), std::string::npos) << error(many);
}
