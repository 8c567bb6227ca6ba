// Hugging Face config.json (transformers v4 and v5 keys) -> ModelConfig, without torch: every key is type-checked
// and range-checked, so that a lying config is a FormatError naming the file and the key before any weight is read.
#pragma once

#include <string>
#include <string_view>

#include "model/model_config.h"

namespace kvscope::model {

/// Parses `text` (the contents of a config.json; `where` names it in messages). Accepts model_type llama, mistral,
/// qwen2, qwen3, qwen3_moe, gemma3 / gemma3_text (arch "gemma3"), with their layer specs (windows, MoE layers, local
/// RoPE) as transformers 5.23 reads them; a multimodal wrapper's text_config is read instead of the top level.
/// `tiedEmbeddings` is tie_word_embeddings (false when absent; Gemma's default true). Throws FormatError.
ModelConfig hfConfigFromJson(std::string_view text, const std::string& where);

}  // namespace kvscope::model
