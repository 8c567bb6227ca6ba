// The capacity planner against the engines' own log lines, as users posted them (each test names its source), and
// the model layouts it reads from config.json files and GGUF headers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "gguf_writer.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "plan/plan.h"

namespace kvscope::plan {
namespace {

// A GGUF header with `arch`'s metadata (no tensors) read back as llama.cpp reads it.
struct Meta {
  std::string arch;
  std::vector<std::pair<std::string, std::uint32_t>> u32;
  std::vector<std::tuple<std::string, std::uint32_t, std::vector<std::int64_t>>> arrays;
};
ModelLayout gguf(const Meta& m) {
  testutil::GgufWriter w;
  w.header(0, 1 + m.u32.size() + m.arrays.size());
  w.kvStr("general.architecture", m.arch);
  for (const auto& [k, v] : m.u32) w.kvU32(m.arch + "." + k, v);
  for (const auto& [k, t, v] : m.arrays) w.kvArr(m.arch + "." + k, t, v);
  w.align();
  const model::GgufFile f(reinterpret_cast<const std::uint8_t*>(w.bytes.data()), w.bytes.size(), m.arch + ".gguf");
  return layoutFromGguf(f);
}

std::vector<std::string> lines(const ConfigPlan& c, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& l : c.log)
    if (l.starts_with(prefix)) out.push_back(l);
  return out;
}

ConfigPlan one(const ModelLayout& m, const std::string& spec, const PlanOptions& o) {
  const Plan p = makePlan(m, {spec}, o);
  return p.configs.front();
}

PlanOptions llama(std::int64_t ctx) {
  PlanOptions o;
  o.engine = Engine::LlamaCpp;
  o.ctx = ctx;
  return o;
}

PlanOptions vllm(const std::string& version, double gib, std::int64_t maxLen) {
  PlanOptions o;
  o.engine = Engine::Vllm;
  o.engineVersion = version;
  o.kvMemoryGib = gib;
  o.maxModelLen = maxLen;
  return o;
}

// --- llama.cpp ------------------------------------------------------------------------------------------------

// ggml-org/llama.cpp docs/backend/hexagon/README.md ("Summary request for OLMoE-1B-7B", build 6733, 2025-10):
// OLMoE-1B-7B-0125-Instruct, q8_0 K and V, 8192 cells.
TEST(PlanLlamaCpp, DenseQ8MatchesTheHexagonDocsLog) {
  const ModelLayout m = gguf({"olmoe",
                              {{"block_count", 16},
                               {"embedding_length", 2048},
                               {"context_length", 4096},
                               {"attention.head_count", 16},
                               {"attention.head_count_kv", 16}},
                              {}});
  const ConfigPlan c = one(m, "llamacpp:type_k=q8_0,type_v=q8_0", llama(8192));
  EXPECT_EQ(lines(c, "llama_kv_cache: size"),
            std::vector<std::string>{"llama_kv_cache: size =  544.00 MiB (  8192 cells,  16 layers,  1/1 seqs), "
                                     "K (q8_0):  272.00 MiB, V (q8_0):  272.00 MiB"});
}

// ggml-org/llama.cpp docs/backend/snapdragon/developer.md: gpt-oss-20b, --ctx-size 8192 --batch-size 128 -ctk q8_0
// -ctv q8_0: the SWA cache is pad256(min(8192, 128 + 128)) = 256 cells (n_ubatch capped by -b).
TEST(PlanLlamaCpp, SlidingWindowCacheMatchesTheSnapdragonDocsLog) {
  const ModelLayout m = gguf({"gpt-oss",
                              {{"block_count", 24},
                               {"embedding_length", 2880},
                               {"context_length", 131072},
                               {"attention.head_count", 64},
                               {"attention.head_count_kv", 8},
                               {"attention.key_length", 64},
                               {"attention.value_length", 64},
                               {"attention.sliding_window", 128}},
                              {}});
  ASSERT_EQ(m.count(LayerKind::Sliding), 12);
  EXPECT_EQ(m.layers[0].kind, LayerKind::Sliding);
  EXPECT_EQ(m.layers[1].kind, LayerKind::Full);
  PlanOptions o = llama(8192);
  o.batch = 128;
  const ConfigPlan c = one(m, "llamacpp:type_k=q8_0,type_v=q8_0", o);
  EXPECT_EQ(lines(c, "llama_kv_cache"),
            (std::vector<std::string>{
                "llama_kv_cache_iswa: creating non-SWA KV cache, size = 8192 cells",
                "llama_kv_cache: size =  102.00 MiB (  8192 cells,  12 layers,  1/1 seqs), K (q8_0):   51.00 MiB, "
                "V (q8_0):   51.00 MiB",
                "llama_kv_cache_iswa: creating     SWA KV cache, size = 256 cells",
                "llama_kv_cache: size =    3.19 MiB (   256 cells,  12 layers,  1/1 seqs), K (q8_0):    1.59 MiB, "
                "V (q8_0):    1.59 MiB"}));
  EXPECT_EQ(c.swaCells, 256);
  // The window cache is padded to 256 (#17037): 128 + 2048 -> 2304 cells with -ub 2048 -b 2048 and -c 0.
  PlanOptions wide = llama(0);
  wide.ubatch = 2048;
  const ConfigPlan w = one(m, "dynamic", wide);
  EXPECT_EQ(w.swaCells, 2304);
  EXPECT_EQ(w.cells, 131072);
  // --swa-full: the window cache as large as the context.
  o.swaFull = true;
  EXPECT_EQ(one(m, "llamacpp:type_k=q8_0,type_v=q8_0", o).swaCells, 8192);
}

// ggml-org/llama.cpp#11200 (2025-01-12, build 4462): Qwen2.5-Coder-32B-Instruct, -c 32768, q8_0 K and V:
// "KV self size = 4352.00 MiB, K (q8_0): 2176.00 MiB, V (q8_0): 2176.00 MiB".
TEST(PlanLlamaCpp, QuantizedDenseCacheMatchesIssue11200) {
  const ModelLayout m = gguf({"qwen2",
                              {{"block_count", 64},
                               {"embedding_length", 5120},
                               {"context_length", 32768},
                               {"attention.head_count", 40},
                               {"attention.head_count_kv", 8}},
                              {}});
  const ConfigPlan c = one(m, "llamacpp:type_k=q8_0,type_v=q8_0", llama(32768));
  ASSERT_EQ(lines(c, "llama_kv_cache: size").size(), 1u);
  const std::string l = lines(c, "llama_kv_cache: size").front();
  EXPECT_NE(l.find("size = 4352.00 MiB"), std::string::npos) << l;
  EXPECT_NE(l.find("K (q8_0): 2176.00 MiB, V (q8_0): 2176.00 MiB"), std::string::npos) << l;
}

// ggml-org/llama.cpp#12728 (2025-04-03): a deepseek2 GGUF converted before llama.cpp's MLA cache (60 layers, 128
// heads, K 192, V 128), -c 4096: "K (f16): 11520.00 MiB, V (f16): 7680.00 MiB" and with -ctk q8_0
// "K (q8_0): 6120.00 MiB, V (f16): 7680.00 MiB".
TEST(PlanLlamaCpp, LegacyDeepSeekGgufCachesEveryHeadAsIssue12728) {
  const ModelLayout m = gguf({"deepseek2",
                              {{"block_count", 60},
                               {"embedding_length", 5120},
                               {"context_length", 163840},
                               {"attention.head_count", 128},
                               {"attention.head_count_kv", 128},
                               {"attention.key_length", 192},
                               {"attention.value_length", 128},
                               {"attention.kv_lora_rank", 512},
                               {"rope.dimension_count", 64}},
                              {}});
  EXPECT_TRUE(m.mlaExpanded);
  EXPECT_EQ(m.count(LayerKind::Mla), 0);
  const auto f16 = lines(one(m, "dynamic", llama(4096)), "llama_kv_cache: size").front();
  EXPECT_NE(f16.find("K (f16): 11520.00 MiB, V (f16): 7680.00 MiB"), std::string::npos) << f16;
  const auto q8 = lines(one(m, "llamacpp:type_k=q8_0,type_v=f16", llama(4096)), "llama_kv_cache: size").front();
  EXPECT_NE(q8.find("K (q8_0): 6120.00 MiB, V (f16): 7680.00 MiB"), std::string::npos) << q8;
}

// The MLA cache since #19067: the latent and the RoPE key as K, no V. ikawrakow/ik_llama.cpp PR #259 (2025-03,
// DeepSeek-R1, 32768 cells, q8_0): "c^KV (q8_0): 1166.62 MiB" — 1166.625 printed with ties to even.
TEST(PlanLlamaCpp, MlaCachesTheLatentAsKAlone) {
  const ModelLayout m = gguf({"deepseek2",
                              {{"block_count", 61},
                               {"embedding_length", 7168},
                               {"context_length", 163840},
                               {"attention.head_count", 128},
                               {"attention.head_count_kv", 1},
                               {"attention.key_length", 576},
                               {"attention.value_length", 512},
                               {"attention.key_length_mla", 192},
                               {"attention.value_length_mla", 128},
                               {"attention.kv_lora_rank", 512},
                               {"rope.dimension_count", 64}},
                              {}});
  ASSERT_EQ(m.count(LayerKind::Mla), 61);
  const ConfigPlan c = one(m, "llamacpp:type_k=q8_0,type_v=q8_0", llama(32768));
  EXPECT_EQ(lines(c, "llama_kv_cache: size").front(),
            "llama_kv_cache: size = 1166.62 MiB ( 32768 cells,  61 layers,  1/1 seqs), K (q8_0): 1166.62 MiB, "
            "V (q8_0):    0.00 MiB");
  // llama.cpp refuses different K and V types on an MLA model.
  EXPECT_FALSE(one(m, "llamacpp:type_k=q8_0,type_v=q4_0", llama(32768)).expressible);
}

// ggml-org/llama.cpp PR #23792 ("TP: quantized KV cache support"): a Qwen3.5-27B-shaped qwen35 model with 2
// sequences: "size =  299.25 MiB (     2 cells,  64 layers,  2 seqs  0 rs_seq), R (f32):   11.25 MiB,
// S (f32):  288.00 MiB". JamePeng/llama-cpp-python#78: Qwen3.5-9B, one sequence: "50.25 MiB ... R (f32): 2.25 MiB,
// S (f32): 48.00 MiB".
TEST(PlanLlamaCpp, RecurrentStatesMatchPr23792AndLlamaCppPython78) {
  auto qwen35 = [](std::uint32_t layers, std::uint32_t inner, std::uint32_t vHeads) {
    return gguf({"qwen35",
                 {{"block_count", layers},
                  {"embedding_length", 4096},
                  {"context_length", 262144},
                  {"attention.head_count", 16},
                  {"attention.head_count_kv", 4},
                  {"attention.key_length", 256},
                  {"attention.value_length", 256},
                  {"ssm.conv_kernel", 4},
                  {"ssm.inner_size", inner},
                  {"ssm.state_size", 128},
                  {"ssm.group_count", 16},
                  {"ssm.time_step_rank", vHeads},
                  {"full_attention_interval", 4}},
                 {}});
  };
  const ModelLayout big = qwen35(64, 6144, 48);
  EXPECT_EQ(big.count(LayerKind::Linear), 48);
  EXPECT_EQ(big.layers[3].kind, LayerKind::Full);
  PlanOptions o = llama(8192);
  o.parallel = 2;
  EXPECT_EQ(lines(one(big, "dynamic", o), "llama_memory_recurrent"),
            std::vector<std::string>{"llama_memory_recurrent: size =  299.25 MiB (     2 cells,  64 layers,  2 seqs  "
                                     "0 rs_seq), R (f32):   11.25 MiB, S (f32):  288.00 MiB"});
  const ConfigPlan small = one(qwen35(32, 4096, 32), "llamacpp:type_k=q8_0,type_v=q8_0", llama(8192));
  const std::string r = lines(small, "llama_memory_recurrent").front();
  EXPECT_NE(r.find("size =   50.25 MiB (     1 cells,  32 layers,  1 seqs"), std::string::npos) << r;
  EXPECT_NE(r.find("R (f32):    2.25 MiB, S (f32):   48.00 MiB"), std::string::npos) << r;  // -ctk does not touch them
}

// llama_context's streams: -np without a unified cache splits n_ctx per sequence (padded to 256) and multiplies the
// bytes, not the printed cells (llama-context.cpp, llama-kv-cache.cpp).
TEST(PlanLlamaCpp, SequencesSplitTheContextUnlessUnified) {
  const ModelLayout m = gguf({"llama",
                              {{"block_count", 32},
                               {"embedding_length", 4096},
                               {"context_length", 8192},
                               {"attention.head_count", 32},
                               {"attention.head_count_kv", 8}},
                              {}});
  PlanOptions o = llama(8192);
  o.parallel = 3;  // 8192 / 3 = 2730 -> 2816 per stream, 8448 in all
  const ConfigPlan split = one(m, "dynamic", o);
  EXPECT_EQ(split.cells, 2816);
  EXPECT_EQ(split.kvTokens, 8448);
  EXPECT_EQ(lines(split, "llama_kv_cache: size").front(),
            "llama_kv_cache: size = 1056.00 MiB (  2816 cells,  32 layers,  3/3 seqs), K (f16):  528.00 MiB, "
            "V (f16):  528.00 MiB");
  o.kvUnified = true;
  EXPECT_EQ(one(m, "dynamic", o).cells, 8192);
  o.ctx = 1000;  // padded up to 1024
  EXPECT_EQ(one(m, "dynamic", o).cells, 1024);
  o.ctx = 300;  // n_batch is clamped to 300 before the context is padded to 512
  const ConfigPlan small = one(m, "dynamic", o);
  EXPECT_EQ(small.cells, 512);
  EXPECT_EQ(lines(small, "llama_context: n_batch").front(), "llama_context: n_batch       = 300");
  EXPECT_FALSE(one(m, "fp8", o).expressible);
  // With a budget: the largest -c whose cache fits (128 KiB a token in f16: 8 GiB hold 65536 tokens, q8_0 123,136).
  PlanOptions budget = llama(8192);
  budget.kvMemoryGib = 8;
  EXPECT_EQ(one(m, "dynamic", budget).fitTokens, 65536);
  EXPECT_EQ(one(m, "llamacpp:type_k=q8_0,type_v=q8_0", budget).fitTokens, 123136);
}

// Gemma 4: the sliding pattern is a per-layer bool array and the last layers reuse layer n_kv_from_start - 2
// (sliding) or - 1 (full): they add no cache (llama-model.cpp's reuse rule).
TEST(PlanLlamaCpp, Gemma4SharedLayersAddNoCache) {
  std::vector<std::int64_t> swa, kv;
  for (int i = 0; i < 12; ++i) swa.push_back(i % 6 != 5), kv.push_back(i % 6 == 5 ? 1 : 8);
  const ModelLayout m = gguf({"gemma4",
                              {{"block_count", 12},
                               {"embedding_length", 1536},
                               {"context_length", 131072},
                               {"attention.head_count", 8},
                               {"attention.key_length", 512},
                               {"attention.value_length", 512},
                               {"attention.key_length_swa", 256},
                               {"attention.value_length_swa", 256},
                               {"attention.sliding_window", 512},
                               {"attention.shared_kv_layers", 4}},
                              {{"attention.sliding_window_pattern", 7, swa}, {"attention.head_count_kv", 5, kv}}});
  EXPECT_EQ(m.count(LayerKind::Shared), 4);
  EXPECT_EQ(m.layers[8].sharedFrom, 6);   // sliding: 8 - 2
  EXPECT_EQ(m.layers[11].sharedFrom, 7);  // full: 8 - 1
  EXPECT_EQ(m.layers[5].headDimK, 512);
  EXPECT_EQ(m.layers[5].kvHeads, 1);
  const ConfigPlan c = one(m, "dynamic", llama(4096));
  const auto sizes = lines(c, "llama_kv_cache: size");
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_NE(sizes[0].find("1 layers"), std::string::npos) << sizes[0];  // layer 5 owns the only full cache
  EXPECT_NE(sizes[1].find("7 layers"), std::string::npos) << sizes[1];  // 0-4, 6, 7
}

// --- vLLM -----------------------------------------------------------------------------------------------------

const char* kQwen3_14B = R"({"model_type":"qwen3","hidden_size":5120,"num_hidden_layers":40,"num_attention_heads":40,
  "num_key_value_heads":8,"head_dim":128,"max_position_embeddings":40960,"torch_dtype":"bfloat16"})";

