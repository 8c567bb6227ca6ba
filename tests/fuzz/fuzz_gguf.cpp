// libFuzzer target: the GGUF reader from memory, its typed metadata getters, the tokenizer built from GGUF metadata,
// and dequantization of the first row of every tensor. Only FormatError/TokenizerError may come out; anything else
// (another exception, a crash, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/dequant.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

using kvscope::model::FormatError;
using kvscope::model::GgufFile;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const GgufFile f(data, size, "fuzz.gguf");
    for (const auto& [key, value] : f.metadata()) {
      // Every getter either answers or throws FormatError for a value of another type.
      try {
        (void)f.getString(key);
      } catch (const FormatError&) {
      }
      try {
        (void)f.getInt(key);
      } catch (const FormatError&) {
      }
      try {
        (void)f.getFloat(key);
      } catch (const FormatError&) {
      }
      try {
        (void)f.getBool(key);
      } catch (const FormatError&) {
      }
      try {
        (void)f.getStringArray(key);
      } catch (const FormatError&) {
      }
      try {
        (void)f.getIntArray(key);
      } catch (const FormatError&) {
      }
      try {
        (void)f.getFloatArray(key);
      } catch (const FormatError&) {
      }
    }
    std::vector<float> row;
    volatile std::uint8_t sink = 0;
    for (const auto& t : f.tensors()) {
      (void)kvscope::kernels::ggmlTypeName(t.type);
      if (f.find(t.name) != &t) __builtin_trap();
      // The reader promised [data, data + bytes) lies inside the buffer: touch both ends.
      if (t.bytes > 0) sink = sink + t.data[0] + t.data[t.bytes - 1];
      // The first row (dims[0] elements) dequantized, when it is a whole number of blocks.
      const std::int64_t n = t.dims[0];
      if (n > 0 && n <= 4096) {
        try {
          const auto rowBytes = GgufFile::tensorBytes(t.type, n, "row");
          if (rowBytes <= t.bytes) {
            row.resize(static_cast<std::size_t>(n));
            kvscope::model::dequantizeRow(t.type, t.data, n, row.data());
          }
        } catch (const FormatError&) {
        }
      }
    }
    try {
      const auto tok = kvscope::tokenizer::fromGguf(f);
      const auto ids = tok.encode("Hello world, 123 <|im_start|>user\n\xE2\x96\x81x\xff");
      (void)tok.decode(ids);
    } catch (const kvscope::tokenizer::TokenizerError&) {
    }
  } catch (const FormatError&) {
  }
  return 0;
}
