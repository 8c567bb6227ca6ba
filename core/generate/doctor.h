// The model doctor: in one unquantized forward over a calibration text, what is risky about quantizing this model's KV
// cache, before any scan. Per layer and side: the largest |x| and its ratio to the median channel's (outlier
// channels), the projection bias, how many values vLLM's fp8 cache with its default scale of 1.0 would push past
// e4m3's 448; for the model: the GQA ratio, the head size and which engines' rotations apply to it, the boundary
// layers; on models whose keys are fragile (sinks, head size 64), what q8_0 keys cost layer by layer. Then verdicts,
// each with its evidence and the config to try first.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
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
  /// Also measure fp8 on every layer with vLLM's unit scale and with scales calibrated on the text (DoctorReport::
  /// fp8): two teacher-forced runs and the reference's over the text, about three more forwards.
  bool fp8Kl = true;
  /// On a key-fragile model (learned attention sinks, or head size 64): measure llama.cpp's q8_0 keys on every layer
  /// (DoctorReport::keyQ8: two more forwards over the text) and, on a sink model or where that costs a mean KL of
  /// 0.001 or more, on each layer alone (a scan over the layers).
  bool keyKl = true;
  /// Scan the layers whatever q8_0 keys cost on every layer.
  bool keyLayers = false;
};

/// llama.cpp's q8_0 keys (values f16), teacher-forced over the calibration text in float32 activations: the mean KL
/// against the unquantized run with them on each layer alone, and on every layer. Measured on key-fragile models:
/// learned attention sinks (gpt-oss) or head size 64, where 8-bit keys cost several times what they cost at head size
/// 128 (on gpt-oss-20b llama.cpp's q8_0 K/V gave a median KLD of 0.055 against about 0.018:
/// TheTom/llama-cpp-turboquant #305).
struct DoctorKeyQ8 {
  std::string why;              ///< "learned attention sinks on layers 0-23 and head size 64", ...
  bool sinks = false;           ///< the model has learned attention sinks
  std::vector<double> layerKl;  ///< per layer; empty where not scanned (see DoctorOptions::keyKl)
  double allKl = std::nan("");
  std::int64_t positions = 0;
  bool measured() const { return positions > 0; }
};

/// fp8 (e4m3) on every layer over the calibration text, teacher-forced as `eval` scores it (a quarter of each window
/// as the prompt, then steps of 32): the mean KL against the unquantized run with vLLM's default scale of 1.0 and
/// with per-tensor scales calibrated on the same text (amax / 448, what `calibrate` writes), and how many of the
/// scored positions' logits were not finite. Both saturate past 448, as vLLM's cast into its cache does. NaN KLs where
/// it was not measured.
struct DoctorFp8 {
  double unitKl = std::nan(""), calibratedKl = std::nan("");
  std::int64_t positions = 0, unitNonFinite = 0, calibratedNonFinite = 0;
  bool measured() const { return positions > 0; }
  /// The share of the unit scale's KL that calibration removes: 1 - calibrated / unit (NaN without a finite one).
  double recovered() const {
    return std::isfinite(unitKl) && std::isfinite(calibratedKl) && unitKl > 0 ? 1.0 - calibratedKl / unitKl
                                                                              : std::nan("");
  }
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
  /// "outlier_channels", "bias_spikes", "fp8_overflow", "fp8_calibration", "sliding_window", "key_fragile"
  std::string kind;
  std::string side;         ///< "keys" or "values" ("keys and values": fp8_calibration)
  std::vector<int> layers;  ///< the layers it is about
  std::string text;         ///< the verdict with its evidence, one sentence
  std::string config;       ///< what to try first: a SPEC, or the command that makes it
};

struct DoctorReport {
  std::string arch;
  std::string cpuKernels;  ///< the CPU kernels' path and why (kernels::isaSummary)
  int layers = 0, heads = 0, kvHeads = 0, headDim = 0;
  /// Per layer: its head size and KV heads (Gemma 4's full layers differ), and the layer whose KV it reads (-1: its
  /// own; a shared layer's sides stay empty).
  std::vector<int> headDims, kvHeadsPerLayer, kvSources;
  std::int64_t tokens = 0;                       ///< calibration tokens
  std::vector<std::array<DoctorSide, 2>> sides;  ///< per layer: keys, values
  /// llama.cpp rotates a quantized K/V side (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl; not f16 / bf16) when the head size
  /// is a multiple of 64.
  bool llamaCppRotation = false;
  /// vLLM's TurboQuant and UltraQuant, and `mxfp4:rot=on`, need a power-of-two head size (at least 32 for MXFP4).
  bool powerOfTwoHead = false;
  std::vector<int> boundaryLayers;  ///< the first and last two (vLLM leaves them unquantized for TurboQuant)
  DoctorFp8 fp8;
  DoctorKeyQ8 keyQ8;
  std::vector<DoctorVerdict> verdicts;  ///< empty: nothing alarming
};

/// Throws Error (BadInput) naming a bad option: ratios above 1, a bias floor of at least 0, one llamacpp base config.
void checkDoctorOptions(const DoctorOptions& options);

/// Runs the model unquantized over each window (token ids; a fresh cache each) and reads its K/V states and biases.
/// Throws Error (BadInput) without a window or with a bad option. The key measurement (DoctorKeyQ8) holds the model in
/// float32 activations for its scope (generate::ScanArithmetic), then gives it back its own.
DoctorReport diagnose(model::LlamaModel& m, const std::vector<std::vector<std::int64_t>>& windows,
                      const DoctorOptions& options = {});
/// The key_fragile verdict of those figures (`base`: the llamacpp config for the other layers): on a model with sinks
/// always (the kind of model whose keys the engines' 8-bit caches are known to hurt, with its own figures), on a
/// head-size-64 model where q8_0 keys on every layer cost a mean KL of 0.001 or more; nullopt otherwise or where they
/// were not measured (the report's line still gives the figures).
std::optional<DoctorVerdict> keyFragileVerdict(const DoctorKeyQ8& k, const std::string& base);

/// The fp8_calibration verdict of fp8's figures over `layers` layers (calibrate with `text`): where the unit scale
/// gives non-finite logits that calibrated scales avoid, or calibrated scales remove at least half of a mean KL of
/// 0.001 or more (vLLM's guidance: calibrate where the uncalibrated cache recovers too little). nullopt otherwise.
std::optional<DoctorVerdict> fp8CalibrationVerdict(const DoctorFp8& f, int layers, const std::string& text);

/// The report as JSON (what `kvscope-cli doctor --json` prints).
std::string doctorJson(const DoctorReport& r);
/// fp8's figures as one sentence (without a final stop; empty where not measured): what the text and the GUI say.
std::string doctorFp8Text(const DoctorFp8& f);
/// The report as text for a terminal: the model, a table per layer, the verdicts.
std::string doctorText(const DoctorReport& r);

}  // namespace kvscope::generate
