#include "model/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace kvscope::model {

namespace {

constexpr std::uint64_t kMaxDims = 4;                // GGML_MAX_DIMS
constexpr std::uint64_t kMaxStringBytes = 1u << 30;  // a key or value string longer than this is a lie

// Reads the header through bounds-checked primitives; every failure names what was being read.
class Cursor {
 public:
  Cursor(const std::uint8_t* base, std::uint64_t size, const std::string& path) : p_(base), size_(size), path_(path) {}
  std::uint64_t pos() const { return pos_; }

  void need(std::uint64_t n, const std::string& what) const {
    if (n > size_ - pos_)
      throw FormatError(fmt::format("{}: truncated while reading {} (needs {} bytes at offset {}, file has {})", path_,
                                    what, n, pos_, size_));
  }
  template <class T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string readString(const std::string& what) {
    const auto n = read<std::uint64_t>(what + " (length)");
    if (n > kMaxStringBytes) throw FormatError(fmt::format("{}: {} claims a {}-byte string", path_, what, n));
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const std::uint8_t* p_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  const std::string& path_;
};

enum : std::uint32_t {
  kU8 = 0,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kF32,
  kBool,
  kString,
  kArray,
  kU64,
  kI64,
  kF64,
};

std::uint64_t scalarSize(std::uint32_t t) {
  switch (t) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
      return 8;
    default:
      return 0;
  }
}

// One scalar of type t as int64/uint64/double/bool.
GgufFile::Value readScalar(Cursor& c, std::uint32_t t, const std::string& what) {
  switch (t) {
    case kU8:
      return static_cast<std::int64_t>(c.read<std::uint8_t>(what));
    case kI8:
      return static_cast<std::int64_t>(c.read<std::int8_t>(what));
    case kU16:
      return static_cast<std::int64_t>(c.read<std::uint16_t>(what));
    case kI16:
      return static_cast<std::int64_t>(c.read<std::int16_t>(what));
    case kU32:
      return static_cast<std::int64_t>(c.read<std::uint32_t>(what));
    case kI32:
      return static_cast<std::int64_t>(c.read<std::int32_t>(what));
    case kU64:
      return c.read<std::uint64_t>(what);
    case kI64:
      return c.read<std::int64_t>(what);
    case kF32:
      return static_cast<double>(c.read<float>(what));
    case kF64:
      return c.read<double>(what);
    case kBool: {
      const auto b = c.read<std::uint8_t>(what);
      return b != 0;
    }
    case kString:
      return c.readString(what);
    default:
      throw FormatError(fmt::format("{}: unknown value type {}", what, t));
  }
}

GgufFile::Value readValue(Cursor& c, std::uint32_t t, const std::string& what, std::uint64_t fileSize) {
  if (t != kArray) return readScalar(c, t, what);
  const auto et = c.read<std::uint32_t>(what + " (array element type)");
  const auto n = c.read<std::uint64_t>(what + " (array length)");
  // Each element takes at least one byte (strings at least 8): a count beyond the file is a lie.
  const std::uint64_t minBytes = et == kString ? 8 : std::max<std::uint64_t>(scalarSize(et), 1);
  if (et != kString && scalarSize(et) == 0)
    throw FormatError(fmt::format("{}: array of unsupported element type {}", what, et));
  if (n > fileSize / minBytes) throw FormatError(fmt::format("{}: array claims {} elements", what, n));
  if (et == kString) {
    std::vector<std::string> v;
    v.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i) v.push_back(c.readString(what));
    return v;
  }
  if (et == kBool) {
    std::vector<bool> v(n);
    for (std::uint64_t i = 0; i < n; ++i) v[i] = c.read<std::uint8_t>(what) != 0;
    return v;
  }
  if (et == kF32 || et == kF64) {
    std::vector<double> v(n);
    for (std::uint64_t i = 0; i < n; ++i) v[i] = et == kF32 ? c.read<float>(what) : c.read<double>(what);
    return v;
  }
  std::vector<std::int64_t> v(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto s = readScalar(c, et, what);
    v[i] = std::holds_alternative<std::int64_t>(s) ? std::get<std::int64_t>(s)
                                                   : static_cast<std::int64_t>(std::get<std::uint64_t>(s));
  }
  return v;
}

}  // namespace

