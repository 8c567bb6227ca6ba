// Backend choice and a form of that backend's options only; every change is validated with the core's own message
// before Run is possible.
#pragma once

#include <QWidget>
#include <map>

class QComboBox;
class QFormLayout;
class QLabel;

namespace kvscope::ui {

class ConfigPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ConfigPanel(QWidget* parent = nullptr);
  /// The canonical SPEC of what the form shows (valid or not).
  QString spec() const;
  bool isValid() const { return valid_; }
  /// Sets the form from a SPEC (e.g. "re-run with this config"); false with the error shown when it is invalid.
  bool setSpec(const QString& spec);

 Q_SIGNALS:
  void changed(const QString& spec, bool valid);

 private:
  void rebuildForm();
  void revalidate();

  QComboBox* backend_;
  QFormLayout* form_;
  QLabel* message_;
  std::map<QString, QWidget*> fields_;
  bool valid_ = true;
  QString spec_;
};

}  // namespace kvscope::ui
