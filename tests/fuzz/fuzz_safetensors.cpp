// libFuzzer target: the safetensors reader from memory (first byte even) or the sharded model's index reader (first
// byte odd). Only FormatError may come out.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/safetensors.h"

using kvscope::model::FormatError;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool index = data[0] & 1;
  ++data;
  --size;
  try {
    if (index) {
      const auto map = kvscope::model::readSafetensorsIndex(std::string_view(reinterpret_cast<const char*>(data), size),
                                                            "model.safetensors.index.json");
      for (const auto& [name, shard] : map)
        if (shard.empty() || shard == ".." || shard.find('/') != std::string::npos) __builtin_trap();
    } else {
      const kvscope::model::SafetensorsFile f(data, size, "fuzz.safetensors");
      volatile std::uint8_t sink = 0;
      for (const auto& e : f.entries()) {
        if (!f.contains(e.name) || &f.at(e.name) != &e) __builtin_trap();
        std::uint64_t numel = 1;
        for (auto d : e.shape) numel *= static_cast<std::uint64_t>(d);
        if (numel * static_cast<std::uint64_t>(kvscope::model::SafetensorsFile::dtypeSize(e.dtype)) != e.bytes)
          __builtin_trap();
        if (e.bytes > 0) sink = sink + e.data[0] + e.data[e.bytes - 1];
      }
    }
  } catch (const FormatError&) {
  }
  return 0;
}
