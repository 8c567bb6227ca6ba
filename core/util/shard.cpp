#include "util/shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include "util/error.h"
#include "util/json.h"

namespace kvscope {

namespace {

constexpr std::string_view kFormat = "kvscope-shard";
constexpr int kVersion = 1;
constexpr int kMaxShards = 1 << 20;
constexpr std::size_t kMaxItems = std::size_t{1} << 24;

Error bad(const std::string& what) {
  return Error(ErrorCode::BadInput, what);
}

std::optional<int> integer(std::string_view s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// A value as a short quote for an error line.
std::string brief(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

struct File {
  std::string origin;
  Shard shard;
  std::string command;
  std::size_t items = 0;
  nlohmann::json run;
  std::vector<std::pair<std::size_t, nlohmann::json>> records;
};

File readFile(const std::string& origin, const std::string& text) {
  File f;
  f.origin = origin;
  std::size_t line = 0, at = 0;
  bool header = false;
  std::vector<bool> seen;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string_view l(text.data() + at, end - at);
    at = end + 1;
    ++line;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j;
    try {
      if (jsonNestingDepth(l) > kMaxJsonDepth) throw bad("nested too deep");
      j = nlohmann::json::parse(l);
    } catch (const std::exception&) {
      if (!header) throw bad(fmt::format("`{}`: not a kvscope shard file (its first line is not JSON)", origin));
      throw bad(fmt::format("`{}` line {}: not JSON (a record cut short?)", origin, line));
    }
    if (!header) {
      if (!j.is_object() || j.value("format", "") != kFormat)
        throw bad(
            fmt::format("`{}`: not a kvscope shard file (no \"format\": \"{}\" header; write one with --shard "
                        "I/N)",
                        origin, kFormat));
      if (j.value("version", 0) != kVersion)
        throw bad(
            fmt::format("`{}`: unsupported shard file version (this kvscope reads version {})", origin, kVersion));
      try {
        f.command = j.at("command").get<std::string>();
        const auto& s = j.at("shard");
        f.shard = Shard::parse(fmt::format("{}/{}", s.at(0).get<int>(), s.at(1).get<int>()));
        f.items = j.at("items").get<std::size_t>();
        f.run = j.at("run");
      } catch (const nlohmann::json::exception&) {
        throw bad(fmt::format("`{}`: its shard header lacks command, shard, items or run", origin));
      } catch (const Error& e) {
        throw bad(fmt::format("`{}`: its shard header: {}", origin, e.what()));
      }
      if (f.items < 1 || f.items > kMaxItems)
        throw bad(fmt::format("`{}`: its shard header's item count {} is out of range", origin, f.items));
      seen.assign(f.items, false);
      header = true;
      continue;
    }
    const auto it = j.is_object() ? j.find("item") : j.end();
    if (it == j.end() || !it->is_number_unsigned())
      throw bad(fmt::format("`{}` line {}: a record without its \"item\" number", origin, line));
    const auto item = it->get<std::size_t>();
    if (item >= f.items)
      throw bad(fmt::format("`{}` line {}: item {} past the run's {} items", origin, line, item, f.items));
    if (!f.shard.owns(item))
      throw bad(fmt::format("`{}` line {}: item {} belongs to shard {}/{}, not to this file's {}", origin, line, item,
                            item % static_cast<std::size_t>(f.shard.count) + 1, f.shard.count, f.shard.name()));
    if (seen[item]) throw bad(fmt::format("`{}` line {}: item {} a second time", origin, line, item));
    seen[item] = true;
    j.erase("item");
    f.records.emplace_back(item, std::move(j));
  }
  if (!header) throw bad(fmt::format("`{}`: empty, not a kvscope shard file", origin));
  std::size_t owned = 0;
  for (std::size_t k = 0; k < f.items; ++k) owned += f.shard.owns(k);
  if (f.records.size() != owned)
    throw bad(fmt::format("`{}` (shard {}) holds {} of its {} records: that shard did not finish; run it again", origin,
                          f.shard.name(), f.records.size(), owned));
  return f;
}

// The first setting in which two runs differ, as "its \"text\" is X, not Y".
std::string firstDifference(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_object() && b.is_object()) {
    std::map<std::string, int> keys;
    for (const auto& [k, v] : a.items()) keys[k] |= 1;
    for (const auto& [k, v] : b.items()) keys[k] |= 2;
    for (const auto& [k, in] : keys) {
      if (in != 3) return fmt::format("\"{}\" is only in {}", k, in == 1 ? "this one" : "the other");
      if (a[k] != b[k]) return fmt::format("its \"{}\" is {}, not {}", k, brief(a[k]), brief(b[k]));
    }
  }
  return fmt::format("its settings are {}, not {}", brief(a), brief(b));
}

}  // namespace

Shard Shard::parse(std::string_view text) {
  const auto slash = text.find('/');
  const auto i = slash == std::string_view::npos ? std::nullopt : integer(text.substr(0, slash));
  const auto n = slash == std::string_view::npos ? std::nullopt : integer(text.substr(slash + 1));
  if (!i || !n || *n < 1 || *n > kMaxShards || *i < 1 || *i > *n)
    throw bad(fmt::format("--shard `{}`: expected I/N with 1 <= I <= N (e.g. --shard 2/3: the second of three)", text));
  return Shard{*i, *n};
}

std::string Shard::name() const {
  return fmt::format("{}/{}", index, count);
}

void Shard::check(std::size_t shared, std::string_view what) const {
  if (static_cast<std::size_t>(count) > shared)
    throw bad(
        fmt::format("--shard {}: {} shards for {} {}: use at most {} shards", name(), count, shared, what, shared));
}

std::string shardHeader(std::string_view command, const Shard& shard, std::size_t items, const nlohmann::json& run) {
  return nlohmann::json{{"format", kFormat},
                        {"version", kVersion},
                        {"command", std::string(command)},
                        {"shard", {shard.index, shard.count}},
                        {"items", items},
                        {"run", run}}
      .dump();
}

std::string shardRecord(std::size_t item, nlohmann::json record) {
  record["item"] = item;
  return record.dump();
}

ShardSet mergeShards(const std::vector<std::pair<std::string, std::string>>& files) {
  if (files.empty()) throw bad("merge needs the shard files of one run");
  std::vector<File> shards;
  for (const auto& [origin, text] : files) shards.push_back(readFile(origin, text));
  const File& first = shards.front();
  std::map<int, const File*> byIndex;
  for (const File& f : shards) {
    if (f.command != first.command)
      throw bad(fmt::format("`{}` is a shard of `{}`, `{}` of `{}`: not one run", f.origin, f.command, first.origin,
                            first.command));
    if (f.shard.count != first.shard.count)
      throw bad(fmt::format("`{}` is shard {}, `{}` shard {}: not one split of a run", f.origin, f.shard.name(),
                            first.origin, first.shard.name()));
    if (f.items != first.items || f.run != first.run)
      throw bad(fmt::format("`{}` is not a shard of the same run as `{}`: {}", f.origin, first.origin,
                            f.items != first.items ? fmt::format("it has {} items, not {}", f.items, first.items)
                                                   : firstDifference(f.run, first.run)));
    if (const auto [it, fresh] = byIndex.emplace(f.shard.index, &f); !fresh)
      throw bad(fmt::format("`{}` and `{}` are both shard {}", it->second->origin, f.origin, f.shard.name()));
  }
  for (int i = 1; i <= first.shard.count; ++i)
    if (!byIndex.count(i)) {
      std::string given;
      for (const auto& [k, f] : byIndex) given += (given.empty() ? "" : ", ") + f->shard.name();
      throw bad(fmt::format("shard {}/{} is missing (given: {})", i, first.shard.count, given));
    }
  ShardSet set{first.command, first.run, first.shard.count, std::vector<nlohmann::json>(first.items)};
  for (File& f : shards)
    for (auto& [item, rec] : f.records) set.records[item] = std::move(rec);
  return set;
}

}  // namespace kvscope
