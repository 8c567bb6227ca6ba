// Backend choice and a form of that backend's options only; every change is validated with the core's own message
// before Run is possible. The panel holds a cache::CacheConfig value: a per-layer config (`layers=` rules, calibrated
// scales) set from outside is kept whole and shown as such until the user edits the form.
#pragma once

#include <QWidget>
#include <map>

#include "cache/config.h"

class QComboBox;
class QFormLayout;
class QLabel;
class QPushButton;

namespace kvscope::ui {

class ConfigPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ConfigPanel(QWidget* parent = nullptr);
  /// The config the form shows (valid or not: see isValid()).
  const cache::CacheConfig& config() const { return config_; }
  /// Its canonical SPEC (cache::toSpec), for labels.
  QString spec() const;
  bool isValid() const { return valid_; }
  /// Sets the form from a config (e.g. "re-run with this config"); false with the error shown when it is invalid.
  bool setConfig(const cache::CacheConfig& cfg);
  /// setConfig() from a SPEC, or false with the parse error shown.
  bool setSpec(const QString& spec);

 Q_SIGNALS:
  void changed(const QString& spec, bool valid);

 private:
  void rebuildForm();
  void fillForm(const cache::CacheConfig& cfg);
  void revalidate();
  /// The config the form's fields say (defaults left unset); the last option error, if any, in `error`.
  cache::CacheConfig formConfig(QString& error) const;
  void showKept(bool kept);

  QComboBox* backend_;
  QFormLayout* form_;
  QLabel* message_;
  QLabel* kept_;           ///< what the form cannot show (per-layer rules, calibrated scales), while kept
  QPushButton* dropKept_;  ///< back to the form's uniform config
  std::map<QString, QWidget*> fields_;
  bool valid_ = true;
  bool keeping_ = false;  ///< config_ holds more than the form shows
  cache::CacheConfig config_;
};

}  // namespace kvscope::ui
