// Sharded runs (util/shard.h): the I/N parse, the round-robin split, shard files written and merged back, and each
// way a set of files can fail to be the N finished shards of one run, with its one line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util/error.h"
#include "util/shard.h"

using kvscope::Shard;
using nlohmann::json;

namespace {

// The shard files of a run of `items` items over `n` shards, each record {"value": item * 10}.
std::vector<std::pair<std::string, std::string>> files(std::size_t items, int n, const json& run = {{"text", "a"}}) {
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 1; i <= n; ++i) {
    const Shard s{i, n};
    std::string text = kvscope::shardHeader("eval", s, items, run) + "\n";
    for (std::size_t k = 0; k < items; ++k)
      if (s.owns(k)) text += kvscope::shardRecord(k, {{"value", k * 10}}) + "\n";
    out.emplace_back("s" + std::to_string(i) + ".jsonl", text);
  }
  return out;
}

std::string mergeError(const std::vector<std::pair<std::string, std::string>>& f) {
  try {
    kvscope::mergeShards(f);
  } catch (const kvscope::Error& e) {
    EXPECT_EQ(e.code(), kvscope::ErrorCode::BadInput);
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return what;
  }
  return "(merged)";
}

}  // namespace

TEST(Shard, ParsesIOfN) {
  EXPECT_EQ(Shard::parse("2/3").index, 2);
  EXPECT_EQ(Shard::parse("2/3").count, 3);
  EXPECT_EQ(Shard::parse("1/1").name(), "1/1");
  for (const char* bad : {"0/3", "4/3", "3", "a/b", "1/0", "-1/3", "1/3x", "", "/", "1/-2", "2 /3"}) {
    try {
      Shard::parse(bad);
      ADD_FAILURE() << bad;
    } catch (const kvscope::Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected I/N with 1 <= I <= N"), std::string::npos) << e.what();
    }
  }
}

TEST(Shard, SplitsEveryItemToExactlyOneShard) {
  for (int n : {1, 2, 3, 7})
    for (std::size_t k = 0; k < 50; ++k) {
      int owners = 0;
      for (int i = 1; i <= n; ++i) owners += Shard{i, n}.owns(k);
      EXPECT_EQ(owners, 1) << k << " of " << n;
    }
  EXPECT_TRUE(Shard({1, 3}).owns(0));  // item 0, the unquantized run, is shard 1's
  EXPECT_NO_THROW(Shard({3, 3}).check(3, "configs"));
  EXPECT_THROW(Shard({1, 4}).check(3, "configs"), kvscope::Error);
}

TEST(Shard, MergesInItemOrderWhateverTheFileOrder) {
  auto f = files(8, 3);
  std::swap(f[0], f[2]);
  const kvscope::ShardSet set = kvscope::mergeShards(f);
  EXPECT_EQ(set.command, "eval");
  EXPECT_EQ(set.count, 3);
  EXPECT_EQ(set.run, (json{{"text", "a"}}));
  ASSERT_EQ(set.records.size(), 8u);
  for (std::size_t k = 0; k < 8; ++k) EXPECT_EQ(set.records[k], (json{{"value", k * 10}})) << k;
  EXPECT_EQ(kvscope::mergeShards(files(3, 1)).records.size(), 3u);
}

TEST(Shard, RefusesWhatIsNotTheShardsOfOneFinishedRun) {
  EXPECT_NE(mergeError({}).find("needs the shard files"), std::string::npos);
  EXPECT_NE(mergeError({{"x", ""}}).find("`x`: empty"), std::string::npos);
  EXPECT_NE(mergeError({{"x", "hello\n"}}).find("`x`: not a kvscope shard file"), std::string::npos);
  EXPECT_NE(mergeError({{"x", "{\"format\": \"kvscope-tune-scan\"}\n"}}).find("not a kvscope shard file"),
            std::string::npos);

  auto f = files(8, 3);
  EXPECT_NE(mergeError({f[0], f[1]}).find("shard 3/3 is missing (given: 1/3, 2/3)"), std::string::npos);
  EXPECT_NE(mergeError({f[0], f[1], f[1]}).find("are both shard 2/3"), std::string::npos);
  auto other = files(8, 3, {{"text", "b"}});
  EXPECT_NE(mergeError({f[0], f[1], other[2]})
                .find("not a shard of the same run as `s1.jsonl`: its \"text\" is \"b\", "
                      "not \"a\""),
            std::string::npos);
  EXPECT_NE(mergeError({f[0], f[1], files(9, 3)[2]}).find("it has 9 items, not 8"), std::string::npos);
  EXPECT_NE(mergeError({f[0], f[1], files(8, 4)[2]}).find("not one split of a run"), std::string::npos);

  // A shard cut short (a crash after its second record), a record of another shard, a record twice, a broken line.
  auto cut = f;
  cut[1].second = cut[1].second.substr(0, cut[1].second.rfind('\n', cut[1].second.size() - 2) + 1);
  EXPECT_NE(mergeError(cut).find("`s2.jsonl` (shard 2/3) holds 2 of its 3 records: that shard did not finish"),
            std::string::npos);
  auto stray = f;
  stray[1].second += kvscope::shardRecord(2, {{"value", 0}}) + "\n";
  EXPECT_NE(mergeError(stray).find("item 2 belongs to shard 3/3, not to this file's 2/3"), std::string::npos);
  auto twice = f;
  twice[1].second += kvscope::shardRecord(1, {{"value", 0}}) + "\n";
  EXPECT_NE(mergeError(twice).find("item 1 a second time"), std::string::npos);
  auto broken = f;
  broken[2].second += "{\"item\": 5, \"val\n";
  EXPECT_NE(mergeError(broken).find("`s3.jsonl` line 4: not JSON"), std::string::npos);
  auto far = f;
  far[0].second += kvscope::shardRecord(9, {{"value", 0}}) + "\n";
  EXPECT_NE(mergeError(far).find("item 9 past the run's 8 items"), std::string::npos);
}