// LMCache/LMCache#1739 (2025-10): Qwen3-14B, one GPU: "Available KV cache memory: 6.51 GiB", "GPU KV cache size:
// 42,656 tokens", "Maximum concurrency for 32,768 tokens per request: 1.30x" (a uniform model: every version's
// rules give these).
TEST(PlanVllm, DenseModelMatchesLmcache1739) {
  const ModelLayout m = layoutFromHfConfig(kQwen3_14B, "config.json");
  const ConfigPlan c = one(m, "dynamic", vllm("0.33", 6.51, 32768));
  EXPECT_EQ(c.log.back(), "GPU KV cache size: 42,656 tokens, Maximum concurrency for 32,768 tokens per request: 1.30x");
  EXPECT_EQ(c.blockSize, 16);
  EXPECT_EQ(c.blocks, 2666);
}

const char* kQwen36_35B = R"({"model_type":"qwen3_5_moe","text_config":{"model_type":"qwen3_5_moe_text",
  "hidden_size":2048,"num_hidden_layers":40,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,
  "linear_conv_kernel_dim":4,"linear_key_head_dim":128,"linear_value_head_dim":128,"linear_num_key_heads":16,
  "linear_num_value_heads":32,"full_attention_interval":4,"max_position_embeddings":262144,
  "mamba_ssm_dtype":"float32","dtype":"bfloat16"}})";

