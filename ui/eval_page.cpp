#include "eval_page.h"

#include <QCoreApplication>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <cmath>

namespace kvscope::ui {

namespace {
// The shipped evaluation text: installed next to the binaries, or in the source tree of a development build.
QString defaultEvalText() {
  for (const QString& p : {QCoreApplication::applicationDirPath() + "/../share/kvscope/eval/coriolanus.txt",
                           QString(KVSCOPE_RESOURCE_DIR) + "/eval/coriolanus.txt"})
    if (QFileInfo::exists(p)) return QFileInfo(p).canonicalFilePath();
  return QString();
}
}  // namespace

EvalPage::EvalPage(QWidget* parent) : QWidget(parent) {
  auto* el = new QVBoxLayout(this);
  el->setContentsMargins(0, 0, 0, 0);
  auto* ebar = new QHBoxLayout();
  text_ = new QLineEdit(defaultEvalText(), this);
  text_->setObjectName("evalText");
  auto* browse = new QPushButton(tr("…"), this);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getOpenFileName(this, tr("Evaluation text"), text_->text(), tr("Text (*.txt);;All files (*)"));
    if (!p.isEmpty()) text_->setText(p);
  });
  ctx_ = new QSpinBox(this);
  ctx_->setObjectName("evalCtx");
  ctx_->setRange(16, 32768);
  ctx_->setValue(256);
  windows_ = new QSpinBox(this);
  windows_->setObjectName("evalWindows");
  windows_->setRange(0, 100000);
  windows_->setValue(2);
  windows_->setToolTip(tr("windows of the text to use (0: all)"));
  auto* evalButton = new QPushButton(tr("Evaluate"), this);
  evalButton->setObjectName("evalButton");
  evalButton->setToolTip(tr("The configs of the selected runs (all runs when none is selected; the form's config when "
                            "there is no run) on the text"));
  ebar->addWidget(new QLabel(tr("Text"), this));
  ebar->addWidget(text_, 3);
  ebar->addWidget(browse);
  ebar->addWidget(new QLabel(tr("tokens/window"), this));
  ebar->addWidget(ctx_);
  ebar->addWidget(new QLabel(tr("windows"), this));
  ebar->addWidget(windows_);
  ebar->addWidget(evalButton);
  summary_ = new QLabel(this);
  summary_->setObjectName("evalSummary");
  summary_->setWordWrap(true);
  table_ = new QTableWidget(0, 8, this);
  table_->setObjectName("evalTable");
  table_->setHorizontalHeaderLabels({tr("config"), tr("KV ratio"), tr("perplexity"), tr("Δ perplexity"),
                                     tr("mean KL"), tr("max KL"), tr("top-1"), tr("NaN positions")});
  table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  table_->verticalHeader()->setVisible(false);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  el->addLayout(ebar);
  el->addWidget(summary_);
  el->addWidget(table_, 1);
  connect(evalButton, &QPushButton::clicked, this, &EvalPage::evaluateClicked);
}

QString EvalPage::textPath() const { return text_->text(); }

EvalRequest EvalPage::request(const std::vector<cache::CacheConfig>& configs) const {
  EvalRequest r;
  r.textPath = text_->text();
  r.configs = configs;
  r.ctx = ctx_->value();
  r.windows = windows_->value();
  r.prompt = std::min(64, r.ctx / 4);
  return r;
}

void EvalPage::showStarted(const EvalRequest& r) {
  summary_->setText(tr("Evaluating %1 config(s) on %2…").arg(r.configs.size()).arg(r.textPath));
}

void EvalPage::showFailed(const QString& message) { summary_->setText(message.toHtmlEscaped()); }

void EvalPage::showResult(const EvalResultView& result) {
  table_->setRowCount(0);
  const double refPpl = result.rows.isEmpty() ? 0.0 : result.rows.front().ppl;
  auto num = [](double x, char f, int prec) { return std::isnan(x) ? QString("nan") : QString::number(x, f, prec); };
  for (const auto& row : result.rows) {
    const int r = table_->rowCount();
    table_->insertRow(r);
    const QStringList cells{row.spec,
                            QString::number(row.ratio, 'f', 2) + "x",
                            num(row.ppl, 'f', 3),
                            row.reference ? "-" : num(row.ppl - refPpl, 'f', 3),
                            row.reference ? "-" : num(row.meanKl, 'g', 4),
                            row.reference ? "-" : num(row.maxKl, 'g', 4),
                            row.reference ? "-" : QString::number(100.0 * row.top1, 'f', 1) + "%",
                            row.reference ? "-" : QString::number(row.nonFinitePositions)};
    for (int c = 0; c < cells.size(); ++c) table_->setItem(r, c, new QTableWidgetItem(cells[c]));
  }
  summary_->setText(tr("%1: %2 window(s) of %3 tokens, %4 scored tokens per config")
                        .arg(result.textPath)
                        .arg(result.windows)
                        .arg(result.ctx)
                        .arg(result.rows.isEmpty() ? 0 : result.rows.front().scored));
}

}  // namespace kvscope::ui
