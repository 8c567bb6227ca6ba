// What evaluate() and evaluateLayerRuns() share: the checks of their windows and options, and how a config's figures
// take one window's log-probabilities. Internal to generate/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "generate/eval.h"

namespace kvscope::model {
class LlamaModel;
}

namespace kvscope::generate::detail {

/// The prompt length of every window (the options' clamped to the first window); throws Error (BadInput) for windows
/// of fewer than 2 tokens or a step below 1.
std::size_t evalPrompt(const std::vector<std::vector<std::int64_t>>& windows, const EvalOptions& o);

/// One forward of a window: its positions [from, from + n), and whether they are the prompt's (a prompt forward scores
/// only its last position, and only the prompt's last forward is scored).
struct WindowForward {
  std::int64_t from = 0, n = 0;
  bool prompt = false, scored = true;
};
/// How a window of `size` tokens goes through the model: the prompt in chunks of `chunk` (0: one forward; a model's
/// prefill chunking, generate::prefillChunkFor), then steps of `step` tokens up to the window's last token.
std::vector<WindowForward> windowForwards(std::size_t size, std::size_t prompt, std::int64_t chunk, std::size_t step);
/// Whether the plan cuts the prompt in chunks (which give their buffers' pages back between them, as forward() does).
inline bool chunkedPrompt(const std::vector<WindowForward>& plan) {
  return plan.size() > 1 && plan[1].prompt;
}

/// The window's tokens after the prompt (the ones scored), on the model's device.
at::Tensor windowTargets(const model::LlamaModel& model, const std::vector<std::int64_t>& w, std::size_t prompt);

/// The unquantized run's log-probabilities [scored, vocab] over a window, with what every config's KL and top-1
/// agreement read of them: computed once a window, not once a config.
struct WindowReference {
  at::Tensor logProbs, probs, top1;  ///< probs = logProbs.exp(), top1 = logProbs.argmax(-1)
  explicit WindowReference(const at::Tensor& lp);
};

/// Adds a window to `f`: lp, the log-probabilities [scored, vocab] of its scored positions, against the targets; ref,
/// the reference's (null for the reference itself), for the KL and the top-1 agreement.
void addWindow(EvalFigures& f, const at::Tensor& lp, const WindowReference* ref, const at::Tensor& targets,
               std::size_t prompt);

}  // namespace kvscope::generate::detail
