// The compare dock's "Doctor" tab: the loaded model's risks for a quantized KV cache from one unquantized forward over
// a text (generate::diagnose on the engine thread, what `kvscope-cli doctor` prints): the model's facts, a row per
// layer (keys' and values' largest |x| against the median channel, values past 448, projection biases), and the
// verdicts, each with the config to try first (Use loads it into the form).
#pragma once

#include <QWidget>

#include "snapshots.h"

class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QVBoxLayout;

namespace kvscope::ui {

class DoctorPage : public QWidget {
  Q_OBJECT
 public:
  explicit DoctorPage(QWidget* parent = nullptr);
  DoctorRequest request() const;
  void showStarted(const DoctorRequest& r);
  void showResult(const DoctorResultView& result);
  void showFailed(const QString& message);
  /// Whether Diagnose can start (a model loaded, the engine idle).
  void setStartEnabled(bool on);

 Q_SIGNALS:
  void diagnoseClicked();
  /// A verdict's Use: its config (a SPEC) for the form.
  void configChosen(const kvscope::cache::CacheConfig& config);

 private:
  QPushButton* diagnose_;
  QLineEdit* text_;
  QSpinBox* ctx_;
  QSpinBox* windows_;
  QLabel* facts_;
  QTableWidget* table_;
  QWidget* verdicts_;
  QVBoxLayout* verdictLayout_;
};

}  // namespace kvscope::ui
