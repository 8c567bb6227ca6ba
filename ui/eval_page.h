// The compare dock's "Text evaluation" tab: a text file, its window size and count, the table of perplexity, KL
// and top-1 of each config against the unquantized cache with llama-perplexity's KL figures beside them, and the
// mean KL against context length (generate::evaluate on the engine thread).
#pragma once

#include <QWidget>

#include "snapshots.h"

class QCustomPlot;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace kvscope::ui {

/// A text file and the windows cut from it, as the evaluation and tuner pages ask for them: the path (the shipped
/// text by default) with its browse button, tokens per window and the number of windows (0: all). Object names:
/// PREFIXText, PREFIXCtx, PREFIXWindows.
struct TextPicker {
  QLineEdit* path;
  QPushButton* browse;
  QSpinBox* ctx;
  QSpinBox* windows;
};
TextPicker makeTextPicker(QWidget* parent, const QString& prefix, const QString& dialogTitle, int ctx, int windows);

class EvalPage : public QWidget {
  Q_OBJECT
 public:
  explicit EvalPage(QWidget* parent = nullptr);
  /// A request for `configs` with the page's text and windows (the serial is the caller's).
  EvalRequest request(const std::vector<cache::CacheConfig>& configs) const;
  QString textPath() const;
  void showStarted(const EvalRequest& r);
  void showResult(const EvalResultView& result);
  void showFailed(const QString& message);
  /// Whether Evaluate can start one (a model loaded, the engine idle).
  void setStartEnabled(bool on);

 Q_SIGNALS:
  void evaluateClicked();

 private:
  QPushButton* evaluate_;
  QLineEdit* text_;
  QSpinBox* ctx_;
  QSpinBox* windows_;
  QTableWidget* table_;
  QCustomPlot* positions_;  ///< mean KL against context length, one graph per config
  QLabel* summary_;
  QLabel* positionsKey_;  ///< what each curve of positions_ is (a label that wraps)
};

}  // namespace kvscope::ui
