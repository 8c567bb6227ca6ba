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

/// The window's tokens after the prompt (the ones scored), on the model's device.
at::Tensor windowTargets(const model::LlamaModel& model, const std::vector<std::int64_t>& w, std::size_t prompt);

/// Adds a window to `f`: lp, the log-probabilities [scored, vocab] of its scored positions, against the targets; ref,
/// the reference's (undefined for the reference itself), for the KL and the top-1 agreement.
void addWindow(EvalFigures& f, const at::Tensor& lp, const at::Tensor& ref, const at::Tensor& targets,
               std::size_t prompt);

}  // namespace kvscope::generate::detail
