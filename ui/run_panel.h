// The run panel (left dock): the model card and how it loads (device, dtype, activations, weights), the cache config
// form, the prompt and the generation options, Run and Stop. It builds RunRequests; the window decides when they go to
// the engine.
#pragma once

#include <QWidget>

#include "snapshots.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace kvscope::ui {

class ConfigPanel;

class RunPanel : public QWidget {
  Q_OBJECT
 public:
  /// Run and Stop: the window places this bar where it stays in view (below the form's scroll area).
  QWidget* buttonBar() const { return buttonBar_; }
  explicit RunPanel(QWidget* parent = nullptr);

  /// What Run would ask for now (the serial is the caller's).
  RunRequest request() const;
  /// Sets the prompt and the generation options as `r` asks (a reopened run's); the config is the config panel's.
  void setRequest(const RunRequest& r);
  ConfigPanel* configPanel() const { return config_; }
  QPlainTextEdit* promptEdit() const { return prompt_; }
  QSpinBox* maxNewBox() const { return maxNew_; }
  void setShadow(bool on);
  bool shadow() const;
  QString device() const;
  /// What the next load of `path` asks for: the device, dtype, activations and weights chosen here.
  runtime::LoadOptions loadOptions(const QString& path) const;
  /// Devices the engine can run on ("cpu", "cuda:0", ...); the first is the default.
  void setDevices(const QStringList& devices);
  void setDevice(const QString& device);
  void setRunEnabled(bool on);
  void setStopEnabled(bool on);
  bool runEnabled() const;
  void showModel(const ModelInfo& info);
  void showNoModel();
  /// A load's progress; total 0 hides the bar.
  void showLoadProgress(int done, int total);

 Q_SIGNALS:
  void runClicked();
  void stopClicked();
  /// The device, the dtype, the activations or the weights changed: the model must be loaded again.
  void reloadWanted();

 private:
  ConfigPanel* config_;
  QLabel* modelCard_;
  QProgressBar* progress_;
  QComboBox* device_;
  QComboBox* dtype_;
  QComboBox* activations_;
  QComboBox* weights_;
  QPlainTextEdit* prompt_;
  QCheckBox* chat_;
  QCheckBox* shadow_;
  QSpinBox* maxNew_;
  QSpinBox* prefillChunk_;
  QComboBox* decoding_;
  QDoubleSpinBox* temperature_;
  QDoubleSpinBox* topP_;
  QSpinBox* topK_;
  QSpinBox* seed_;
  QSpinBox* beams_;
  QWidget* buttonBar_ = nullptr;
  QPushButton* runButton_;
  QPushButton* stopButton_;
};

}  // namespace kvscope::ui