// noonghunna/club-3090 #652 and #612 (2026-07, vLLM 0.24.0): Qwen3.6-35B-A3B, --kv-cache-dtype fp8,
// --max-model-len 131072, prefix caching on: 6.01 GiB -> "GPU KV cache size: 569,878 tokens", "4.35x"; 5.98 GiB ->
// 567,978 tokens, 4.33x. The attention block is raised to 2096 tokens to cover the GDN state's page.
TEST(PlanVllm, HybridGdnModelMatchesClub3090Logs) {
  const ModelLayout m = layoutFromHfConfig(kQwen36_35B, "config.json");
  ASSERT_EQ(m.count(LayerKind::Linear), 30);
  const ConfigPlan a = one(m, "fp8", vllm("0.24", 6.01, 131072));
  EXPECT_EQ(lines(a, "GPU KV"), std::vector<std::string>{"GPU KV cache size: 569,878 tokens"});
  EXPECT_EQ(lines(a, "Maximum"), std::vector<std::string>{"Maximum concurrency for 131,072 tokens per request: 4.35x"});
  EXPECT_EQ(a.blockSize, 2096);
  const ConfigPlan b = one(m, "fp8", vllm("0.24", 5.98, 131072));
  EXPECT_EQ(lines(b, "GPU KV"), std::vector<std::string>{"GPU KV cache size: 567,978 tokens"});
  EXPECT_EQ(lines(b, "Maximum"), std::vector<std::string>{"Maximum concurrency for 131,072 tokens per request: 4.33x"});
}

