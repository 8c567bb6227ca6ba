#pragma once

#include <QTextBrowser>
#include <QWidget>

#include "selection.h"
#include "snapshots.h"

class QComboBox;
class QLabel;

namespace kvscope::ui {

/// Streamed tokens, each coloured by a chosen metric (KL against the shadow reference, top-1 agreement, the
/// quantization error of its K/V in the selected layer, or log-prob); hovering shows position, id and the top
/// candidates; clicking a token selects its position. A beam-search run shows the selected beam's sequence.
/// Two runs (A and B): A's text, with a mark where B's tokens part from A's and B's token there.
class TextView : public QWidget {
  Q_OBJECT
 public:
  enum Metric { Kl, Top1, KvError, LogProb };
  TextView(Selection* selection, QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run, const RunSnapshotPtr& against = nullptr);
  /// Two runs shown: the first generated token where B's differs from A's (or one of them ended); -1 when the two
  /// agree throughout or one run is shown.
  int divergence() const { return divergence_; }
  /// The inspected layer's error (for the KvError colouring), from a snapshot or from the engine after a run.
  void showErrors(const TokenErrorViewPtr& errors);
  QString plainText() const;
  void setMetric(Metric m);
  QTextBrowser* browser() const { return browser_; }
  /// What the colours mean for the latest run and metric (a run without a shadow reference has no KL or top-1:
  /// it is coloured by log-prob, and the key says so).
  QString colourKey() const;

 private:
  void redraw();
  void updateKey();
  QColor colour(const TokenView& t, qint64 pos) const;
  QString tokenHtml(int i) const;
  QString divergenceMark() const;  ///< the mark before A's token where B parts from A (two runs shown)  ///< token i of
                                   ///< what is shown as an anchor (colour, hover text)
  /// What the view shows: the run's tokens, or for beam search the selected beam's sequence.
  const QVector<TokenView>& tokens() const { return last_ && !last_->beamSteps.isEmpty() ? beam_ : last_->tokens; }
  QVector<TokenView> beam_;  ///< the selected beam's tokens (beamSequence)
  int shown_ = 0;            ///< tokens of the latest run in the document
  Selection* sel_;
  QTextBrowser* browser_;
  QComboBox* metric_;
  QLabel* key_;
  QLabel* runTitle_;  ///< the run shown (A and B)
  RunSnapshotPtr last_, against_;
  int divergence_ = -1;
  int preferred_ = -1;  ///< the metric chosen before a run without a reference took KL / top-1 away
  TokenErrorViewPtr errors_;
  double errorScale_ = 0;  ///< the worst token's mean |error| in the inspected layer (colour scale)
};

}  // namespace kvscope::ui
