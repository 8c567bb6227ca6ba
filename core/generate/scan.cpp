// evaluateLayerRuns: the tuner's scan runs, each resumed at its layer from the unquantized run (eval.h).
//
// A scan run quantizes one layer L; every other layer is `dynamic`, as in the reference. Below L its forwards are
// the reference's, bit for bit: the reference's residual stream entering L is the run's. So each forward (the
// prompt's chunks, then the steps) starts at L from the stream the reference recorded there. While the stream
// after L stays equal to the reference's (a layer whose first update attends over its unquantized inputs), the
// layers above see the reference's inputs and hold its states, and the forward's logits are the reference's: the
// run goes on at L alone and keeps those forwards; at the first forward that differs, the layers above take the
// reference's states of the forwards kept (the stores their attention would have made) and the run goes through
// them from then on.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <chrono>
#include <map>
#include <optional>

#include "cache/kv_cache.h"
#include "generate/detail/eval_window.h"
#include "generate/eval.h"
#include "generate/generate.h"
#include "model/llama.h"
#include "util/error.h"
#include "util/process_memory.h"

namespace kvscope::generate {

namespace {

/// One forward of a window (`part`) as the reference ran it: the residual stream entering each layer and after the
/// last (stream[l], l = 0 .. layers), each layer's keys and values as it stored them, and the logits the window
/// scores (where part.scored: the prompt's last position, or every position of a step).
struct RecordedForward {
  detail::WindowForward part;
  std::vector<at::Tensor> stream, keys, values;
  at::Tensor logits;
};

/// The unquantized run of a window with its forwards recorded, layer by layer (the same arithmetic as forward()).
struct Reference {
  std::vector<RecordedForward> forwards;
  bool chunkedPrompt = false;
  std::vector<cache::LayerMemory> memory;
  cache::OverflowTotals overflow;
  std::optional<detail::WindowReference> scored;  ///< its log-probabilities [scored, vocab], probabilities, top-1
};

Reference recordReference(const model::LlamaModel& model, const std::vector<std::int64_t>& w, std::size_t prompt,
                          std::int64_t chunk, std::size_t step, const cache::StatsOptions& quiet) {
  Reference r;
  const int layers = model.config().layers;
  auto kv = model.makeCache(cache::parseSpec("dynamic"), quiet);
  const auto plan = detail::windowForwards(w.size(), prompt, chunk, step);
  r.chunkedPrompt = detail::chunkedPrompt(plan);
  std::vector<at::Tensor> rows;
  for (const detail::WindowForward& p : plan) {
    RecordedForward f;
    f.part = p;
    f.stream.reserve(static_cast<std::size_t>(layers) + 1);
    f.keys.resize(static_cast<std::size_t>(layers));
    f.values.resize(static_cast<std::size_t>(layers));
    f.stream.push_back(
        model.embed(model::idsTensor(w, static_cast<std::size_t>(p.from), static_cast<std::size_t>(p.n))));
    for (int l = 0; l < layers; ++l) {
      const auto li = static_cast<std::size_t>(l);
      f.stream.push_back(
          model.runLayers(f.stream.back(), *kv, l, l + 1, p.from, [&](int, const char* name, const at::Tensor& t) {
            if (name[0] == 'k' && name[1] == '\0') f.keys[li] = t.contiguous();
            if (name[0] == 'v' && name[1] == '\0') f.values[li] = t.contiguous();
          }));
    }
    if (p.scored) {
      f.logits = model.logits(f.stream.back(), p.prompt)[0];
      rows.push_back(f.logits);
    }
    if (p.prompt && r.chunkedPrompt) util::releaseFreeMemory();  // as evaluate() does
    r.forwards.push_back(std::move(f));
  }
  r.memory = kv->memory();
  r.overflow = kv->overflowTotals();
  r.scored.emplace(at::cat(rows, 0).log_softmax(-1));
  return r;
}

/// A run's log-probabilities over a window, resumed at its layer from the reference (the file's comment).
at::Tensor resumeRun(const model::LlamaModel& model, cache::KvCache& kv, int layer, const Reference& ref) {
  const int layers = model.config().layers;
  std::vector<at::Tensor> rows;
  std::vector<std::size_t> kept;  // forwards whose stream after `layer` was the reference's
  bool same = true;
  for (std::size_t i = 0; i < ref.forwards.size(); ++i) {
    const RecordedForward& f = ref.forwards[i];
    at::Tensor h = model.runLayers(f.stream[static_cast<std::size_t>(layer)], kv, layer, layer + 1, f.part.from);
    if (same && at::equal(h, f.stream[static_cast<std::size_t>(layer) + 1])) {
      kept.push_back(i);
      if (f.part.scored) rows.push_back(f.logits);
      continue;
    }
    if (same) {  // the first forward that differs: the layers above first store what the kept ones stored
      same = false;
      for (int l = layer + 1; l < layers; ++l)
        for (std::size_t k : kept) {
          const auto li = static_cast<std::size_t>(l);
          cache::Staged s = kv.layer(l).stage(ref.forwards[k].keys[li], ref.forwards[k].values[li]);
          if (s.finish) s.finish();
        }
    }
    h = model.runLayers(h, kv, layer + 1, layers, f.part.from);
    if (f.part.scored) rows.push_back(model.logits(h, f.part.prompt)[0]);
    if (f.part.prompt && ref.chunkedPrompt) util::releaseFreeMemory();
  }
  return at::cat(rows, 0).log_softmax(-1);
}

}  // namespace

std::vector<EvalFigures> evaluateLayerRuns(const model::LlamaModel& model,
                                           const std::vector<std::vector<std::int64_t>>& windows,
                                           const std::vector<LayerRun>& runs, const EvalOptions& o,
                                           const EvalProgress& progress, const EvalFiguresFn& figures,
                                           ScanMethod method) {
  for (const LayerRun& r : runs)
    if (r.layer < 0 || r.layer >= model.config().layers)
      throw cache::ConfigError(
          "layers", fmt::format("scan run of layer {}: the model has layers 0-{}", r.layer, model.config().layers - 1));
  if (method == ScanMethod::Full) {
    std::vector<cache::CacheConfig> cfgs;
    cfgs.reserve(runs.size());
    for (const LayerRun& r : runs) cfgs.push_back(r.config);
    return evaluate(model, windows, cfgs, o, progress, figures);
  }
  const std::size_t prompt = detail::evalPrompt(windows, o);
  const util::HeapReuse reuse;  // every run allocates the same buffers again
  for (const auto& w : windows) model.checkTokenIds(model::idsTensor(w, 0, w.size()));  // as forward() would
  const auto step = static_cast<std::size_t>(o.step);
  cache::StatsOptions quiet;
  quiet.enabled = false;
  // Each run's prompt chunk (as evaluate() picks it, from its cache; making the caches checks their rules against
  // the model before any work): a run whose chunk is not the reference's resumes from a reference in its chunks.
  const auto dynamicKv = model.makeCache(cache::parseSpec("dynamic"), quiet);
  const std::int64_t refChunk = prefillChunkFor(*dynamicKv);
  std::vector<std::int64_t> chunkOf;
  chunkOf.reserve(runs.size());
  for (const LayerRun& r : runs) chunkOf.push_back(prefillChunkFor(*model.makeCache(r.config, quiet)));
  std::vector<EvalFigures> figs(runs.size() + 1);
  figs[0].spec = "dynamic (reference)";
  for (std::size_t i = 0; i < runs.size(); ++i) figs[i + 1].spec = cache::toSpec(runs[i].config);
  for (std::size_t wi = 0; wi < windows.size(); ++wi) {
    const auto& w = windows[wi];
    if (w.size() <= prompt) continue;  // a short last window: nothing to score after the prompt
    const at::Tensor targets = detail::windowTargets(model, w, prompt);
    if (progress && !progress(wi, windows.size(), 0, runs.size() + 1)) throw EvalCancelled();
    std::map<std::int64_t, Reference> refs;
    const auto c0 = std::chrono::steady_clock::now();
    const Reference& ref =
        refs.emplace(refChunk, recordReference(model, w, prompt, refChunk, step, quiet)).first->second;
    EvalFigures& f0 = figs[0];
    f0.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    detail::addWindow(f0, ref.scored->logProbs, nullptr, targets, prompt);
    if (wi == 0)
      for (const auto& m : ref.memory) f0.memory += m.total();
    f0.overflow += ref.overflow.overflow;
    f0.nonFinite += ref.overflow.nonFinite;
    if (figures) figures(wi, 0, f0);
    for (std::size_t ri = 0; ri < runs.size(); ++ri)  // what the runs resume from, before they share the cores
      if (refs.find(chunkOf[ri]) == refs.end())
        refs.emplace(chunkOf[ri], recordReference(model, w, prompt, chunkOf[ri], step, quiet));
    // The runs go `lanes` at a time, each on one thread (its own cache and tensors; the model is only read): on a
    // few cores that beats one run on all of them, which waits at every operation for the slowest thread. Every run
    // takes one thread whatever its group, so a run's figures do not depend on the runs beside it (a shard's equal
    // the unsharded scan's). The callbacks come on the calling thread, in order.
    const std::size_t lanes = static_cast<std::size_t>(std::max(1, at::get_num_threads()));
    for (std::size_t g = 0; g < runs.size(); g += lanes) {
      const std::size_t n = std::min(lanes, runs.size() - g);
      for (std::size_t ri = g; ri < g + n; ++ri)
        if (progress && !progress(wi, windows.size(), ri + 1, runs.size() + 1)) throw EvalCancelled();
      struct Done {
        std::unique_ptr<cache::KvCache> kv;
        at::Tensor lp;
        double seconds = 0;
      };
      std::vector<Done> done(n);
      at::parallel_for(0, static_cast<std::int64_t>(lanes), 1, [&](std::int64_t b, std::int64_t e) {
        for (auto j = static_cast<std::size_t>(b); j < static_cast<std::size_t>(e) && j < n; ++j) {
          const auto t0 = std::chrono::steady_clock::now();
          const LayerRun& r = runs[g + j];
          done[j].kv = model.makeCache(r.config, quiet);
          done[j].lp = resumeRun(model, *done[j].kv, r.layer, refs.at(chunkOf[g + j]));
          done[j].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
      });
      for (std::size_t j = 0; j < n; ++j) {
        const std::size_t ri = g + j;
        const int layer = runs[ri].layer;
        const cache::KvCache& kv = *done[j].kv;
        const Reference& from = refs.at(chunkOf[ri]);
        EvalFigures& f = figs[ri + 1];
        f.seconds += done[j].seconds;
        detail::addWindow(f, done[j].lp, &*ref.scored, targets, prompt);
        if (wi == 0)  // the reference's layers, but this run's own at its layer
          for (int l = 0; l < model.config().layers; ++l)
            f.memory += l == layer ? kv.layer(l).memory().total() : from.memory[static_cast<std::size_t>(l)].total();
        const cache::OverflowTotals ov = kv.overflowTotals();
        f.overflow += ov.overflow;
        f.nonFinite += ov.nonFinite;
        if (figures) figures(wi, ri + 1, f);
      }
    }
  }
  return figs;
}

ScanArithmetic::ScanArithmetic(model::LlamaModel& model) : model_(model) {
  switched_ = model.activations() != model::Activations::F32;
  if (switched_) model.setActivations(model::Activations::F32);
}

ScanArithmetic::~ScanArithmetic() {
  if (!switched_) return;
  try {
    model_.setActivations(model::Activations::Q8);
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory repacking; the model still computes, in float32
  }
}

}  // namespace kvscope::generate