// vllm-project/vllm#27508 (2025-10-31): gpt-oss-120b, --max-num-batched-tokens 1024: "(4.54 GiB KV cache is
// needed, ...)" — 18 full layers of 131072 tokens and 18 sliding layers of cdiv(127 + 1024, 16) + 1 blocks.
TEST(PlanVllm, SlidingLayersNeedTheirWindowAsIssue27508) {
  std::string types;
  for (int i = 0; i < 36; ++i)
    types += std::string(i ? "," : "") + (i % 2 ? "\"full_attention\"" : "\"sliding_attention\"");
  const ModelLayout m = layoutFromHfConfig(
      R"({"model_type":"gpt_oss","hidden_size":2880,"num_hidden_layers":36,"num_attention_heads":64,
          "num_key_value_heads":8,"head_dim":64,"sliding_window":128,"max_position_embeddings":131072,
          "layer_types":[)" +
          types + "]}",
      "config.json");
  PlanOptions o = vllm("0.24", 1.71, 131072);
  o.maxNumBatchedTokens = 1024;
  const ConfigPlan c = one(m, "dynamic", o);
  const auto err = lines(c, "ValueError");
  ASSERT_EQ(err.size(), 1u);
  EXPECT_NE(err[0].find("(4.54 GiB KV cache is needed"), std::string::npos) << err[0];
}

