// ggml's tensor types (ggml.h's enum ggml_type) as GGUF files number them: the one place for their numbers, names and
// block layouts. The GGUF reader (model/gguf.h) sizes tensors with it; the block kernels (cpu/blocks.h) read the
// subset they keep in memory as stored. Torch-free, constexpr.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvscope::kernels {

enum class GgmlType : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;
  std::int64_t blockValues;  ///< values per block (1 for a plain element type)
  std::int64_t blockBytes;   ///< bytes per block
};

inline constexpr GgmlTypeInfo kGgmlTypes[] = {
    {GgmlType::F32, "F32", 1, 4},       {GgmlType::F16, "F16", 1, 2},       {GgmlType::Q4_0, "Q4_0", 32, 18},
    {GgmlType::Q4_1, "Q4_1", 32, 20},   {GgmlType::Q5_0, "Q5_0", 32, 22},   {GgmlType::Q5_1, "Q5_1", 32, 24},
    {GgmlType::Q8_0, "Q8_0", 32, 34},   {GgmlType::Q8_1, "Q8_1", 32, 36},   {GgmlType::Q2_K, "Q2_K", 256, 84},
    {GgmlType::Q3_K, "Q3_K", 256, 110}, {GgmlType::Q4_K, "Q4_K", 256, 144}, {GgmlType::Q5_K, "Q5_K", 256, 176},
    {GgmlType::Q6_K, "Q6_K", 256, 210}, {GgmlType::Q8_K, "Q8_K", 256, 292}, {GgmlType::I8, "I8", 1, 1},
    {GgmlType::I16, "I16", 1, 2},       {GgmlType::I32, "I32", 1, 4},       {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},       {GgmlType::BF16, "BF16", 1, 2},     {GgmlType::MXFP4, "MXFP4", 32, 17},
};

/// The type numbered `type`; nullptr for a number kvscope does not know.
constexpr const GgmlTypeInfo* ggmlTypeInfo(std::uint32_t type) {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (static_cast<std::uint32_t>(t.type) == type) return &t;
  return nullptr;
}

/// "Q4_1", or "type 99" for one kvscope does not know.
inline std::string ggmlTypeName(std::uint32_t type) {
  const GgmlTypeInfo* t = ggmlTypeInfo(type);
  return t ? std::string(t->name) : "type " + std::to_string(type);
}

}  // namespace kvscope::kernels
