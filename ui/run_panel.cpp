#include "run_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>

#include "config_panel.h"

namespace kvscope::ui {

RunPanel::RunPanel(QWidget* parent) : QWidget(parent) {
  // Run panel: model card, cache config, prompt, generation options.
  auto* pl = new QVBoxLayout(this);
  modelCard_ = new QLabel(tr("No model loaded (File > Open model, or drop a GGUF file)."), this);
  modelCard_->setObjectName("modelCard");
  modelCard_->setWordWrap(true);
  progress_ = new QProgressBar(this);
  progress_->setVisible(false);
  auto choices = [this](const char* name, const std::vector<std::string>& items, const QString& tip) {
    auto* box = new QComboBox(this);
    box->setObjectName(name);
    for (const auto& i : items) box->addItem(QString::fromStdString(i));
    box->setToolTip(tip + tr("; changing it reloads the model"));
    return box;
  };
  dtype_ = choices("dtype", runtime::dtypeNames(), tr("Weights and activations"));
  activations_ = choices("activations", runtime::activationsNames(),
                         tr("How block-format weights (a GGUF's Q4_K, Q8_0, ...) are multiplied. auto: as their engine "
                            "computes (8-bit activations, llama.cpp's arithmetic and speed, on a GGUF; float32 on "
                            "float weights, transformers' arithmetic); f32: float32 always (transformers' numbers "
                            "on a GGUF); q8: 8-bit always"));
  weights_ = choices("weights", runtime::weightsNames(),
                     tr("stored: every matrix as its file stores it; q8_0 ... q4_0: float matrices (a Hugging Face "
                        "model's) quantized at load to that llama.cpp format"));
  device_ = new QComboBox(this);
  device_->setObjectName("device");
  device_->addItem("cpu");
  device_->setToolTip(tr("Where the model and its cache run; changing it reloads the model"));
  auto* modelRow = new QFormLayout();
  modelRow->addRow(tr("Device"), device_);
  modelRow->addRow(tr("Model dtype"), dtype_);
  modelRow->addRow(tr("Activations"), activations_);
  modelRow->addRow(tr("Weights"), weights_);
  for (QComboBox* box : {dtype_, device_, activations_, weights_})
    connect(box, &QComboBox::currentTextChanged, this, &RunPanel::reloadWanted);
  config_ = new ConfigPanel(this);
  prompt_ = new QPlainTextEdit(this);
  prompt_->setObjectName("prompt");
  prompt_->setPlaceholderText(tr("Prompt"));
  prompt_->setPlainText(tr("Explain in three sentences why a quantized key-value cache saves memory."));
  chat_ = new QCheckBox(tr("Chat template"), this);
  chat_->setChecked(true);
  shadow_ = new QCheckBox(tr("Shadow reference (KL vs unquantized)"), this);
  shadow_->setChecked(true);
  maxNew_ = new QSpinBox(this);
  maxNew_->setRange(1, 8192);
  maxNew_->setValue(64);
  prefillChunk_ = new QSpinBox(this);
  prefillChunk_->setObjectName("prefillChunk");
  prefillChunk_->setRange(-1, 1 << 20);
  prefillChunk_->setValue(-1);
  prefillChunk_->setSpecialValueText(tr("auto"));
  prefillChunk_->setToolTip(
      tr("Prompt tokens per forward pass: the prefill's activations and attention scores are "
         "bounded by the chunk. auto: 512 when the cache attends in fused mode, the whole "
         "prompt at once in reference mode (as transformers); 0: the whole prompt at once."));
  decoding_ = new QComboBox(this);
  decoding_->setObjectName("decoding");
  decoding_->addItems({tr("Greedy"), tr("Sampling"), tr("Beam search")});
  temperature_ = new QDoubleSpinBox(this);
  temperature_->setRange(0.01, 5.0);
  temperature_->setValue(0.8);
  topP_ = new QDoubleSpinBox(this);
  topP_->setRange(0.01, 1.0);
  topP_->setSingleStep(0.05);
  topP_->setValue(0.95);
  topK_ = new QSpinBox(this);
  topK_->setRange(0, 100000);
  seed_ = new QSpinBox(this);
  seed_->setRange(0, 1 << 30);
  beams_ = new QSpinBox(this);
  beams_->setObjectName("beams");
  beams_->setRange(1, 16);
  beams_->setValue(4);
  auto* opts = new QFormLayout();
  opts->addRow(tr("New tokens"), maxNew_);
  opts->addRow(tr("Prefill chunk"), prefillChunk_);
  opts->addRow(tr("Decoding"), decoding_);
  opts->addRow(tr("Temperature"), temperature_);
  opts->addRow(tr("Top-p"), topP_);
  opts->addRow(tr("Top-k (0: off)"), topK_);
  opts->addRow(tr("Seed"), seed_);
  opts->addRow(tr("Beams"), beams_);
  auto showDecoding = [this, opts] {
    const int mode = decoding_->currentIndex();
    for (QWidget* w : {static_cast<QWidget*>(temperature_), static_cast<QWidget*>(topP_), static_cast<QWidget*>(topK_),
                       static_cast<QWidget*>(seed_)})
      opts->setRowVisible(w, mode == 1);
    opts->setRowVisible(beams_, mode == 2);
    shadow_->setEnabled(mode != 2);
  };
  connect(decoding_, &QComboBox::currentIndexChanged, this, showDecoding);
  showDecoding();
  runButton_ = new QPushButton(tr("Run"), this);
  runButton_->setObjectName("runButton");
  stopButton_ = new QPushButton(tr("Stop"), this);
  stopButton_->setObjectName("stopButton");
  // Run and Stop in a bar of their own, which the window keeps in view below the scrolling form (at 768 px the
  // form is taller than the screen).
  buttonBar_ = new QWidget(this);
  buttonBar_->setObjectName("runButtons");
  auto* buttons = new QHBoxLayout(buttonBar_);
  buttons->setContentsMargins(4, 2, 4, 2);
  runButton_->setParent(buttonBar_);
  stopButton_->setParent(buttonBar_);
  buttons->addWidget(runButton_);
  buttons->addWidget(stopButton_);
  pl->addWidget(modelCard_);
  pl->addWidget(progress_);
  pl->addLayout(modelRow);
  pl->addWidget(config_);
  pl->addWidget(prompt_, 1);
  pl->addWidget(chat_);
  pl->addWidget(shadow_);
  pl->addLayout(opts);  // (buttonBar_ is placed by the window)
  connect(runButton_, &QPushButton::clicked, this, &RunPanel::runClicked);
  connect(stopButton_, &QPushButton::clicked, this, &RunPanel::stopClicked);
}

RunRequest RunPanel::request() const {
  RunRequest r;
  r.config = config_->config();
  r.prompt = prompt_->toPlainText();
  r.chat = chat_->isChecked();
  r.shadow = shadow_->isChecked();
  r.maxNew = maxNew_->value();
  r.prefillChunk = prefillChunk_->value();
  r.sample = decoding_->currentIndex() == 1;
  r.temperature = temperature_->value();
  r.topP = topP_->value();
  r.topK = topK_->value();
  r.seed = static_cast<quint64>(seed_->value());
  r.beams = decoding_->currentIndex() == 2 ? beams_->value() : 0;
  if (r.beams > 0) r.shadow = false;
  return r;
}

void RunPanel::setRequest(const RunRequest& r) {
  prompt_->setPlainText(r.prompt);
  chat_->setChecked(r.chat);
  maxNew_->setValue(r.maxNew);
  prefillChunk_->setValue(r.prefillChunk);
  decoding_->setCurrentIndex(r.beams > 0 ? 2 : r.sample ? 1 : 0);
  temperature_->setValue(r.temperature);
  topP_->setValue(r.topP);
  topK_->setValue(r.topK);
  seed_->setValue(static_cast<int>(std::min<quint64>(r.seed, quint64(seed_->maximum()))));
  if (r.beams > 0)
    beams_->setValue(r.beams);
  else
    shadow_->setChecked(r.shadow);  // a beam search runs without the reference; the box keeps the user's choice
}

void RunPanel::setShadow(bool on) {
  shadow_->setChecked(on);
}
bool RunPanel::shadow() const {
  return shadow_->isChecked();
}
QString RunPanel::device() const {
  return device_->currentText();
}
runtime::LoadOptions RunPanel::loadOptions(const QString& path) const {
  runtime::LoadOptions o;
  o.path = path.toStdString();
  o.device = device_->currentText().toStdString();
  o.dtype = dtype_->currentText().toStdString();
  o.activations = activations_->currentText().toStdString();
  o.weights = weights_->currentText().toStdString();
  return o;
}
void RunPanel::setRunEnabled(bool on) {
  runButton_->setEnabled(on);
}
void RunPanel::setStopEnabled(bool on) {
  stopButton_->setEnabled(on);
}
bool RunPanel::runEnabled() const {
  return runButton_->isEnabled();
}

void RunPanel::setDevices(const QStringList& devices) {
  const QSignalBlocker block(device_);  // filling the list is not a choice: no reload
  device_->clear();
  device_->addItems(devices.isEmpty() ? QStringList{"cpu"} : devices);
  device_->setEnabled(device_->count() > 1);
  device_->setToolTip(device_->count() == 1 ? tr("No CUDA device is available here: the model runs on the CPU")
                                            : tr("Where the model and its cache run; changing it reloads the model"));
}

void RunPanel::setDevice(const QString& device) {
  const QSignalBlocker block(device_);  // the caller loads next
  if (device_->findText(device) < 0) device_->addItem(device);
  device_->setCurrentText(device);
}

void RunPanel::showLoadProgress(int done, int total) {
  progress_->setVisible(total > 0);
  progress_->setMaximum(std::max(total, 1));
  progress_->setValue(done);
}

void RunPanel::showNoModel() {
  modelCard_->setText(
      tr("<b>No model found.</b> Open a GGUF file or a Hugging Face directory (File > Open model), "
         "or drop one on the window."));
}

void RunPanel::showModel(const ModelInfo& info) {
  progress_->setVisible(false);
  modelCard_->setText(tr("<b>%1</b> (%2)<br>%3 layers, hidden %4, %5 heads / %6 KV heads x %7, vocab %8<br>%11<br>"
                         "weights: %9<br>%10")
                          .arg(info.name.isEmpty() ? info.path : info.name, info.arch)
                          .arg(info.layers)
                          .arg(info.hidden)
                          .arg(info.heads)
                          .arg(info.kvHeads)
                          .arg(info.headDim)
                          .arg(info.vocab)
                          .arg(info.weightTypes.join(", "), info.arithmetic, info.layerKinds.toHtmlEscaped()));
}

}  // namespace kvscope::ui