// alvarobartt/hf-mem PR #61 (2026-05-06): gemma-4-31B-it, "Available KV cache memory: 24.54 GiB", "GPU KV cache
// size: 26,800 tokens" (a version that printed num_blocks // groups x block). 50 sliding layers of 16 KV heads x 256
// (16 KiB a token) and 10 full layers of 4 x 512 (8 KiB): the full layers' block doubles to 32 so that every page is
// 256 KiB; six groups of ten layers, 2.5 MiB a block, 10,051 blocks; 10,051 // 6 x 16 = 26,800.
TEST(PlanVllm, Gemma4PagesAndGroupsMatchHfMem61) {
  std::string types;
  for (int i = 0; i < 60; ++i)
    types += std::string(i ? "," : "") + ((i + 1) % 6 ? "\"sliding_attention\"" : "\"full_attention\"");
  const ModelLayout m = layoutFromHfConfig(
      R"({"model_type":"gemma4","text_config":{"model_type":"gemma4_text","hidden_size":5376,
          "num_hidden_layers":60,"num_attention_heads":32,"num_key_value_heads":16,"num_global_key_value_heads":4,
          "head_dim":256,"global_head_dim":512,"attention_k_eq_v":true,"sliding_window":1024,
          "max_position_embeddings":262144,"layer_types":[)" +
          types + "]}}",
      "config.json");
  ASSERT_EQ(m.layers[5].kvHeads, 4);
  ASSERT_EQ(m.layers[5].headDimK, 512);
  const ConfigPlan c = one(m, "dynamic", vllm("0.24", 24.54, 262144));
  EXPECT_EQ(c.blocks, 10051);
  EXPECT_EQ(*c.blocks / 6 * 16, 26800);
  EXPECT_NEAR(*c.kvMib, 10051 * 2.5, 1e-6);  // 2.5 MiB a block
}

// 0.33's rules on three layouts, worked by hand from its source (v1/core/kv_cache_planning.py, kv_cache_utils.py;
// docs/capacity.md): 60 GiB, bf16.
TEST(PlanVllm, VersionRulesOnThreeLayouts) {
  const ModelLayout llama8b = layoutFromHfConfig(
      R"({"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,
          "num_key_value_heads":8,"max_position_embeddings":131072})",
      "config.json");
  EXPECT_EQ(one(llama8b, "dynamic", vllm("0.33", 60, 131072)).log.back(),
            "GPU KV cache size: 491,520 tokens, Maximum concurrency for 131,072 tokens per request: 3.75x");
  // 0.34's default block of 64; 0.24's two lines.
  EXPECT_EQ(one(llama8b, "dynamic", vllm("0.34", 60, 131072)).blockSize, 64);
  EXPECT_EQ(one(llama8b, "dynamic", vllm("0.24", 60, 131072)).log.size(), 2u);
  // TurboQuant keeps the first and last two layers in bf16 and raises the block to 48 (16 * cdiv(4096, 1568)).
  EXPECT_EQ(one(llama8b, "vllm:kv=turboquant_k8v4", vllm("0.33", 60, 131072)).blockSize, 48);

  std::string types;
  for (int i = 0; i < 24; ++i)
    types += std::string(i ? "," : "") + (i % 2 ? "\"full_attention\"" : "\"sliding_attention\"");
  const ModelLayout oss = layoutFromHfConfig(
      R"({"model_type":"gpt_oss","hidden_size":2880,"num_hidden_layers":24,"num_attention_heads":64,
          "num_key_value_heads":8,"head_dim":64,"sliding_window":128,"max_position_embeddings":131072,
          "layer_types":[)" +
          types + "]}",
      "config.json");
  EXPECT_EQ(one(oss, "dynamic", vllm("0.33", 60, 131072)).log.back(),
            "GPU KV cache size: 2,327,895 tokens, Maximum concurrency for 131,072 tokens per request: 17.76x");

  const ModelLayout next = layoutFromHfConfig(
      R"({"model_type":"qwen3_next","hidden_size":2048,"num_hidden_layers":48,"num_attention_heads":16,
          "num_key_value_heads":2,"head_dim":256,"max_position_embeddings":262144})",
      "config.json");
  const ConfigPlan c = one(next, "dynamic", vllm("0.33", 60, 262144));
  EXPECT_EQ(c.blockSize, 576);  // 64 * cdiv(1,097,728, 64 * 2048): the GDN checkpoints align blocks to 64
  EXPECT_EQ(c.log.back(),
            "GPU KV cache size: 2,565,628 tokens, Maximum concurrency for 262,144 tokens per request: 9.79x");
  PlanOptions noPrefix = vllm("0.33", 60, 262144);
  noPrefix.prefixCaching = false;
  EXPECT_EQ(one(next, "dynamic", noPrefix).blockSize, 544);
}

