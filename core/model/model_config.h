// What a Llama-family model is made of (read from GGUF metadata or a Hugging Face config.json). No torch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::model {

struct ModelConfig {
  std::string arch = "llama";  ///< llama, qwen2, qwen3
  std::string name;
  int layers = 0, hidden = 0, heads = 0, kvHeads = 0, headDim = 0, intermediate = 0, vocab = 0;
  double rmsEps = 1e-5, ropeTheta = 10000.0;
  // llama3 rope scaling (factor 0: none)
  double ropeFactor = 0.0, ropeLowFreq = 1.0, ropeHighFreq = 4.0;
  std::int64_t ropeOriginalMax = 8192;
  std::int64_t contextLength = 0;
  bool tiedEmbeddings = false, qkvBias = false, qkNorm = false;
  std::vector<std::string> weightTypes;  ///< "Q4_1 x210", ... for the model card
};

}  // namespace kvscope::model
