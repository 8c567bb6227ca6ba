// Shared KV (Gemma 4's last layers, KvCache::setSharedKv): a shared layer stores nothing and its queries attend over
// exactly the keys and values its source layer read in the same step, in both modes, with the source's window, for
// every backend (quanto and hqq re-quantize only after the last reader); the links are checked, and beams, crops and
// the memory views skip the layer that holds nothing.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "tensor_helpers.h"
#include "test_helpers.h"

using namespace kvscope;
using namespace kvscope::cache;

namespace {

using testutil::drawn;

CacheConfig inMode(const std::string& spec, AttentionMode m) {
  CacheConfig c = parseSpec(spec);
  c.attention = m;
  return c;
}

struct Case {
  std::string spec;
  AttentionMode mode;
  std::int64_t window;
};

class SharedKv : public ::testing::TestWithParam<Case> {};

// Steps of 20, 1, 1, ... tokens: layer 2 reads layer 0's KV. A twin cache without sharing answers the shared layer's
// queries by running them through layer 0 itself, on a copy fed the same states: the same output, bit for bit.
TEST_P(SharedKv, ReadsWhatItsSourceRead) {
  const Case& p = GetParam();
  const std::int64_t B = 2, Hq = 4, Hkv = 2, D = 64;
  KvCache shared(inMode(p.spec, p.mode), 3), twin(inMode(p.spec, p.mode), 3);
  shared.setSharedKv({-1, -1, 0});
  if (p.window > 0) {
    shared.setWindows({p.window, 0, p.window});
    twin.setWindows({p.window, 0, p.window});
  }
  std::int64_t seed = 1;
  for (int step = 0; step < 40; ++step) {
    const std::int64_t T = step == 0 ? 20 : 1;
    const at::Tensor k = drawn(seed++, B, Hkv, T, D), v = drawn(seed++, B, Hkv, T, D);
    const at::Tensor q0 = drawn(seed++, B, Hq, T, D), q2 = drawn(seed++, B, Hq, T, D);
    const at::Tensor a0 = shared.attend(0, q0, k, v);
    shared.attend(1, q0, k, v);
    const at::Tensor a2 = shared.attendShared(2, q2);
    // The twin: layer 0 attends q2 (the same states stored the same way), layer 2 unused.
    const at::Tensor t2 = twin.attend(0, q2, k, v);
    ASSERT_TRUE(at::equal(a2, t2)) << p.spec << " step " << step << ": " << (a2 - t2).abs().max().item<double>();
    EXPECT_FALSE(shared.layer(0).keeps()) << "the last reader releases the source";
    EXPECT_EQ(a0.sizes(), a2.sizes());
    if (step == 10) {  // a beam reorder reaches the source, not the shared layer
      const at::Tensor idx = at::tensor(std::vector<std::int64_t>{1, 0}, at::kLong);
      shared.reorder(idx);
      twin.reorder(idx);
    }
  }
  EXPECT_EQ(shared.layer(2).seqLength(), 0);
  EXPECT_EQ(shared.memory()[2].total().stored(), 0u);
  EXPECT_EQ(shared.kvSource(2), 0);
  EXPECT_EQ(shared.kvSource(1), 1);
  const CacheSnapshot snap = shared.snapshot();
  EXPECT_EQ(snap.kvSources, (std::vector<int>{-1, -1, 0}));
}

INSTANTIATE_TEST_SUITE_P(Backends, SharedKv,
                         ::testing::Values(Case{"dynamic", AttentionMode::Reference, 0},
                                           Case{"dynamic", AttentionMode::Fused, 0},
                                           Case{"dynamic", AttentionMode::Fused, 8},
                                           Case{"fp8:overflow=saturate", AttentionMode::Fused, 0},
                                           Case{"quanto:nbits=4,residual_length=8", AttentionMode::Reference, 0},
                                           Case{"quanto:nbits=4,residual_length=8", AttentionMode::Fused, 0},
                                           Case{"hqq:nbits=4,residual_length=8", AttentionMode::Fused, 0},
                                           Case{"llamacpp:type_k=q8_0,type_v=q4_0", AttentionMode::Fused, 8}),
                         [](const auto& i) {
                           std::string n = i.param.spec.substr(0, i.param.spec.find(':'));
                           return n + (i.param.mode == AttentionMode::Fused ? "_fused" : "_reference") +
                                  (i.param.window > 0 ? "_window" : "") + "_" + std::to_string(i.index);
                         });

TEST(SharedKvLinks, BadLinksAndMisuseAreRefused) {
  KvCache c(parseSpec("dynamic"), 4);
  EXPECT_THROW(c.setSharedKv({-1, -1}), ConfigError);         // one entry per layer
  EXPECT_THROW(c.setSharedKv({-1, 2, -1, -1}), ConfigError);  // a source must come earlier
  EXPECT_THROW(c.setSharedKv({-1, 0, 1, -1}), ConfigError);   // and have a cache of its own
  c.setSharedKv({-1, -1, 0, 1});
  const at::Tensor k = drawn(1, 1, 2, 4, 32), q = drawn(2, 1, 2, 4, 32);
  EXPECT_THROW(c.attend(2, q, k, k), CacheError);  // a shared layer stores nothing
  EXPECT_THROW(c.update(3, k, k), CacheError);
  EXPECT_THROW(c.attendShared(1, q), CacheError);  // layer 1 has its own
  c.attend(0, q, k, k);
  EXPECT_THROW(c.attendShared(3, q), CacheError);                      // layer 1 has not attended in this step
  EXPECT_THROW(c.attendShared(2, drawn(3, 1, 3, 4, 32)), CacheError);  // 3 query heads over 2 KV heads
  EXPECT_NO_THROW(c.attendShared(2, q));
  c.crop(2);  // the shared layers hold nothing to crop
  EXPECT_EQ(c.seqLength(), 2);
}

}  // namespace