// --- SGLang ---------------------------------------------------------------------------------------------------

// vllm-project/vllm#21348 (2025-07-22): SGLang serving Qwen3-235B-A22B-FP8 with --tp 4: "KV Cache is allocated.
// #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB" (the pool holds #tokens + page rows).
TEST(PlanSglang, GqaPoolMatchesIssue21348) {
  const ModelLayout m = layoutFromHfConfig(
      R"({"model_type":"qwen3_moe","hidden_size":4096,"num_hidden_layers":94,"num_attention_heads":64,
          "num_key_value_heads":4,"head_dim":128,"max_position_embeddings":40960})",
      "config.json");
  PlanOptions o;
  o.engine = Engine::Sglang;
  o.tp = 4;
  o.kvMemoryGib = 367404.0 * 94 * 1 * 256 * 2 / (1 << 30) + 1e-9;
  const ConfigPlan c = one(m, "dynamic", o);
  EXPECT_EQ(c.log.back(), "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB");
  // The buffers hold #tokens + page_size rows (the padding page).
  EXPECT_DOUBLE_EQ(*c.kMib * 1024 * 1024, 94.0 * (367404 + 1) * 128 * 2);
}

// sgl-project/sglang PR #11309 (2025-10-07): DeepSeek-V3.2-Exp, fp8, page 64, DP attention (attention TP 1):
// "KV Cache is allocated. #tokens: 975424, KV size: 43.67 GB" — 656-byte fp8 latents and the indexer's 132-byte keys.
TEST(PlanSglang, SparseMlaPoolMatchesPr11309) {
  const ModelLayout m = layoutFromHfConfig(
      R"({"model_type":"deepseek_v32","hidden_size":7168,"num_hidden_layers":61,"num_attention_heads":128,
          "num_key_value_heads":128,"kv_lora_rank":512,"qk_rope_head_dim":64,"qk_nope_head_dim":128,
          "v_head_dim":128,"index_head_dim":128,"max_position_embeddings":163840})",
      "config.json");
  ASSERT_EQ(m.layers[0].indexDim, 128);
  PlanOptions o;
  o.engine = Engine::Sglang;
  o.pageSize = 64;
  o.kvMemoryGib = 975424.0 * 61 * (656 + 132) / (1 << 30) + 1e-9;
  const ConfigPlan c = one(m, "fp8", o);
  EXPECT_EQ(c.log.back(), "KV Cache is allocated. #tokens: 975424, KV size: 43.67 GB");
}

// sgl-project/sglang PR #13466 (2025-11): Kimi-K2-Instruct-0905 (kimi_k2: DeepSeek-V3's MLA), --tp 8, bf16: "KV Cache
// is allocated. #tokens: 8050, KV size: 0.53 GB" — the latent is not split over the GPUs.
TEST(PlanSglang, MlaLatentIsReplicatedAsPr13466) {
  const ModelLayout m = layoutFromHfConfig(
      R"({"model_type":"kimi_k2","hidden_size":7168,"num_hidden_layers":61,"num_attention_heads":64,
          "num_key_value_heads":64,"kv_lora_rank":512,"qk_rope_head_dim":64,"max_position_embeddings":262144})",
      "config.json");
  PlanOptions o;
  o.engine = Engine::Sglang;
  o.tp = 8;
  o.kvMemoryGib = 8050.0 * 61 * 576 * 2 / (1 << 30) + 1e-9;
  EXPECT_EQ(one(m, "dynamic", o).log.back(), "KV Cache is allocated. #tokens: 8050, KV size: 0.53 GB");
}

// --- layouts from config.json ---------------------------------------------------------------------------------

