// Absolute quantization error |x̂ - x| per (token, head, channel) over a whole run (max over the batch), for one
// layer's keys or values, against the states the model produced. Absolute, because a relative error of one value
// explodes where the value is near 0. Each update's error map (stats.h, maxAbs) is written where it quantized:
// - a token quantized for the first time gets that update's error (exact: the map compares with the original states);
// - a quanto/hqq flush re-quantizes the dequantized history: its error map covers the tokens it quantized for the
//   first time, and its drift map (coarser ranges) what it changed in the tokens quantized before; that drift is
//   added to what the token had, which bounds the error against the original states from above (triangle
//   inequality) and equals it when the drift is 0, as it usually is.
//
// A bounded summary: the map holds at most `maxCells` values (rows x heads x channels), whatever the context. A row
// covers tokensPerRow() tokens, a power of two, and holds the largest error of its tokens per head and channel; when
// the tokens outgrow the rows, the row width doubles and pairs of rows merge. Up to maxCells / (heads x channels)
// tokens every token has its own row and the map is exact; past that, a cell is the max over its row's tokens (a
// drift added to a row bounds its tokens' new errors from above). Beside the map, every token keeps its own mean
// error over heads and channels (one float per token), so a per-token colour stays exact at any length.
// Torch-free: the GUI's engine keeps one per layer and side and sends the selected layer's to the views.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/stats.h"

namespace kvscope::cache {

class ErrorHistory {
 public:
  /// 1 MiB of floats per layer and side: 32 layers' keys and values hold 64 MiB at most.
  static constexpr std::int64_t kDefaultMaxCells = std::int64_t{1} << 18;

  explicit ErrorHistory(std::int64_t maxCells = kDefaultMaxCells) : maxCells_(maxCells) {}

  std::int64_t tokens() const { return tokens_; }
  std::int64_t heads() const { return heads_; }
  std::int64_t channels() const { return channels_; }
  /// Tokens per row of the map: 1 until the tokens outgrow maxCells / (heads x channels) rows, then a power of two.
  std::int64_t tokensPerRow() const { return tokensPerRow_; }
  std::int64_t rows() const { return rowsFor(tokens_, tokensPerRow_); }
  /// [rows][heads][channels]: the largest absolute error of the row's tokens; NaN where no update quantized any.
  const std::vector<float>& values() const { return rows_; }
  /// The map coarsened to `tokensPerRow` (a power of two, at least tokensPerRow()): pairs of rows merged by max.
  std::vector<float> valuesAt(std::int64_t tokensPerRow) const;
  /// The value of the row holding `token`.
  float at(std::int64_t token, std::int64_t head, std::int64_t channel) const {
    return rows_[static_cast<std::size_t>(((token / tokensPerRow_) * heads_ + head) * channels_ + channel)];
  }
  /// [tokens]: each token's own mean absolute error over heads and channels (its finite values; a drift adds its
  /// mean); NaN where nothing quantized it.
  const std::vector<float>& tokenMeans() const { return tokenMean_; }
  std::int64_t maxCells() const { return maxCells_; }

  /// Records what the update described by `s` quantized: its error map, and the drift of a flush (nothing when it
  /// quantized nothing). A change of head count or head dim starts the history again; a new sequence in the same
  /// cache needs reset() first.
  void add(const TensorStats& s);
  /// Forgets tokens from position n on (a crop, or a new prompt after it). A row cut in two keeps its max: an upper
  /// bound for the tokens left in it.
  void truncate(std::int64_t n);
  void reset();

  static std::int64_t rowsFor(std::int64_t tokens, std::int64_t perRow) { return (tokens + perRow - 1) / perRow; }
  /// `rows` [rowCount][cells] with pairs of rows merged by max, `times` times (each halves the rows, rounding up).
  static std::vector<float> merged(std::vector<float> rows, std::int64_t cells, std::int64_t rowCount, int times);

 private:
  void add(const ErrorMap& m);
  void grow(std::int64_t tokens);  // room for `tokens`, widening the rows while they would exceed the budget
  std::int64_t rowCapacity() const;

  std::int64_t maxCells_;
  std::int64_t tokens_ = 0, heads_ = 0, channels_ = 0, tokensPerRow_ = 1;
  std::vector<float> rows_;
  std::vector<float> tokenMean_;  // over the finite cells of each map that wrote the token
  std::vector<bool> seen_;        // a map wrote the token (its next one is a drift)
};

}  // namespace kvscope::cache
