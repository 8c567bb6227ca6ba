// Plain value types describing what a cache layer holds and did: memory breakdown and per-update statistics.
// No torch: the GUI and the CLI receive these as snapshots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::cache {

/// Bytes held for the keys or the values of one layer.
struct TensorMemory {
  std::int64_t payload = 0;         ///< quantized states in use (fp8 codes, packed ints) or full precision (dynamic)
  std::int64_t metadata = 0;        ///< scales and zero-points
  std::int64_t residual = 0;        ///< full-precision residual window (quanto, hqq)
  std::int64_t transient = 0;       ///< dequantized working buffer that attention reads (kept between steps)
  std::int64_t reserved = 0;        ///< allocated growth room not in use yet
  std::int64_t unquantized = 0;     ///< the same tokens held at the input dtype (what `dynamic` would use)
  std::vector<std::int64_t> tiers;  ///< tiers by age (`tiers=`): stored bytes per tier, newest first; else empty
  std::int64_t held() const { return payload + metadata + residual + transient + reserved; }
  /// The cache proper, without the working buffer and growth room: what the quantization saves against.
  std::int64_t stored() const { return payload + metadata + residual; }
  /// The same tokens unquantized ÷ stored: what the quantization saves (0 when nothing is stored).
  double compressionRatio() const { return stored() ? double(unquantized) / double(stored()) : 0.0; }
  TensorMemory& operator+=(const TensorMemory& o) {
    payload += o.payload;
    metadata += o.metadata;
    residual += o.residual;
    transient += o.transient;
    reserved += o.reserved;
    unquantized += o.unquantized;
    if (tiers.size() < o.tiers.size()) tiers.resize(o.tiers.size(), 0);
    for (std::size_t i = 0; i < o.tiers.size(); ++i) tiers[i] += o.tiers[i];
    return *this;
  }
};

struct LayerMemory {
  TensorMemory keys, values;
  TensorMemory total() const {
    TensorMemory t = keys;
    t += values;
    return t;
  }
};

/// Quantization error of what an update just quantized, per (head, token range, channel).
struct ErrorMap {
  std::int64_t heads = 0, ranges = 0, channels = 0;
  std::int64_t tokenStart = 0;   ///< absolute position of the first token of range 0
  std::int64_t tokenBin = 0;     ///< tokens per range (the last one may hold fewer)
  std::int64_t tokens = 0;       ///< tokens the map covers: [tokenStart, tokenStart + tokens)
  std::vector<float> relL2;      ///< [heads][ranges][channels]: ||xq - x|| / ||x|| over batch and the range's tokens
  std::vector<float> maxAbs;     ///< [heads][ranges][channels]: max |xq - x|
  std::vector<float> headRelL2;  ///< [heads]: ||xq - x|| / ||x|| over batch, all tokens and all channels
  bool empty() const { return heads == 0; }
  float rel(std::int64_t h, std::int64_t r, std::int64_t c) const { return relL2[(h * ranges + r) * channels + c]; }
  float max(std::int64_t h, std::int64_t r, std::int64_t c) const { return maxAbs[(h * ranges + r) * channels + c]; }
};

struct TensorStats {
  bool quantized = false;            ///< this update quantized something
  std::int64_t quantizedTokens = 0;  ///< how many tokens it quantized (a flush re-quantizes the whole history)
  std::vector<float> amaxPerHead;    ///< max |x| of this update's input, per KV head
  std::vector<float> scales;         ///< fp8: the scale in force, shape `scaleShape` ([1], [heads] or [heads, dim])
  std::vector<std::int64_t> scaleShape;
  std::int64_t overflow = 0;       ///< fp8: values of this update with |x / scale| > format max
  std::int64_t nonFinite = 0;      ///< fp8: codes written this update that are NaN/inf
  std::int64_t overflowTotal = 0;  ///< since the last reset
  std::int64_t nonFiniteTotal = 0;
  std::int64_t recalibrations = 0;  ///< fp8 overflow=recalibrate: times the scale grew
  float formatMax = 0.0f;           ///< fp8: the format's largest finite value (448 e4m3fn, 57344 e5m2); 0 otherwise
  /// Of the tokens this update quantized for the first time, against the states the model produced (empty when it
  /// quantized nothing).
  ErrorMap error;
  /// quanto/hqq flush: what re-quantizing the history changed in the tokens quantized before (new minus old
  /// dequantized values), in at most StatsOptions::driftRanges ranges: its size does not grow with the context.
  ErrorMap drift;
  /// The block-row formats (llamacpp, vllm, mxfp4), over the rows stored since the last reset, counted when the
  /// statistics are read (kernels/cpu/kv_blocks.h, kvRowHistogram; a row moved out of a tier before that is not):
  /// scaleHistogram[e] counts the stored scales whose float32 exponent field is e (the binade [2^(e-127), 2^(e-126));
  /// 0: zero or subnormal), what `scaleKind` names (NVFP4's E4M3 block scales, MXFP4's E8M0, TurboQuant's key norms,
  /// ...); codeHistogram[c] counts the stored 3- or 4-bit codes c (TurboQuant's centroid occupancy, E2M1 codes, int4).
  /// Empty for the other layers.
  std::vector<std::int64_t> scaleHistogram, codeHistogram;
  std::string scaleKind;
};

struct LayerStats {
  std::int64_t updates = 0;
  TensorStats keys, values;
  /// For each current batch row, the row of the quantized store it reads (identity unless a beam reorder is pending
  /// on the quantized states; see ResidualQuantizedLayer).
  std::vector<std::int64_t> storeRows;
  std::int64_t overflowTotal() const { return keys.overflowTotal + values.overflowTotal; }
  std::int64_t nonFiniteTotal() const { return keys.nonFiniteTotal + values.nonFiniteTotal; }
};

/// Everything a view needs about a whole cache at one moment: copied out, immutable, no tensors.
/// Overflow counters summed over layers (LayerStats' totals).
struct OverflowTotals {
  std::int64_t overflow = 0, nonFinite = 0;
  OverflowTotals& operator+=(const LayerStats& st) {
    overflow += st.overflowTotal();
    nonFinite += st.nonFiniteTotal();
    return *this;
  }
  OverflowTotals& operator+=(const OverflowTotals& o) {
    overflow += o.overflow;
    nonFinite += o.nonFinite;
    return *this;
  }
};

struct CacheSnapshot {
  std::int64_t seqLength = 0;
  std::vector<LayerMemory> memory;  ///< per layer
  std::vector<LayerStats> stats;    ///< per layer, of the latest update
  /// Per layer: its sliding window (0: full attention) and the oldest tokens it has dropped (KvCache::setWindows);
  /// empty where the cache has no windows.
  std::vector<std::int64_t> windows, dropped;
  /// Per layer: the layer whose KV it reads (-1: its own; KvCache::setSharedKv); empty where no layer shares.
  std::vector<int> kvSources;
  TensorMemory total() const {
    TensorMemory t;
    for (const auto& m : memory) t += m.total();
    return t;
  }
  /// Values beyond the fp8 scale and NaN/inf codes stored, over every layer since the last reset.
  OverflowTotals overflowTotals() const {
    OverflowTotals o;
    for (const auto& st : stats) o += st;
    return o;
  }
};

struct StatsOptions {
  bool enabled = true;            ///< amax and error maps; overflow counters are always kept
  std::int64_t tokenBin = 16;     ///< tokens per range of the error maps
  std::int64_t driftRanges = 64;  ///< at most this many ranges in a drift map (its ranges widen with the history)
};

}  // namespace kvscope::cache
