// The model doctor: in one unquantized forward over a calibration text, what is risky about quantizing this model's KV
// cache, before any scan. Per layer and side: the largest |x| and its ratio to the median channel's (outlier
// channels), the projection bias, how many values vLLM's fp8 cache with its default scale of 1.0 would push past
// e4m3's 448; for the model: the GQA ratio, the head size and which engines' rotations apply to it, the boundary
// layers. Then verdicts, each with its evidence and the config to try first.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::model {
class LlamaModel;
}

namespace kvscope::generate {

struct DoctorOptions {
  /// A side's largest channel this many times the median channel's max |x|: an outlier channel.
  double outlierRatio = 30.0;
  /// A layer's largest |bias| this many times the median layer's (and at least `biasFloor`): a bias spike.
  double biasRatio = 10.0;
  double biasFloor = 1.0;
  /// The 4-bit config the verdicts' configs keep for the layers they do not name (a `llamacpp` SPEC).
  std::string base = "llamacpp:type_k=q4_0,type_v=q4_0";
  /// The calibration text's path, for the calibrate command an fp8 overflow suggests.
  std::string text = "TEXT";
};

/// One layer's keys (after RoPE, as the cache stores them) or values over the calibration text.
struct DoctorSide {
  float amax = 0.0f;                          ///< max |x|
  float medianChannel = 0.0f;                 ///< the median over (head, channel) of each channel's max |x|
  double outlierRatio = 0.0;                  ///< amax / medianChannel
  int outlierHead = -1, outlierChannel = -1;  ///< where amax is
  std::int64_t values = 0;                    ///< values seen
  std::int64_t overUnitScale = 0;             ///< |x| > 448: past e4m3 with vLLM's default scale of 1.0
  bool hasBias = false;                       ///< the projection has a bias (Qwen2's k_proj and v_proj)
  float biasMax = 0.0f;                       ///< max |bias|
  int biasChannel = -1;                       ///< where it is (head * head_dim + channel)
};

struct DoctorVerdict {
  std::string kind;         ///< "outlier_channels", "bias_spikes", "fp8_overflow"
  std::string side;         ///< "keys" or "values"
  std::vector<int> layers;  ///< the layers it is about
  std::string text;         ///< the verdict with its evidence, one sentence
  std::string config;       ///< what to try first: a SPEC, or the command that makes it
};

struct DoctorReport {
  std::string arch;
  int layers = 0, heads = 0, kvHeads = 0, headDim = 0;
  std::int64_t tokens = 0;                       ///< calibration tokens
  std::vector<std::array<DoctorSide, 2>> sides;  ///< per layer: keys, values
  /// llama.cpp rotates a quantized K/V side (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl; not f16 / bf16) when the head size
  /// is a multiple of 64.
  bool llamaCppRotation = false;
  /// vLLM's TurboQuant and UltraQuant, and `mxfp4:rot=on`, need a power-of-two head size (at least 32 for MXFP4).
  bool powerOfTwoHead = false;
  std::vector<int> boundaryLayers;      ///< the first and last two (vLLM leaves them unquantized for TurboQuant)
  std::vector<DoctorVerdict> verdicts;  ///< empty: nothing alarming
};

/// Throws Error (BadInput) naming a bad option: ratios above 1, a bias floor of at least 0, one llamacpp base config.
void checkDoctorOptions(const DoctorOptions& options);

/// Runs the model unquantized over each window (token ids; a fresh cache each) and reads its K/V states and biases.
/// Throws Error (BadInput) without a window or with a bad option.
DoctorReport diagnose(const model::LlamaModel& m, const std::vector<std::vector<std::int64_t>>& windows,
                      const DoctorOptions& options = {});

/// The report as JSON (what `kvscope-cli doctor --json` prints).
std::string doctorJson(const DoctorReport& r);
/// The report as text for a terminal: the model, a table per layer, the verdicts.
std::string doctorText(const DoctorReport& r);

}  // namespace kvscope::generate
