#include "config_panel.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QSpinBox>
#include <QVBoxLayout>

#include "cache/config.h"

namespace kvscope::ui {

ConfigPanel::ConfigPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  backend_ = new QComboBox(this);
  backend_->setObjectName("backend");
  for (auto b : cache::allBackends()) backend_->addItem(QString::fromStdString(std::string(cache::backendName(b))));
  backend_->setCurrentText("fp8");
  auto* top = new QFormLayout();
  top->addRow(tr("Cache backend"), backend_);
  layout->addLayout(top);
  form_ = new QFormLayout();
  layout->addLayout(form_);
  message_ = new QLabel(this);
  message_->setObjectName("configMessage");
  message_->setWordWrap(true);
  message_->setStyleSheet("color: #b00020;");
  layout->addWidget(message_);
  connect(backend_, &QComboBox::currentTextChanged, this, [this] {
    rebuildForm();
    revalidate();
  });
  rebuildForm();
  revalidate();
}

void ConfigPanel::rebuildForm() {
  while (form_->rowCount() > 0) form_->removeRow(0);
  fields_.clear();
  const auto b = cache::parseBackend(backend_->currentText().toStdString());
  for (const auto& opt : cache::backendOptions(b)) {
    const QString name = QString::fromStdString(opt.name);
    QWidget* w = nullptr;
    if (!opt.choices.empty()) {
      auto* c = new QComboBox(this);
      for (const auto& ch : opt.choices) c->addItem(QString::fromStdString(ch));
      c->setCurrentText(QString::fromStdString(opt.defaultValue));
      connect(c, &QComboBox::currentTextChanged, this, &ConfigPanel::revalidate);
      w = c;
    } else if (opt.kind == "int") {
      auto* s = new QSpinBox(this);
      s->setRange(-1, 1 << 20);
      s->setValue(QString::fromStdString(opt.defaultValue).toInt());
      connect(s, &QSpinBox::valueChanged, this, &ConfigPanel::revalidate);
      w = s;
    } else {
      auto* d = new QDoubleSpinBox(this);
      d->setRange(0.0, 1000.0);
      d->setDecimals(3);
      d->setSingleStep(0.05);
      d->setValue(QString::fromStdString(opt.defaultValue).toDouble());
      connect(d, &QDoubleSpinBox::valueChanged, this, &ConfigPanel::revalidate);
      w = d;
    }
    w->setObjectName("opt_" + name);
    w->setToolTip(QString::fromStdString(opt.help) + (opt.transformersKey ? "" : tr(" (kvscope option)")));
    form_->addRow(name, w);
    fields_[name] = w;
  }
}

QString ConfigPanel::spec() const { return spec_; }

void ConfigPanel::revalidate() {
  const auto b = cache::parseBackend(backend_->currentText().toStdString());
  cache::CacheConfig cfg;
  cfg.backend = b;
  QString error;
  for (const auto& opt : cache::backendOptions(b)) {
    QWidget* w = fields_.at(QString::fromStdString(opt.name));
    QString value;
    if (auto* c = qobject_cast<QComboBox*>(w)) value = c->currentText();
    else if (auto* s = qobject_cast<QSpinBox*>(w)) value = QString::number(s->value());
    else if (auto* d = qobject_cast<QDoubleSpinBox*>(w)) value = QString::number(d->value(), 'g', 6);
    // Only what differs from the default goes into the SPEC, as a user would type it.
    if (value == QString::fromStdString(opt.defaultValue) ||
        (opt.kind == "number" && value.toDouble() == QString::fromStdString(opt.defaultValue).toDouble()))
      continue;
    try {
      cache::setOption(cfg, opt.name, value.toStdString());
    } catch (const cache::ConfigError& e) {
      error = QString::fromStdString(e.what());
    }
  }
  if (error.isEmpty()) {
    try {
      cache::validate(cfg);
    } catch (const cache::ConfigError& e) {
      error = QString::fromStdString(e.what());
    }
  }
  valid_ = error.isEmpty();
  spec_ = QString::fromStdString(cache::toSpec(cfg));
  message_->setText(error);
  message_->setVisible(!valid_);
  Q_EMIT changed(spec_, valid_);
}

bool ConfigPanel::setSpec(const QString& spec) {
  cache::CacheConfig cfg;
  try {
    cfg = cache::parseSpec(spec.toStdString());
  } catch (const cache::ConfigError& e) {
    message_->setText(QString::fromStdString(e.what()));
    message_->setVisible(true);
    return false;
  }
  {
    const QSignalBlocker block(backend_);
    backend_->setCurrentText(QString::fromStdString(std::string(cache::backendName(cfg.backend))));
  }
  // Every option back at its default first: the canonical spec leaves defaults out, and the form may hold another
  // config of the same backend (fp8:format=e5m2 before `fp8` would otherwise stay e5m2).
  rebuildForm();
  // Read each option's value back from the canonical spec of the parsed config.
  const QString canon = QString::fromStdString(cache::toSpec(cfg));
  const int colon = canon.indexOf(':');
  if (colon >= 0) {
    for (const QString& kv : canon.mid(colon + 1).split(',')) {
      const int eq = kv.indexOf('=');
      const auto it = fields_.find(kv.left(eq));
      if (it == fields_.end()) continue;
      const QString v = kv.mid(eq + 1);
      if (auto* c = qobject_cast<QComboBox*>(it->second)) c->setCurrentText(v);
      else if (auto* s = qobject_cast<QSpinBox*>(it->second)) s->setValue(v.toInt());
      else if (auto* d = qobject_cast<QDoubleSpinBox*>(it->second)) d->setValue(v.toDouble());
    }
  }
  revalidate();
  return valid_;
}

}  // namespace kvscope::ui
