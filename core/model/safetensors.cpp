#include "model/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "util/json.h"

namespace kvscope::model {

int SafetensorsFile::dtypeSize(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), file_(path, 8, "a safetensors file (8-byte header size first)") {
  parse();
}

SafetensorsFile::SafetensorsFile(const std::uint8_t* data, std::size_t size, const std::string& name)
    : path_(name), file_(data, size, name, 8, "a safetensors file (8-byte header size first)") {
  parse();
}

void SafetensorsFile::parse() {
  const std::string& path = path_;
  const std::size_t size = file_.size();
  {
    const auto* base = file_.data();
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];
    if (n > size - 8)
      throw FormatError(fmt::format("{}: header claims {} bytes but only {} follow", path, n, size - 8));
    const char* hb = reinterpret_cast<const char*>(base + 8);
    JsonParse parsed = parseBoundedJson(std::string_view(hb, n));
    if (!parsed.problem.empty()) throw FormatError(fmt::format("{}: header: {}", path, parsed.problem));
    nlohmann::json header = std::move(parsed.value);
    if (!header.is_object()) throw FormatError(fmt::format("{}: header is not a JSON object", path));
    const std::uint8_t* data = base + 8 + n;
    const std::uint64_t dataSize = size - 8 - n;
    for (const auto& [name, info] : header.items()) {
      if (name == "__metadata__") {
        if (!info.is_object()) throw FormatError(fmt::format("{}: __metadata__ is not an object", path));
        for (const auto& [k, v] : info.items()) {
          if (!v.is_string()) throw FormatError(fmt::format("{}: __metadata__[{}] is not a string", path, k));
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets") ||
          !info["dtype"].is_string() || !info["shape"].is_array() || !info["data_offsets"].is_array() ||
          info["data_offsets"].size() != 2)
        throw FormatError(fmt::format("{}: tensor `{}`: needs dtype, shape and two data_offsets", path, name));
      Entry e;
      e.name = name;
      e.dtype = info["dtype"].get<std::string>();
      const int es = dtypeSize(e.dtype);
      if (es == 0) throw FormatError(fmt::format("{}: tensor `{}`: unknown dtype `{}`", path, name, e.dtype));
      std::uint64_t numel = 1;
      for (const auto& d : info["shape"]) {
        if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<std::int64_t>() >= 0))
          throw FormatError(fmt::format("{}: tensor `{}`: shape entries must be non-negative integers", path, name));
        const auto v = d.get<std::uint64_t>();
        if (v != 0 && numel > (std::uint64_t{1} << 62) / v)
          throw FormatError(fmt::format("{}: tensor `{}`: shape overflows", path, name));
        numel *= v;
        e.shape.push_back(static_cast<std::int64_t>(v));
      }
      const auto& off = info["data_offsets"];
      if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        throw FormatError(fmt::format("{}: tensor `{}`: data_offsets must be non-negative integers", path, name));
      const auto b = off[0].get<std::uint64_t>(), en = off[1].get<std::uint64_t>();
      if (b > en || en > dataSize)
        throw FormatError(fmt::format("{}: tensor `{}`: data_offsets [{}, {}) lie outside the {} data bytes", path,
                                      name, b, en, dataSize));
      if (en - b != numel * static_cast<std::uint64_t>(es))
        throw FormatError(
            fmt::format("{}: tensor `{}`: {} bytes stored for {} x {} expected", path, name, en - b, numel, es));
      e.data = data + b;
      e.bytes = en - b;
      entries_.push_back(std::move(e));
    }
    // Tensors sharing bytes mean a corrupted or hostile header (safetensors itself refuses them).
    std::vector<const Entry*> byOffset;
    for (const Entry& e : entries_)
      if (e.bytes > 0) byOffset.push_back(&e);
    std::sort(byOffset.begin(), byOffset.end(), [](const Entry* a, const Entry* c) { return a->data < c->data; });
    for (std::size_t i = 1; i < byOffset.size(); ++i)
      if (byOffset[i - 1]->data + byOffset[i - 1]->bytes > byOffset[i]->data)
        throw FormatError(
            fmt::format("{}: tensors `{}` and `{}` overlap", path, byOffset[i - 1]->name, byOffset[i]->name));
    std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& c) { return a.name < c.name; });
  }
}

SafetensorsFile::~SafetensorsFile() = default;

bool SafetensorsFile::contains(const std::string& name) const {
  const auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                                   [](const Entry& a, const std::string& n) { return a.name < n; });
  return it != entries_.end() && it->name == name;
}

const SafetensorsFile::Entry& SafetensorsFile::at(const std::string& name) const {
  const auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                                   [](const Entry& a, const std::string& n) { return a.name < n; });
  if (it == entries_.end() || it->name != name) throw FormatError(fmt::format("{}: no tensor `{}`", path_, name));
  return *it;
}

std::string safetensorsImage(const std::vector<SafetensorsTensor>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || header.contains(t.name))
      throw FormatError(fmt::format("safetensors: tensor name `{}` is empty, reserved or given twice", t.name));
    const int es = SafetensorsFile::dtypeSize(t.dtype);
    if (es == 0) throw FormatError(fmt::format("safetensors: tensor `{}`: unknown dtype `{}`", t.name, t.dtype));
    std::uint64_t numel = 1;
    for (std::int64_t d : t.shape) {
      if (d < 0) throw FormatError(fmt::format("safetensors: tensor `{}`: negative dimension {}", t.name, d));
      numel *= static_cast<std::uint64_t>(d);
    }
    if (numel * static_cast<std::uint64_t>(es) != t.bytes.size())
      throw FormatError(
          fmt::format("safetensors: tensor `{}`: {} bytes for {} {} values", t.name, t.bytes.size(), numel, t.dtype));
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((std::uint64_t{h.size()} >> (8 * i)) & 0xff);
  out += h;
  for (const auto& t : tensors) out += t.bytes;
  return out;
}

std::map<std::string, std::string> readSafetensorsIndex(std::string_view text, const std::string& where) {
  JsonParse parsed = parseBoundedJson(text);
  if (!parsed.problem.empty()) throw FormatError(fmt::format("{}: {}", where, parsed.problem));
  nlohmann::json idx = std::move(parsed.value);
  if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
    throw FormatError(fmt::format("{}: no weight_map object", where));
  std::map<std::string, std::string> map;
  for (const auto& [name, shard] : idx["weight_map"].items()) {
    if (!shard.is_string())
      throw FormatError(
          fmt::format("{}: weight_map[`{}`] is not a file name (found {})", where, name, shard.type_name()));
    const std::string s = shard.get<std::string>();
    if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos || s.find('\0') != std::string::npos)
      throw FormatError(fmt::format("{}: weight_map[`{}`]: shard `{}` is not a file in the directory", where, name, s));
    map.emplace(name, s);
  }
  if (map.empty()) throw FormatError(fmt::format("{}: weight_map is empty", where));
  return map;
}

}  // namespace kvscope::model
