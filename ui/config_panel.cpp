#include "config_panel.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

namespace kvscope::ui {

ConfigPanel::ConfigPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  backend_ = new QComboBox(this);
  backend_->setObjectName("backend");
  for (auto b : cache::allBackends()) {
    backend_->addItem(QString::fromStdString(std::string(cache::backendName(b))));
    backend_->setItemData(backend_->count() - 1, QString::fromStdString(std::string(cache::backendSummary(b))),
                          Qt::ToolTipRole);
  }
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
  kept_ = new QLabel(this);
  kept_->setObjectName("configKept");
  kept_->setWordWrap(true);
  kept_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(kept_);
  dropKept_ = new QPushButton(tr("Use the form's config instead"), this);
  dropKept_->setObjectName("configDropKept");
  dropKept_->setToolTip(tr("Forget the per-layer rules or calibrated scales and run the config the form shows"));
  connect(dropKept_, &QPushButton::clicked, this, [this] {
    showKept(false);
    revalidate();
  });
  layout->addWidget(dropKept_);
  showKept(false);
  connect(backend_, &QComboBox::currentTextChanged, this, [this] {
    showKept(false);
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
  backend_->setToolTip(QString::fromStdString(std::string(cache::backendSummary(b))));
  for (const auto& opt : cache::backendOptions(b)) {
    const QString name = QString::fromStdString(opt.name);
    QWidget* w = nullptr;
    if (!opt.choices.empty()) {
      auto* c = new QComboBox(this);
      for (const auto& ch : opt.choices) c->addItem(QString::fromStdString(ch));
      c->setCurrentText(QString::fromStdString(opt.defaultValue));
      connect(c, &QComboBox::currentTextChanged, this, [this] { showKept(false), revalidate(); });
      w = c;
    } else if (opt.kind == "int") {
      auto* s = new QSpinBox(this);
      s->setRange(-1, 1 << 20);
      s->setValue(QString::fromStdString(opt.defaultValue).toInt());
      connect(s, &QSpinBox::valueChanged, this, [this] { showKept(false), revalidate(); });
      w = s;
    } else {
      auto* d = new QDoubleSpinBox(this);
      d->setRange(0.0, 1000.0);
      d->setDecimals(3);
      d->setSingleStep(0.05);
      d->setValue(QString::fromStdString(opt.defaultValue).toDouble());
      connect(d, &QDoubleSpinBox::valueChanged, this, [this] { showKept(false), revalidate(); });
      w = d;
    }
    w->setObjectName("opt_" + name);
    w->setToolTip(QString::fromStdString(opt.help) + (opt.transformersKey ? "" : tr(" (kvscope option)")));
    form_->addRow(name, w);
    fields_[name] = w;
  }
}

QString ConfigPanel::spec() const {
  return QString::fromStdString(cache::toSpec(config_));
}

void ConfigPanel::showKept(bool kept) {
  keeping_ = kept;
  kept_->setVisible(kept);
  dropKept_->setVisible(kept);
  if (!kept) return;
  kept_->setText(config_.mixed() ? tr("Per-layer config (the form shows one side of it):\n%1").arg(spec())
                 : config_.tiered()
                     ? tr("Tiers by age (the form shows the oldest tier's format):\n%1").arg(spec())
                     : tr("Calibrated scales for %1 layers (from a config file) are kept with this config")
                           .arg(config_.keyScales.size()));
}

void ConfigPanel::revalidate() {
  QString error;
  // While a config the form cannot show is kept, that config is the one validated; otherwise the form's.
  cache::CacheConfig cfg = keeping_ ? config_ : formConfig(error);
  if (error.isEmpty()) {
    try {
      cache::validate(cfg);
    } catch (const cache::ConfigError& e) {
      error = QString::fromStdString(e.what());
    }
  }
  valid_ = error.isEmpty();
  config_ = cfg;
  message_->setText(error);
  message_->setVisible(!valid_);
  Q_EMIT changed(spec(), valid_);
}

cache::CacheConfig ConfigPanel::formConfig(QString& error) const {
  const auto b = cache::parseBackend(backend_->currentText().toStdString());
  cache::CacheConfig cfg;
  cfg.backend = b;
  for (const auto& opt : cache::backendOptions(b)) {
    QWidget* w = fields_.at(QString::fromStdString(opt.name));
    QString value;
    if (auto* c = qobject_cast<QComboBox*>(w))
      value = c->currentText();
    else if (auto* s = qobject_cast<QSpinBox*>(w))
      value = QString::number(s->value());
    else if (auto* d = qobject_cast<QDoubleSpinBox*>(w))
      value = QString::number(d->value(), 'g', 6);
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
  return cfg;
}

bool ConfigPanel::setSpec(const QString& spec) {
  try {
    return setConfig(cache::parseSpec(spec.toStdString()));
  } catch (const cache::ConfigError& e) {
    message_->setText(QString::fromStdString(e.what()));
    message_->setVisible(true);
    return false;
  }
}

bool ConfigPanel::setConfig(const cache::CacheConfig& cfg) {
  // A per-layer config shows its mirror (one quantizing side) in the form: its fields say which backend it centres on.
  cache::CacheConfig shown = cfg;
  shown.layers.clear();
  shown.tiers.clear();
  shown.keyScales.clear();
  shown.valueScales.clear();
  {
    const QSignalBlocker block(backend_);
    backend_->setCurrentText(QString::fromStdString(std::string(cache::backendName(shown.backend))));
  }
  // Every option back at its default first (the form may hold another config of the same backend), then each
  // option's value from the config itself.
  rebuildForm();
  fillForm(shown);
  config_ = cfg;
  showKept(cfg.mixed() || cfg.tiered() || !cfg.keyScales.empty());
  revalidate();
  return valid_;
}

void ConfigPanel::fillForm(const cache::CacheConfig& cfg) {
  for (const auto& opt : cache::backendOptions(cfg.backend)) {
    QWidget* w = fields_.at(QString::fromStdString(opt.name));
    const QString v = QString::fromStdString(cache::optionValue(cfg, opt.name));
    const QSignalBlocker block(w);
    if (auto* c = qobject_cast<QComboBox*>(w))
      c->setCurrentText(v);
    else if (auto* s = qobject_cast<QSpinBox*>(w))
      s->setValue(v.toInt());
    else if (auto* d = qobject_cast<QDoubleSpinBox*>(w))
      d->setValue(v.toDouble());
  }
}

}  // namespace kvscope::ui
