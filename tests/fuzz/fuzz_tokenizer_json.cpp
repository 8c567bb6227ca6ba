// libFuzzer target: a Hugging Face tokenizer.json (and, after a "\0\0" separator, the tokenizer_config.json beside
// it) -> Tokenizer; an accepted tokenizer then encodes and decodes a fixed text and decodes every id. Only
// TokenizerError may come out.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  std::string_view json = all;
  std::optional<std::string_view> cfg;
  if (const auto sep = all.find(std::string_view("\0\0", 2)); sep != std::string_view::npos) {
    json = all.substr(0, sep);
    cfg = all.substr(sep + 2);
  }
  try {
    const auto tok = kvscope::tokenizer::fromTokenizerJsonText(json, "tokenizer.json", cfg);
    const auto ids = tok.encode("Hello world, 123  4567 <s></s><|im_start|>user\n\xE2\x96\x81x \xff\xc3");
    for (const auto id : ids)
      if (id < 0 || id >= tok.vocabSize()) __builtin_trap();
    (void)tok.decode(ids);
    (void)tok.decode(ids, true);
    std::vector<std::int32_t> every;
    for (std::int32_t i = 0; i < tok.vocabSize() && i < 4096; ++i) every.push_back(i);
    (void)tok.decode(every);
    (void)tok.preTokenize("a 1 b\n");
  } catch (const kvscope::tokenizer::TokenizerError&) {
  }
  return 0;
}
