// The compare dock's "Long context" tab: long-context probes (passkey, RULER's needles among confusable keys,
// variable tracking, aggregation, a JSON tool call) of the runs' configs, each answered greedily through the
// unquantized cache and each config, drawn as a depth x length map per config: agreement with the unquantized answer,
// the answer-token KL or RULER's score, of one config (A) or of B - A. A click on a cell lists its probes and opens
// one as a run in every view (the probe's text, the error maps at its tokens).
#pragma once

#include <QWidget>
#include <vector>

#include "snapshots.h"

class QComboBox;
class QCPColorMap;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace kvscope::ui {

class ProbePage : public QWidget {
  Q_OBJECT
 public:
  explicit ProbePage(QWidget* parent = nullptr);
  /// A request for `configs` with the page's tasks, lengths, depths, samples and seed (the serial is the caller's).
  ProbeRequest request(const std::vector<cache::CacheConfig>& configs) const;
  void showStarted(const ProbeRequest& r);
  void showResult(const ProbeResultView& result);
  void showFailed(const QString& message);
  void setStartEnabled(bool on);
  /// The map's value of config `config` (0: the reference) at a length and depth (-1: the tasks without one), as
  /// drawn: the mean over the cell's probes of the chosen figure; NaN for an empty cell.
  double cellValue(int config, qint64 length, int depth) const;
  /// What the map draws: 0 agreement, 1 answer KL, 2 score.
  enum class Figure { Agreement, AnswerKl, Score };
  void setFigure(Figure f);
  /// A (config index, 1-based: 0 is the reference) and B (-1: none): the map shows B - A when B is set.
  void setConfigs(int a, int b);
  /// Opens the cell's probe as a run (the first whose answer differs from the reference's, else the first).
  void openCell(qint64 length, int depth);

 Q_SIGNALS:
  void probeClicked();
  /// Open a probe as a run: its text (no chat template), the config and the probe's answer tokens.
  void runProbe(const cache::CacheConfig& config, const QString& prompt, int maxNew);

 private:
  void redraw();
  void listCell(qint64 length, int depth);
  int shownConfig() const;  ///< the config whose answers a click opens: B when set, else A
  QLineEdit* tasks_;
  QLineEdit* lengths_;
  QLineEdit* depths_;
  QSpinBox* samples_;
  QSpinBox* seed_;
  QPushButton* probe_;
  QComboBox* figure_;
  QComboBox* a_;
  QComboBox* b_;
  QLabel* summary_;
  QCustomPlot* plot_;
  QCPColorMap* map_;
  QTableWidget* cell_;
  ProbeResultView result_;
  std::vector<cache::CacheConfig> configs_;  ///< the request's, for opening a probe as a run
  QVector<qint64> lengthsShown_;
  QVector<int> depthsShown_;
};

}  // namespace kvscope::ui