TEST(PlanLayout, FamiliesDeriveTheirLayerKindsAsTransformers) {
  // gemma-3-4b-it's text_config leaves out head_dim and the heads: Gemma3TextConfig's 256 / 8 / 4; every sixth layer
  // is full.
  const ModelLayout g3 = layoutFromHfConfig(
      R"({"model_type":"gemma3","text_config":{"model_type":"gemma3_text","hidden_size":2560,
          "num_hidden_layers":34,"sliding_window":1024}})",
      "config.json");
  EXPECT_EQ(g3.count(LayerKind::Full), 5);
  EXPECT_EQ(g3.layers[5].kind, LayerKind::Full);
  EXPECT_EQ(g3.layers[0].window, 1024);
  EXPECT_EQ(g3.layers[0].headDimK, 256);
  EXPECT_EQ(g3.layers[0].kvHeads, 4);
  // Mistral with a sliding window slides in every layer; Qwen2 without use_sliding_window in none.
  EXPECT_EQ(layoutFromHfConfig(R"({"model_type":"mistral","hidden_size":4096,"num_hidden_layers":4,
      "num_attention_heads":32,"num_key_value_heads":8,"sliding_window":4096})",
                               "c")
                .count(LayerKind::Sliding),
            4);
  // llama.cpp never reads a Mistral config's window: one cache, every layer in full.
  const ModelLayout mistral = layoutFromHfConfig(R"({"model_type":"mistral","hidden_size":4096,"num_hidden_layers":4,
      "num_attention_heads":32,"num_key_value_heads":8,"sliding_window":4096})",
                                                 "c");
  const ConfigPlan whole = one(mistral, "dynamic", llama(8192));
  EXPECT_FALSE(whole.swaCells);
  EXPECT_EQ(lines(whole, "llama_kv_cache: size").size(), 1u);
  EXPECT_EQ(layoutFromHfConfig(R"({"model_type":"qwen2","hidden_size":896,"num_hidden_layers":4,
      "num_attention_heads":14,"num_key_value_heads":2,"sliding_window":4096,"use_sliding_window":false})",
                               "c")
                .count(LayerKind::Full),
            4);
  // Kimi-K2's remote-code config is DeepSeek-V3's MLA.
  const ModelLayout kimi = layoutFromHfConfig(R"({"model_type":"kimi_k2","hidden_size":7168,"num_hidden_layers":61,
      "num_attention_heads":64,"kv_lora_rank":512,"qk_rope_head_dim":64})",
                                              "c");
  EXPECT_EQ(kimi.count(LayerKind::Mla), 61);
  EXPECT_EQ(kimi.layers[0].latent + kimi.layers[0].ropeDim, 576);
  // Gemma 4 E2B-like: full layers of global_head_dim, the last 20 layers reading layer 13 (sliding) or 14 (full).
  const ModelLayout g4 = layoutFromHfConfig(
      R"({"model_type":"gemma4","text_config":{"model_type":"gemma4_text","hidden_size":1536,
          "num_hidden_layers":35,"num_attention_heads":8,"num_key_value_heads":1,"head_dim":256,
          "global_head_dim":512,"sliding_window":512,"num_kv_shared_layers":20,
          "layer_types":[)" +
          [] {
            std::string t;
            for (int i = 0; i < 35; ++i)
              t += std::string(i ? "," : "") + ((i + 1) % 5 ? "\"sliding_attention\"" : "\"full_attention\"");
            return t;
          }() +
          "]}}",
      "config.json");
  EXPECT_EQ(g4.count(LayerKind::Shared), 20);
  EXPECT_EQ(g4.layers[15].sharedFrom, 13);
  EXPECT_EQ(g4.layers[19].sharedFrom, 14);
  EXPECT_EQ(g4.layers[4].headDimK, 512);
}

TEST(PlanLayout, BadConfigsAndOptionsAreOneClearError) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] {
              layoutFromHfConfig(R"({"model_type":"llama","hidden_size":64})", "cfg.json");
            }).find("`num_hidden_layers` is missing"),
            std::string::npos);
  EXPECT_NE(message([] {
              layoutFromHfConfig(R"({"model_type":"deepseek_v3","hidden_size":64,"num_hidden_layers":2,
                  "num_attention_heads":2,"kv_lora_rank":512})",
                                 "cfg.json");
            }).find("qk_rope_head_dim"),
            std::string::npos);
  EXPECT_NE(message([] {
              layoutFromHfConfig(R"({"model_type":"llama","hidden_size":64,"num_hidden_layers":2,
                  "num_attention_heads":2,"layer_types":["full_attention"]})",
                                 "cfg.json");
            }).find("has 1 entries for num_hidden_layers = 2"),
            std::string::npos);
  const ModelLayout m = layoutFromHfConfig(kQwen3_14B, "config.json");
  PlanOptions o = vllm("0.99", 1, 1024);
  EXPECT_NE(message([&] { makePlan(m, {"dynamic"}, o); }).find("vllm version `0.99`"), std::string::npos);
  o = vllm("0.33", 1, 1024);
  o.kvMemoryGib.reset();
  o.gpu = "Z80";
  EXPECT_NE(message([&] { makePlan(m, {"dynamic"}, o); }).find("unknown GPU `Z80`"), std::string::npos);
  o.gpu.clear();
  EXPECT_NE(message([&] { makePlan(m, {"dynamic"}, o); }).find("--kv-memory-gib"), std::string::npos);
  EXPECT_NE(message([&] { makePlan(m, {"quanto:nbits=9"}, vllm("0.33", 1, 1024)); }), "no error");
}

}  // namespace
}  // namespace kvscope::plan

