// The compare dock's "Tuner" tab: candidate configs scanned on each layer's keys and values alone (the engine runs
// the scan), the per-layer KL as bars (a click selects the layer everywhere), each target's Pareto front of KV bytes
// against predicted mean KL (a click on a point loads that assignment into the form), and the pick under a KL budget
// with what its target takes. The fronts are cache::paretoFront on the scan's plain numbers, as `kvscope-cli tune`.
#pragma once

#include <QWidget>
#include <functional>
#include <optional>

#include "snapshots.h"

class QComboBox;
class QCustomPlot;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;

namespace kvscope::ui {

class TunePage : public QWidget {
  Q_OBJECT
 public:
  explicit TunePage(QWidget* parent = nullptr);
  /// A scan request for the page's text, windows and candidates. Throws cache::ConfigError for a bad candidate.
  TuneRequest request() const;
  void showStarted(const TuneRequest& r);
  void showResult(const TuneResultView& result);
  void showFailed(const QString& message);
  /// Whether Scan can start one (a model loaded, the engine idle).
  void setStartEnabled(bool on);
  /// The shown scan (nullopt before the first).
  const std::optional<TuneResultView>& result() const { return result_; }
  /// The front point `index` of `target` (by bytes ascending) as a config: what a click on it loads.
  std::optional<cache::CacheConfig> frontConfig(cache::TuneTarget target, int index) const;
  /// Marks the selected layer on the bars.
  void setSelectedLayer(int layer);
  /// The fronts' other x axis: the tokens a config fits under the Capacity tab's settings (nullopt: the engine cannot
  /// store it). Redrawn when they change (refreshCapacity).
  void setCapacity(std::function<std::optional<double>(const cache::CacheConfig&)> fits);
  void refreshCapacity();

 Q_SIGNALS:
  void scanClicked();
  void layerClicked(int layer);
  /// A front point or the pick was chosen: load it into the form.
  void configChosen(const kvscope::cache::CacheConfig& config);
  void failed(const QString& message);

 private:
  void redraw();
  void pickClicked();
  void saveScan();

  QPushButton* scan_;
  QLineEdit* text_;
  QLineEdit* candidates_;
  QSpinBox* ctx_;
  QSpinBox* windows_;
  QSpinBox* context_;  ///< price the fronts at this many tokens of context (0: as the scan held them)
  QDoubleSpinBox* budget_;
  QComboBox* target_;
  QComboBox* shown_;  ///< the candidate whose per-layer KL the bars show
  QComboBox* axis_;   ///< the fronts' x: KV MiB, or the tokens that fit
  std::function<std::optional<double>(const cache::CacheConfig&)> fits_;
  /// A front point's x on the chosen axis; nullopt where the Capacity tab's engine cannot store it.
  std::optional<double> frontX(const cache::Assignment& a) const;
  QCustomPlot* layers_;
  QCustomPlot* front_;
  QLabel* summary_;
  QLabel* pick_;
  /// The shown scan's fronts, in cache::allTargets() order: computed once per scan, not per click or redraw.
  const std::vector<cache::Assignment>& front(cache::TuneTarget t) const;
  std::optional<TuneResultView> result_;
  std::vector<std::vector<cache::Assignment>> fronts_;
  cache::Scan solved_;  ///< what the fronts are of: the scan, or its candidates scanned whole while it goes
  int selectedLayer_ = 0;
};

}  // namespace kvscope::ui