std::int64_t GgufFile::Tensor::numel() const {
  std::int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

std::uint64_t GgufFile::tensorBytes(std::uint32_t type, std::int64_t numel, const std::string& what) {
  const kernels::GgmlTypeInfo* t = kernels::ggmlTypeInfo(type);
  if (!t) throw FormatError(fmt::format("{}: unknown tensor type {}", what, type));
  if (numel % t->blockValues != 0)
    throw FormatError(
        fmt::format("{}: {} elements is not a whole number of {} blocks of {}", what, numel, t->name, t->blockValues));
  return static_cast<std::uint64_t>(numel / t->blockValues) * t->blockBytes;
}

GgufFile::GgufFile(const std::string& path) : path_(path), file_(path, 24, "a GGUF file") {
  parse();
}

GgufFile::GgufFile(const std::uint8_t* data, std::size_t size, const std::string& name)
    : path_(name), file_(data, size, name, 24, "a GGUF file") {
  parse();
}

void GgufFile::parse() {
  const std::string& path = path_;
  const std::size_t size = file_.size();
  {
    const auto* base = file_.data();
    Cursor c(base, size, path_);
    const auto magic = c.read<std::uint32_t>("magic");
    if (magic != 0x46554747u)  // "GGUF" little-endian
      throw FormatError(fmt::format("{}: not a GGUF file (magic {:08x})", path, magic));
    version_ = c.read<std::uint32_t>("version");
    if (version_ != 2 && version_ != 3)
      throw FormatError(fmt::format("{}: GGUF version {} is not supported (2 or 3)", path, version_));
    const auto nTensors = c.read<std::uint64_t>("tensor count");
    const auto nKv = c.read<std::uint64_t>("metadata count");
    if (nTensors > size / 24 || nKv > size / 12)
      throw FormatError(
          fmt::format("{}: header claims {} tensors and {} metadata entries, more than {} bytes can "
                      "hold (truncated or corrupted)",
                      path, nTensors, nKv, size));
    for (std::uint64_t i = 0; i < nKv; ++i) {
      const std::string key = c.readString(fmt::format("metadata key #{}", i));
      const auto type = c.read<std::uint32_t>(fmt::format("type of `{}`", key));
      const std::string what = fmt::format("{}: metadata `{}`", path, key);
      if (metadata_.count(key)) throw FormatError(fmt::format("{} appears twice", what));
      metadata_.emplace(key, readValue(c, type, what, size));
    }
    if (const auto a = getInt("general.alignment")) {
      if (*a <= 0 || *a > (1 << 20) || (*a & (*a - 1)) != 0)
        throw FormatError(fmt::format("{}: general.alignment {} is not a power of two", path, *a));
      alignment_ = static_cast<std::uint64_t>(*a);
    }
    tensors_.reserve(nTensors);
    for (std::uint64_t i = 0; i < nTensors; ++i) {
      Tensor t;
      t.name = c.readString(fmt::format("tensor #{} name", i));
      const std::string what = fmt::format("{}: tensor `{}`", path, t.name);
      const auto nd = c.read<std::uint32_t>(what + " dims");
      if (nd == 0 || nd > kMaxDims) throw FormatError(fmt::format("{}: {} dimensions (1 to 4)", what, nd));
      std::uint64_t numel = 1;
      for (std::uint32_t d = 0; d < nd; ++d) {
        const auto v = c.read<std::uint64_t>(what + " dims");
        if (v == 0 || v > (std::uint64_t{1} << 40) || numel > (std::uint64_t{1} << 50) / v)
          throw FormatError(fmt::format("{}: dimension {} = {} is impossible", what, d, v));
        numel *= v;
        t.dims.push_back(static_cast<std::int64_t>(v));
      }
      t.type = c.read<std::uint32_t>(what + " type");
      t.offset = c.read<std::uint64_t>(what + " offset");
      t.bytes = tensorBytes(t.type, static_cast<std::int64_t>(numel), what);
      if (index_.count(t.name)) throw FormatError(fmt::format("{} appears twice", what));
      index_[t.name] = tensors_.size();
      tensors_.push_back(std::move(t));
    }
    const std::uint64_t dataStart = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
    // A file without tensors may end right after its metadata (no padding).
    if (dataStart > size && !tensors_.empty())
      throw FormatError(
          fmt::format("{}: truncated: no room for the tensor data (it would start at offset {}, the file "
                      "has {} bytes)",
                      path, dataStart, size));
    const std::uint64_t dataSize = dataStart > size ? 0 : size - dataStart;
    for (Tensor& t : tensors_) {
      if (t.offset % alignment_ != 0)
        throw FormatError(
            fmt::format("{}: tensor `{}`: offset {} is not aligned to {}", path, t.name, t.offset, alignment_));
      if (t.offset > dataSize || t.bytes > dataSize - t.offset)
        throw FormatError(fmt::format("{}: tensor `{}`: data [{}, +{}) lies past the end of the file ({} data bytes)",
                                      path, t.name, t.offset, t.bytes, dataSize));
      t.data = base + dataStart + t.offset;
    }
    // Overlapping tensors mean a corrupted or hostile file.
    std::vector<const Tensor*> byOffset;
    for (const Tensor& t : tensors_) byOffset.push_back(&t);
    std::sort(byOffset.begin(), byOffset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (std::size_t i = 1; i < byOffset.size(); ++i)
      if (byOffset[i - 1]->offset + byOffset[i - 1]->bytes > byOffset[i]->offset)
        throw FormatError(
            fmt::format("{}: tensors `{}` and `{}` overlap", path, byOffset[i - 1]->name, byOffset[i]->name));
  }
}

const GgufFile::Tensor* GgufFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const GgufFile::Tensor& GgufFile::at(const std::string& name) const {
  const Tensor* t = find(name);
  if (!t) throw FormatError(fmt::format("{}: missing tensor `{}`", path_, name));
  return *t;
}

namespace {
template <class T>
const T* typed(const std::map<std::string, GgufFile::Value>& m, const std::string& key, const std::string& path,
               const char* want) {
  const auto it = m.find(key);
  if (it == m.end()) return nullptr;
  if (const T* v = std::get_if<T>(&it->second)) return v;
  throw FormatError(fmt::format("{}: metadata `{}` is not {}", path, key, want));
}
}  // namespace

std::optional<std::string> GgufFile::getString(const std::string& key) const {
  const auto* v = typed<std::string>(metadata_, key, path_, "a string");
  return v ? std::optional<std::string>(*v) : std::nullopt;
}

std::optional<std::int64_t> GgufFile::getInt(const std::string& key) const {
  const auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  if (const auto* i = std::get_if<std::int64_t>(&it->second)) return *i;
  if (const auto* u = std::get_if<std::uint64_t>(&it->second)) {
    if (*u > static_cast<std::uint64_t>(INT64_MAX))
      throw FormatError(fmt::format("{}: metadata `{}` = {} is out of range", path_, key, *u));
    return static_cast<std::int64_t>(*u);
  }
  throw FormatError(fmt::format("{}: metadata `{}` is not an integer", path_, key));
}

std::optional<double> GgufFile::getFloat(const std::string& key) const {
  const auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  if (const auto* d = std::get_if<double>(&it->second)) return *d;
  if (const auto i = std::get_if<std::int64_t>(&it->second)) return static_cast<double>(*i);
  if (const auto u = std::get_if<std::uint64_t>(&it->second)) return static_cast<double>(*u);
  throw FormatError(fmt::format("{}: metadata `{}` is not a number", path_, key));
}

std::optional<bool> GgufFile::getBool(const std::string& key) const {
  const auto* v = typed<bool>(metadata_, key, path_, "a boolean");
  return v ? std::optional<bool>(*v) : std::nullopt;
}

std::vector<std::string> GgufFile::getStringArray(const std::string& key) const {
  const auto* v = typed<std::vector<std::string>>(metadata_, key, path_, "an array of strings");
  return v ? *v : std::vector<std::string>{};
}

std::vector<std::int64_t> GgufFile::getIntArray(const std::string& key) const {
  const auto* v = typed<std::vector<std::int64_t>>(metadata_, key, path_, "an array of integers");
  return v ? *v : std::vector<std::int64_t>{};
}

std::vector<double> GgufFile::getFloatArray(const std::string& key) const {
  const auto* v = typed<std::vector<double>>(metadata_, key, path_, "an array of floats");
  return v ? *v : std::vector<double>{};
}

}  // namespace kvscope::model
