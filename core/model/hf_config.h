// Hugging Face config.json (transformers v4 and v5 keys) -> ModelConfig, without torch: every key is type-checked
// and range-checked, so that a lying config is a FormatError naming the file and the key before any weight is read.
#pragma once

#include <string>
#include <string_view>

#include "model/model_config.h"

namespace kvscope::model {

/// Parses `text` (the contents of a config.json; `where` names it in messages). Accepts model_type llama, mistral
/// (without sliding-window attention), qwen2, qwen3, qwen3_moe (layer specs: which layers are MoE); a multimodal
/// wrapper's text_config is read instead of the top level. `tiedEmbeddings` is tie_word_embeddings (false when absent).
/// Throws FormatError.
ModelConfig hfConfigFromJson(std::string_view text, const std::string& where);

}  // namespace kvscope::model
