// Replays the fixtures recorded from the real Python packages (make_fixtures.py) through kvscope's layers.
// fp8 must be bit-exact; quanto and hqq must agree within 1e-6 absolute in fp32 (they run the same LibTorch ops, so
// in practice they are bit-exact too, and the test reports the largest difference it saw).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cache/layer.h"
#include "model/safetensors.h"
#include "tensor_helpers.h"

using namespace kvscope;
using testutil::loadTensor;

namespace {

std::vector<std::string> fixtureFiles() {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(KVSCOPE_FIXTURE_DIR, ec))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

class Parity : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST(ParityFixtures, Exist) {
  EXPECT_GE(fixtureFiles().size(), 20u) << "run parity.make_fixtures first";
}

// Replays a fixture through a layer in `mode`. Reference mode is transformers' computation: fp8 bit-exact, quanto and
// hqq within 1e-6. Fused mode returns the history dequantized from the stored form for each call: fp8 bit-exact too;
// quanto/hqq in fp32 bit-exact as well (the same float ops), in bf16/fp16 within one rounding of the dtype (the
// reference rounds `scale * code` and then `- zero` in the dtype, fused mode rounds once).
static void replay(const model::SafetensorsFile& f, cache::AttentionMode mode) {
  at::set_num_threads(1);
  const std::string spec = f.metadata().at("spec");
  const auto ops = nlohmann::json::parse(f.metadata().at("ops"));
  cache::CacheConfig cfg = cache::parseSpec(spec);
  cfg.attention = mode;
  auto layer = cache::makeLayer(cfg);
  const bool fused = mode == cache::AttentionMode::Fused;
  const bool exact = cfg.backend == cache::Backend::Fp8;
  double worst = 0.0;
  int updates = 0;
  for (const auto& op : ops) {
    const std::string kind = op[0];
    const int i = op[1];
    if (kind == "reset") {
      layer->reset();
    } else if (kind == "reorder") {
      layer->reorder(loadTensor(f, "beam." + std::to_string(i)));
    } else {
      const at::Tensor k = loadTensor(f, "in." + std::to_string(i) + ".k"),
                       v = loadTensor(f, "in." + std::to_string(i) + ".v");
      auto [ko, vo] = layer->update(k, v);
      ++updates;
      for (auto [ours, which] : {std::pair{ko, "k"}, std::pair{vo, "v"}}) {
        const at::Tensor ref = loadTensor(f, "out." + std::to_string(i) + "." + which);
        ASSERT_EQ(ours.sizes(), ref.sizes()) << spec << " op " << i << which;
        ASSERT_EQ(ours.scalar_type(), ref.scalar_type()) << spec << " op " << i << which;
        ASSERT_TRUE(at::equal(ours.isnan(), ref.isnan())) << spec << " op " << i << which << ": NaN positions differ";
        const double diff =
            (at::nan_to_num(ours.to(at::kFloat)) - at::nan_to_num(ref.to(at::kFloat))).abs().max().item<double>();
        worst = std::max(worst, diff);
        if (exact) {
          ASSERT_EQ(diff, 0.0) << spec << " op " << i << which << ": fp8 must be bit-exact";
        } else if (fused && ref.scalar_type() != at::kFloat) {
          const double mag = ref.to(at::kFloat).abs().max().item<double>();
          const double ulp = ref.scalar_type() == at::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
          ASSERT_LE(diff, 2 * ulp * std::max(mag, 1.0)) << spec << " op " << i << which;
        } else {
          ASSERT_LE(diff, 1e-6) << spec << " op " << i << which;
        }
      }
    }
  }
  std::printf("[parity] %-40s %-60s %-9s updates %3d  max|diff| %.3g\n", f.metadata().at("name").c_str(), spec.c_str(),
              fused ? "fused" : "reference", updates, worst);
}

TEST_P(Parity, ReplayMatchesReference) {
  const model::SafetensorsFile f(GetParam());
  replay(f, cache::AttentionMode::Reference);
}

TEST_P(Parity, FusedModeReadsTheSameStates) {
  const model::SafetensorsFile f(GetParam());
  replay(f, cache::AttentionMode::Fused);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity, ::testing::ValuesIn(fixtureFiles()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = std::filesystem::path(p.param).stem().string();
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