namespace kvscope::plan {

// The planner and the forward read one model's sliding windows alike (plan/layout_hf.cpp and model/hf_config.cpp
// follow transformers 5.23 each): which layers slide and over how many positions, for every family both read.
TEST(PlanLayout, SlidingWindowsAgreeWithTheForward) {
  const std::string base =
      R"("hidden_size":64,"num_hidden_layers":4,"num_attention_heads":2,"num_key_value_heads":1,"vocab_size":64,)"
      R"("intermediate_size":128)";
  const std::vector<std::pair<std::string, std::vector<int>>> cases = {
      {R"({"model_type":"mistral",)" + base + R"(,"sliding_window":24})", {24, 24, 24, 24}},
      {R"({"model_type":"mistral",)" + base + "}", {4096, 4096, 4096, 4096}},  // MistralConfig's default
      {R"({"model_type":"mistral",)" + base + R"(,"sliding_window":null})", {0, 0, 0, 0}},
      {R"({"model_type":"qwen3",)" + base + R"(,"use_sliding_window":true,"sliding_window":16,"max_window_layers":1})",
       {0, 16, 16, 16}},
      {R"({"model_type":"qwen2",)" + base + R"(,"use_sliding_window":true,"max_window_layers":3})", {0, 0, 0, 4096}},
      {R"({"model_type":"qwen3",)" + base + R"(,"use_sliding_window":false,"sliding_window":16})", {0, 0, 0, 0}},
      {R"({"model_type":"qwen3",)" + base + R"(,"use_sliding_window":true,"sliding_window":null})", {0, 0, 0, 0}},
      {R"({"model_type":"qwen3_moe",)" + base + R"(,"use_sliding_window":true,"sliding_window":32})", {32, 32, 32, 32}},
      // Gemma 3: every sliding_window_pattern-th layer global (default 6, window 4096), or as layer_types says.
      {R"({"model_type":"gemma3_text",)" + base + "}", {4096, 4096, 4096, 4096}},
      {R"({"model_type":"gemma3_text",)" + base + R"(,"sliding_window":512,"sliding_window_pattern":2})",
       {512, 0, 512, 0}},
      {R"({"model_type":"gemma3","text_config":{)" + base +
           R"(,"sliding_window":1024,"layer_types":["full_attention","sliding_attention","sliding_attention",)"
           R"("full_attention"]}})",
       {0, 1024, 1024, 0}},
  };
  for (const auto& [json, want] : cases) {
    SCOPED_TRACE(json);
    const model::ModelConfig c = model::hfConfigFromJson(json, "config.json");
    const ModelLayout m = layoutFromHfConfig(json, "config.json");
    ASSERT_EQ(c.layerSpecs.size(), want.size());
    ASSERT_EQ(m.layers.size(), want.size());
    for (std::size_t l = 0; l < want.size(); ++l) {
      EXPECT_EQ(c.layerSpecs[l].window, want[l]) << "forward, layer " << l;
      EXPECT_EQ(m.layers[l].kind == LayerKind::Sliding ? m.layers[l].window : 0, want[l]) << "plan, layer " << l;
    }
  }
}

// Gemma 4: the planner and the forward read the same head sizes, KV heads and shared-KV sources from one config
// (an E2B-like pattern with K = V on the full layers), so what `plan` prices is what the forward stores.
TEST(PlanLayout, Gemma4LayersAgreeWithTheForward) {
  std::string types;
  for (int i = 0; i < 10; ++i)
    types += std::string(i ? "," : "") + ((i + 1) % 5 ? "\"sliding_attention\"" : "\"full_attention\"");
  const std::string json = R"({"model_type":"gemma4_text","hidden_size":64,"num_hidden_layers":10,)"
                           R"("num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"global_head_dim":32,)"
                           R"("attention_k_eq_v":true,"num_global_key_value_heads":1,"num_kv_shared_layers":4,)"
                           R"("sliding_window":8,"vocab_size":64,"intermediate_size":128,"layer_types":[)" +
                           types + "]}";
  const model::ModelConfig c = model::hfConfigFromJson(json, "config.json");
  const ModelLayout m = layoutFromHfConfig(json, "config.json");
  ASSERT_EQ(m.layers.size(), 10u);
  for (int l = 0; l < 10; ++l) {
    SCOPED_TRACE(l);
    const LayerSpec& p = m.layers[static_cast<std::size_t>(l)];
    const int from = c.layerSpecs[static_cast<std::size_t>(l)].kvFrom;
    EXPECT_EQ(p.kind == LayerKind::Shared, from >= 0);
    if (from >= 0) {
      EXPECT_EQ(p.sharedFrom, from);
      continue;
    }
    EXPECT_EQ(p.headDimK, c.headDimOf(l));
    EXPECT_EQ(p.kvHeads, c.kvHeadsOf(l));
    EXPECT_EQ(p.kind == LayerKind::Sliding ? p.window : 0, c.layerSpecs[static_cast<std::size_t>(l)].window);
  }
  EXPECT_EQ(c.layerSpecs[6].kvFrom, 5);  // sliding readers: the last sliding layer before the shared ones
  EXPECT_EQ(c.layerSpecs[9].kvFrom, 4);  // the full reader: layer 4
}

}  // namespace kvscope::plan
