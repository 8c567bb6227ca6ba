// kvscope's TurboQuant and int4 per-token-head rows (kernels/kv_block_codec.h) against vLLM 0.33.0's own code, on the
// fixtures of tests/parity/make_turboquant_fixtures.py: its Lloyd-Max solver's centroids and the backend's midpoints,
// its slot sizes and boundary layers, the bytes its Triton store kernels write (run by Triton's interpreter on the
// CPU), what its dequant and decode kernels read back, its RHT signs and transform, and its int4 store kernel.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "kernels/cpu/kv_blocks.h"
#include "kernels/kv_block_codec.h"
#include "model/safetensors.h"
#include "tensor_helpers.h"

using namespace kvscope;
using testutil::loadTensor;
namespace kvc = kvscope::kernels::kvcodec;

namespace {

const model::SafetensorsFile& fixture() {
  static const model::SafetensorsFile f(std::string(KVSCOPE_TQ_FIXTURE_DIR) + "/turboquant.safetensors");
  return f;
}
at::Tensor load(const std::string& name) {
  return loadTensor(fixture(), name).contiguous();
}

std::uint32_t bitsOf(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Preset {
  const char* name;  // the fixtures' name and vLLM's preset without "turboquant_"
  std::uint32_t keys, values;
};
constexpr Preset kPresets[] = {{"k8v4", kernels::kTypeTqKeyFp8, kernels::kTypeTqValue4},
                               {"4bit_nc", kernels::kTypeTqKey4, kernels::kTypeTqValue4},
                               {"k3v4_nc", kernels::kTypeTqKey3, kernels::kTypeTqValue4},
                               {"3bit_nc", kernels::kTypeTqKey3, kernels::kTypeTqValue3}};

}  // namespace

TEST(TurboQuantParity, CentroidsAndMidpointsAreVllms) {
  for (int d : {16, 32, 64, 128, 256, 512})
    for (int b : {3, 4}) {
      const at::Tensor c = load("centroids_d" + std::to_string(d) + "_b" + std::to_string(b));
      ASSERT_EQ(c.numel(), 1 << b);
      for (int i = 0; i < (1 << b); ++i)
        EXPECT_EQ(bitsOf(kvc::tqCentroid(d, b, i)), bitsOf(c[i].item<float>())) << d << " " << b << " " << i;
    }
  for (int d : {64, 128})
    for (int b : {3, 4}) {
      const at::Tensor m = load("midpoints_d" + std::to_string(d) + "_b" + std::to_string(b));
      for (int i = 0; i + 1 < (1 << b); ++i)
        EXPECT_EQ(bitsOf(kvc::tqMidpoint(d, b, i)), bitsOf(m[i].item<float>())) << d << " " << b << " " << i;
    }
}

TEST(TurboQuantParity, SlotSizesAndBoundaryLayersAreVllms) {
  const at::Tensor sizes = load("sizes");  // [preset, D (64, 128), (key, value, slot)]
  for (int p = 0; p < 4; ++p)
    for (int di = 0; di < 2; ++di) {
      const std::int64_t D = di == 0 ? 64 : 128;
      const std::int64_t k = kernels::kvRowBytes(kPresets[p].keys, D), v = kernels::kvRowBytes(kPresets[p].values, D);
      EXPECT_EQ(k, sizes[p][di][0].item<std::int64_t>()) << kPresets[p].name << " " << D;
      EXPECT_EQ(v, sizes[p][di][1].item<std::int64_t>()) << kPresets[p].name << " " << D;
      EXPECT_EQ(k + v, sizes[p][di][2].item<std::int64_t>()) << kPresets[p].name << " " << D;  // no padding byte
    }
  const at::Tensor skip = load("skip_layers");
  const int layers[] = {1, 2, 3, 4, 5, 6, 7, 8, 32};
  for (int i = 0; i < 9; ++i) {
    const int L = layers[i];
    std::vector<bool> skipped(static_cast<std::size_t>(L), false);
    for (int j = 0; j < skip.size(1); ++j)
      if (skip[i][j].item<std::int64_t>() >= 0)
        skipped[static_cast<std::size_t>(skip[i][j].item<std::int64_t>())] = true;
    for (const char* kv : {"turboquant_k8v4", "turboquant_3bit_nc"}) {
      const cache::KvCache c(cache::parseSpec(std::string("vllm:kv=") + kv), L);
      for (int l = 0; l < L; ++l)
        EXPECT_EQ(c.layer(l).backend() == cache::Backend::Dynamic, skipped[static_cast<std::size_t>(l)])
            << kv << " L " << L << " layer " << l;
    }
  }
}

// The key codes from vLLM's own rotated unit vectors and norms, the values from its inputs: the store kernel's bytes,
// bit for bit; then what its kernels read back.
TEST(TurboQuantParity, StoredBytesAndReadBackAreVllms) {
  for (std::int64_t D : {64, 128}) {
    const std::string d = "_d" + std::to_string(D);
    const at::Tensor keys = load("key" + d), values = load("value" + d), y = load("y" + d), norms = load("norm" + d);
    const std::int64_t R = keys.size(0);
    for (const Preset& p : kPresets) {
      SCOPED_TRACE(std::string(p.name) + d);
      const at::Tensor slot = load(std::string("slot_") + p.name + d), kdeq = load(std::string("kdeq_") + p.name + d),
                       vdeq32 = load(std::string("vdeq32_") + p.name + d);
      const std::int64_t kb = kernels::kvRowBytes(p.keys, D), vb = kernels::kvRowBytes(p.values, D);
      ASSERT_EQ(slot.size(1), kb + vb);
      std::vector<std::uint8_t> row(static_cast<std::size_t>(kb + vb));
      std::vector<float> back(static_cast<std::size_t>(D));
      int keyMismatch = 0, valueMismatch = 0, keyReadMismatch = 0, valueReadMismatch = 0, fullPathCodes = 0;
      for (std::int64_t r = 0; r < R; ++r) {
        const std::uint8_t* want = slot[r].const_data_ptr<std::uint8_t>();
        const bool mse = p.keys != kernels::kTypeTqKeyFp8;
        if (mse)
          kvc::encodeTqKeyRotated(kvc::tqBits(p.keys), y[r].const_data_ptr<float>(), norms[r].item<float>(), D,
                                  row.data());
        else
          kernels::quantizeKvRow(p.keys, keys[r].const_data_ptr<float>(), D, row.data());
        kernels::quantizeKvRow(p.values, values[r].const_data_ptr<float>(), D, row.data() + kb);
        keyMismatch += std::memcmp(row.data(), want, static_cast<std::size_t>(kb)) != 0;
        valueMismatch += std::memcmp(row.data() + kb, want + kb, static_cast<std::size_t>(vb)) != 0;
        // Read back from vLLM's bytes: keys as its dequant kernel (rotated basis, written as fp16), values as its
        // decode kernel (float32).
        if (mse)
          kvc::decodeTqKeyRotated(kvc::tqBits(p.keys), want, D, back.data());
        else
          kernels::dequantizeKvRow(p.keys, want, D, back.data());
        for (std::int64_t i = 0; i < D; ++i) {
          const int ours = c10::Half(back[static_cast<std::size_t>(i)]).x,
                    theirs = c10::Half(kdeq[r][i].item<float>()).x;
          keyReadMismatch += ours != theirs;
          EXPECT_LE(std::abs(ours - theirs), 1) << "row " << r << " channel " << i;  // one fp16 step at most
        }
        kernels::dequantizeKvRow(p.values, want + kb, D, back.data());
        for (std::int64_t i = 0; i < D; ++i)
          valueReadMismatch += bitsOf(back[static_cast<std::size_t>(i)]) != bitsOf(vdeq32[r][i].item<float>());
        // kvscope's whole key path (its own norm and fast transform): codes off vLLM's only where vLLM's float32 matmul
        // left a coordinate within float rounding of a midpoint.
        if (mse) {
          kernels::quantizeKvRow(p.keys, keys[r].const_data_ptr<float>(), D, row.data());
          const int b = kvc::tqBits(p.keys);
          for (std::int64_t i = 0; i < D; ++i) {
            const int ours = kvc::unpackBits(row.data(), i, b), theirs = kvc::unpackBits(want, i, b);
            if (ours == theirs) continue;
            ++fullPathCodes;
            const float yi = y[r][i].item<float>();
            const float mid = kvc::tqMidpoint(static_cast<int>(D), b, std::min(ours, theirs));
            EXPECT_LT(std::abs(yi - mid), 1e-6f) << "row " << r << " channel " << i << " y " << yi;
          }
        }
      }
      EXPECT_EQ(keyMismatch, 0);
      EXPECT_EQ(valueMismatch, 0);
      // The kernel's sum of squares runs in another order: its renormalisation may land one fp16 step away, rarely.
      EXPECT_LE(keyReadMismatch, 2);
      EXPECT_EQ(valueReadMismatch, 0);
      RecordProperty(std::string("full_path_codes_") + p.name + d, fullPathCodes);
    }
  }
}

TEST(TurboQuantParity, Int4PerTokenHeadIsVllms) {
  for (std::int64_t D : {32, 64, 128, 256}) {
    SCOPED_TRACE(D);
    const std::string d = "_d" + std::to_string(D);
    const at::Tensor x = load("int4_x" + d), signs = load("int4_signs" + d), rht = load("int4_rht" + d),
                     in = load("int4_in" + d), rows = load("int4_rows" + d);
    for (std::int64_t i = 0; i < D; ++i) EXPECT_EQ(kvc::rhtSign(static_cast<int>(i)), signs[i].item<float>()) << i;
    const std::int64_t R = x.size(0), rb = kernels::kvRowBytes(kernels::kTypeInt4PerTokenHead, D);
    ASSERT_EQ(rows.size(1), rb);
    std::vector<float> t(static_cast<std::size_t>(D));
    std::vector<std::uint8_t> row(static_cast<std::size_t>(rb));
    int transformMismatch = 0, rowMismatch = 0, fullPath = 0;
    for (std::int64_t r = 0; r < R; ++r) {
      kvc::rhtForward(x[r].const_data_ptr<float>(), D, t.data());
      transformMismatch += std::memcmp(t.data(), rht[r].const_data_ptr<float>(), static_cast<std::size_t>(D) * 4) != 0;
      // vLLM casts the transform to the model's dtype (fp16 here) before the codes: the kernel's input is int4_in.
      kvc::encodeInt4Transformed(in[r].const_data_ptr<float>(), D, row.data());
      rowMismatch += std::memcmp(row.data(), rows[r].const_data_ptr<std::uint8_t>(), static_cast<std::size_t>(rb)) != 0;
      // The layer's row for an fp16 model (transform, fp16, codes): vLLM's whole writer.
      kernels::quantizeKvRow(kernels::kTypeInt4PerTokenHeadF16, x[r].const_data_ptr<float>(), D, row.data());
      fullPath += std::memcmp(row.data(), rows[r].const_data_ptr<std::uint8_t>(), static_cast<std::size_t>(rb)) != 0;
    }
    EXPECT_EQ(transformMismatch, 0);
    EXPECT_EQ(rowMismatch, 0);
    EXPECT_EQ(fullPath, 0);
  }
}
