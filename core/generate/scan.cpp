// evaluateLayerRuns: the tuner's scan runs, each resumed at its layer from the unquantized run (eval.h).
//
// A scan run quantizes one layer L; every other layer is `dynamic`, as in the reference. Below L its forwards are
// the reference's, bit for bit: the reference's residual stream entering L is the run's. So each forward (the
// prompt's chunks, then the steps) starts at L from the stream the reference recorded there. While the stream
// after L stays equal to the reference's (a layer whose first update attends over its unquantized inputs), the
// layers above see the reference's inputs and hold its states, and the forward's logits are the reference's: the
// run goes on at L alone and keeps those forwards; at the first forward that differs, the layers above take the
// reference's states of the forwards kept (the stores their attention would have made) and the run goes through
// them from then on. A thread runs a group of runs side by side, layer by layer, so that each weight product serves
// the whole group (resumeRuns).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
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

/// The most runs one thread resumes side by side (resumeRuns). In groups of 8 (four layers' keys and values), the
/// documented scan's runs read each weight about a quarter as often as one layer's two runs would; larger groups
/// hold more activations and logits at once, and 16 were slower (docs/cache-configs.md).
constexpr std::size_t kGroup = 8;

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

/// Runs' log-probabilities over a window, each resumed at its layer from the reference (the file's comment), side by
/// side: at each layer the runs at or above theirs go through it together (LlamaModel::runLayer: each gets what it
/// gets alone, bit for bit), so the weights are read once for the group.
std::vector<at::Tensor> resumeRuns(const model::LlamaModel& model, const std::vector<cache::KvCache*>& kvs,
                                   const std::vector<int>& layerOf, const Reference& ref) {
  const int layers = model.config().layers;
  const std::size_t n = kvs.size();
  const int lowest = *std::min_element(layerOf.begin(), layerOf.end());
  std::vector<std::vector<at::Tensor>> rows(n);
  std::vector<std::vector<std::size_t>> kept(n);  // forwards whose stream after the run's layer was the reference's
  std::vector<char> same(n, 1);
  for (std::size_t i = 0; i < ref.forwards.size(); ++i) {
    const RecordedForward& f = ref.forwards[i];
    std::vector<at::Tensor> h(n);  // each run's stream in this forward, while it goes on
    std::vector<char> going(n, 0);
    for (int l = lowest; l < layers; ++l) {
      std::vector<std::size_t> through;  // the runs through layer l: those starting here and those going on
      for (std::size_t r = 0; r < n; ++r) {
        if (layerOf[r] == l) {
          h[r] = f.stream[static_cast<std::size_t>(l)];
          going[r] = 1;
        }
        if (going[r]) through.push_back(r);
      }
      if (through.empty()) continue;
      std::vector<at::Tensor> hs;
      std::vector<cache::KvCache*> caches;
      for (std::size_t r : through) {
        hs.push_back(h[r]);
        caches.push_back(kvs[r]);
      }
      hs = model.runLayer(std::move(hs), caches, l, f.part.from);
      for (std::size_t j = 0; j < through.size(); ++j) {
        const std::size_t r = through[j];
        h[r] = std::move(hs[j]);
        if (layerOf[r] != l || !same[r]) continue;
        if (at::equal(h[r], f.stream[static_cast<std::size_t>(l) + 1])) {  // the reference's from here on
          kept[r].push_back(i);
          if (f.part.scored) rows[r].push_back(f.logits);
          going[r] = 0;
          continue;
        }
        // The first forward that differs: the layers above first store what the kept ones stored.
        same[r] = 0;
        for (int a = l + 1; a < layers; ++a)
          for (std::size_t k : kept[r]) {
            const auto ai = static_cast<std::size_t>(a);
            cache::Staged s = kvs[r]->layer(a).stage(ref.forwards[k].keys[ai], ref.forwards[k].values[ai]);
            if (s.finish) s.finish();
          }
      }
    }
    std::vector<at::Tensor> last;
    std::vector<std::size_t> who;
    for (std::size_t r = 0; r < n; ++r)
      if (going[r]) {
        last.push_back(std::move(h[r]));
        who.push_back(r);
      }
    if (f.part.scored && !last.empty()) {
      auto lg = model.logits(std::move(last), f.part.prompt);
      for (std::size_t j = 0; j < who.size(); ++j) rows[who[j]].push_back(lg[j][0]);
    }
    if (f.part.prompt && ref.chunkedPrompt) util::releaseFreeMemory();
  }
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (auto& r : rows) out.push_back(at::cat(r, 0).log_softmax(-1));
  return out;
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
  // A layer of a model with per-layer embeddings or shared KV (Gemma 4's E-series) reads more than the stream the
  // resumed runs start from: each run is a whole forward then.
  if (method == ScanMethod::Full || model.config().pleDim > 0 || model.config().sharesKv()) {
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
    // The runs go in rounds of `lanes` groups (resumeRuns: runs side by side, up to kGroup of them, so each weight
    // is read once for the group), each group on one thread (its own caches and tensors; the model is only read): on
    // a few cores that beats one group on all of them, which waits at every operation for the slowest thread. A
    // round is consecutive runs that resume from the same reference; its groups take equal shares of its work (the
    // layers from each run's up), so no thread waits long for another. A run's figures do not depend on the runs
    // beside it (a shard's equal the unsharded scan's). The callbacks come on the calling thread, in the runs' order.
    const std::size_t lanes = static_cast<std::size_t>(std::max(1, at::get_num_threads()));
    const int layers = model.config().layers;
    for (std::size_t first = 0; first < runs.size();) {
      std::size_t end = first + 1;
      while (end < runs.size() && end - first < lanes * kGroup && chunkOf[end] == chunkOf[first]) ++end;
      for (std::size_t ri = first; ri < end; ++ri)
        if (progress && !progress(wi, windows.size(), ri + 1, runs.size() + 1)) throw EvalCancelled();
      // The round's runs in units of one layer (its keys and values run together), the costliest first, each to
      // the group with the least work so far.
      std::vector<std::pair<std::size_t, std::size_t>> units;  // [from, to) of runs at one layer
      for (std::size_t ri = first; ri < end; ++ri)
        if (units.empty() || runs[ri].layer != runs[units.back().first].layer)
          units.push_back({ri, ri + 1});
        else
          units.back().second = ri + 1;
      auto cost = [&](const std::pair<std::size_t, std::size_t>& u) {
        return static_cast<double>(u.second - u.first) * (layers - runs[u.first].layer);
      };
      std::stable_sort(units.begin(), units.end(), [&](const auto& a, const auto& b) { return cost(a) > cost(b); });
      const std::size_t ng = std::min(lanes, units.size());
      std::vector<std::vector<std::size_t>> group(ng);
      std::vector<double> load(ng, 0);
      for (const auto& u : units) {
        const auto j = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        for (std::size_t ri = u.first; ri < u.second; ++ri) group[j].push_back(ri);
        load[j] += cost(u);
      }
      for (auto& gr : group) std::sort(gr.begin(), gr.end());
      struct Done {
        std::unique_ptr<cache::KvCache> kv;
        at::Tensor lp;
        double seconds = 0;
      };
      std::vector<Done> done(end - first);
      at::parallel_for(0, static_cast<std::int64_t>(lanes), 1, [&](std::int64_t b, std::int64_t e) {
        for (auto j = static_cast<std::size_t>(b); j < static_cast<std::size_t>(e) && j < ng; ++j) {
          const auto t0 = std::chrono::steady_clock::now();
          std::vector<cache::KvCache*> kvs;
          std::vector<int> layerOf;
          for (std::size_t ri : group[j]) {
            done[ri - first].kv = model.makeCache(runs[ri].config, quiet);
            kvs.push_back(done[ri - first].kv.get());
            layerOf.push_back(runs[ri].layer);
          }
          auto lps = resumeRuns(model, kvs, layerOf, refs.at(chunkOf[first]));
          // A run's time: its share of the group's, weighed by the layers it ran.
          const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          for (std::size_t k = 0; k < group[j].size(); ++k) {
            const std::size_t ri = group[j][k];
            done[ri - first].lp = std::move(lps[k]);
            done[ri - first].seconds = seconds * (layers - runs[ri].layer) / load[j];
          }
        }
      });
      for (std::size_t ri = first; ri < end; ++ri) {
        const Done& d = done[ri - first];
        const int layer = runs[ri].layer;
        const cache::KvCache& kv = *d.kv;
        const Reference& from = refs.at(chunkOf[ri]);
        EvalFigures& f = figs[ri + 1];
        f.seconds += d.seconds;
        detail::addWindow(f, d.lp, &*ref.scored, targets, prompt);
        if (wi == 0)  // the reference's layers, but this run's own at its layer
          for (int l = 0; l < model.config().layers; ++l)
            f.memory += l == layer ? kv.layer(l).memory().total() : from.memory[static_cast<std::size_t>(l)].total();
        const cache::OverflowTotals ov = kv.overflowTotals();
        f.overflow += ov.overflow;
        f.nonFinite += ov.nonFinite;
        if (figures) figures(wi, ri + 1, f);
      }
      first = end;
    }
  }
  return figs;
}

ScanArithmetic::ScanArithmetic(model::LlamaModel& model) : model_(model) {
  switched_ = model.activations() != model::Activations::F32;
  if (switched_) model.setActivations(model::Activations::F32);
  const std::uint64_t bytes = model.floatCopyBytes();
  if (bytes > 0 && bytes <= static_cast<std::uint64_t>(util::availableMemoryBytes()) / 2) {
    try {
      model.setFloatCopies(true);
      floatCopyBytes_ = bytes;
    } catch (const std::bad_alloc&) {  // the scan runs on the stored weights
      model.setFloatCopies(false);
    }
  }
}

ScanArithmetic::~ScanArithmetic() {
  if (floatCopyBytes_ > 0) model_.setFloatCopies(false);
  if (!switched_) return;
  try {
    model_.setActivations(model::Activations::Q8);
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory repacking; the model still computes, in float32
  }
}

}  // namespace kvscope::generate
