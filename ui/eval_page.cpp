#include "eval_page.h"

#include <qcustomplot.h>

#include <QCoreApplication>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>
#include <cmath>
#include <limits>

#include "docks/plot_style.h"
#include "runs_model.h"

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

TextPicker makeTextPicker(QWidget* parent, const QString& prefix, const QString& dialogTitle, int ctx, int windows) {
  TextPicker t;
  t.path = new QLineEdit(defaultEvalText(), parent);
  t.path->setObjectName(prefix + "Text");
  t.browse = new QPushButton(QObject::tr("…"), parent);
  QObject::connect(t.browse, &QPushButton::clicked, parent, [parent, path = t.path, dialogTitle] {
    const QString p =
        QFileDialog::getOpenFileName(parent, dialogTitle, path->text(), QObject::tr("Text (*.txt);;All files (*)"));
    if (!p.isEmpty()) path->setText(p);
  });
  t.ctx = new QSpinBox(parent);
  t.ctx->setObjectName(prefix + "Ctx");
  t.ctx->setRange(16, 32768);
  t.ctx->setValue(ctx);
  t.windows = new QSpinBox(parent);
  t.windows->setObjectName(prefix + "Windows");
  t.windows->setRange(0, 100000);
  t.windows->setValue(windows);
  t.windows->setToolTip(QObject::tr("windows of the text to use (0: all)"));
  return t;
}

EvalPage::EvalPage(QWidget* parent) : QWidget(parent) {
  auto* el = new QVBoxLayout(this);
  el->setContentsMargins(0, 0, 0, 0);
  auto* ebar = new QHBoxLayout();
  const TextPicker picker = makeTextPicker(this, "eval", tr("Evaluation text"), 256, 2);
  text_ = picker.path;
  QPushButton* browse = picker.browse;
  ctx_ = picker.ctx;
  windows_ = picker.windows;
  auto* evalButton = evaluate_ = new QPushButton(tr("Evaluate"), this);
  evalButton->setObjectName("evalButton");
  evalButton->setToolTip(
      tr("The configs of the selected runs (all runs when none is selected; the form's config when "
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
  table_ = new QTableWidget(0, 14, this);
  table_->setObjectName("evalTable");
  // The first eight: kvscope's figures; then llama-perplexity --kl-divergence's (top-1 is its "same top p").
  table_->setHorizontalHeaderLabels({tr("config"), tr("KV ratio"), tr("perplexity"), tr("Δ perplexity"), tr("mean KL"),
                                     tr("max KL"), tr("top-1"), tr("NaN positions"), tr("± KL"), tr("median KL"),
                                     tr("99% KL"), tr("99.9% KL"), tr("RMS Δp"), tr("PPL ratio")});
  table_->horizontalHeaderItem(8)->setToolTip(tr("standard error of the mean KL, as llama-perplexity gives it"));
  table_->horizontalHeaderItem(12)->setToolTip(
      tr("root mean square of the change in the text token's probability, ± its standard error"));
  table_->horizontalHeaderItem(13)->setToolTip(tr("PPL(config) / PPL(reference), ± its standard error"));
  // Fourteen columns scroll sideways: the config keeps the width of its text rather than being squeezed.
  table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->setVisible(false);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  positions_ = new QCustomPlot(this);
  positions_->setObjectName("evalPositionPlot");
  positions_->setMinimumSize(kPlotMin);
  positions_->xAxis->setLabel(tr("tokens of context"));
  positions_->yAxis->setLabel(tr("mean KL (nats)"));
  // The key is a label that wraps under the plot: a legend below the axes cut the configs' names at 1366 px.
  positionsKey_ = new QLabel(this);
  positionsKey_->setObjectName("evalPositionKey");
  positionsKey_->setWordWrap(true);
  positionsKey_->setFont(QFont(font().family(), 8));
  auto* positionsPage = new QWidget(this);
  auto* pp = new QVBoxLayout(positionsPage);
  pp->setContentsMargins(0, 0, 0, 0);
  pp->setSpacing(0);
  pp->addWidget(positions_, 1);
  pp->addWidget(positionsKey_);
  // Tabs, not a splitter: the dock's minimum height is the larger of the two, so the window still fits 1366x768.
  auto* tabs = new QTabWidget(this);
  tabs->setObjectName("evalTabs");
  tabs->setDocumentMode(true);
  tabs->addTab(table_, tr("Figures"));
  tabs->addTab(positionsPage, tr("KL by position"));
  el->addLayout(ebar);
  el->addWidget(summary_);
  el->addWidget(tabs, 1);
  connect(evalButton, &QPushButton::clicked, this, &EvalPage::evaluateClicked);
}

QString EvalPage::textPath() const {
  return text_->text();
}

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

void EvalPage::showFailed(const QString& message) {
  summary_->setText(message.toHtmlEscaped());
}

void EvalPage::setStartEnabled(bool on) {
  evaluate_->setEnabled(on);
}

void EvalPage::showResult(const EvalResultView& result) {
  table_->setRowCount(0);
  const double refPpl = result.rows.isEmpty() ? 0.0 : result.rows.front().ppl;
  auto num = [](double x, char f, int prec) { return std::isnan(x) ? QString("nan") : QString::number(x, f, prec); };
  // The config column names what tells the configs apart (every option resolved); the tooltip has the whole SPEC and
  // the summary what they share, so that the column stays narrow enough to keep in view beside the figures.
  QStringList specs;
  for (const auto& row : result.rows)
    if (!row.reference) specs << row.spec;
  QString common;
  const QStringList names = specNames(specs, &common);
  int named = 0;
  for (const auto& row : result.rows) {
    const int r = table_->rowCount();
    table_->insertRow(r);
    const QString name = row.reference ? row.spec : names.value(named++, row.spec);
    auto pm = [&](double v, double e, double scale, int prec, const QString& unit) {
      return num(scale * v, 'f', prec) + " ± " + num(scale * e, 'f', prec) + unit;
    };
    QStringList cells{name,
                      QString::number(row.ratio, 'f', 2) + "x",
                      num(row.ppl, 'f', 3),
                      row.reference ? "-" : num(row.ppl - refPpl, 'f', 3),
                      row.reference ? "-" : num(row.meanKl, 'g', 4),
                      row.reference ? "-" : num(row.maxKl, 'g', 4),
                      row.reference ? "-" : QString::number(100.0 * row.top1, 'f', 1) + "%",
                      row.reference ? "-" : QString::number(row.nonFinitePositions)};
    if (row.reference)
      for (int c = 8; c < 14; ++c) cells << "-";
    else
      cells << num(row.klStderr, 'g', 3) << num(row.medianKl, 'g', 4) << num(row.kl99, 'g', 4) << num(row.kl999, 'g', 4)
            << pm(row.rmsDeltaP, row.rmsDeltaPStderr, 100.0, 3, "%")
            << pm(row.pplRatio, row.pplRatioStderr, 1.0, 4, "");
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (c == 0) item->setToolTip(row.spec);
      table_->setItem(r, c, item);
    }
  }
  positions_->clearGraphs();
  // The first position any config was scored at (the evaluation's prompt comes before it): from there on, a position
  // without a finite KL is the cache's NaN/inf, drawn as a cross at the top and counted in the legend, never left out
  // silently (a curve with holes would look good).
  int firstScored = std::numeric_limits<int>::max();
  for (const auto& row : result.rows)
    for (int i = 0; i < row.klByPosition.size(); ++i)
      if (std::isfinite(row.klByPosition[i])) {
        firstScored = std::min(firstScored, i);
        break;
      }
  int colour = 0;
  struct Bad {
    QVector<double> at;
    QColor colour;
    QString name;
  };
  QVector<Bad> bad;
  for (const auto& row : result.rows) {
    if (row.reference) continue;
    QCPGraph* g = positions_->addGraph();
    const QColor c = QColor::fromHsv((colour++ * 97) % 360, 200, 200);
    const QString name = names.value(colour - 1, row.spec);
    g->setName(name);
    g->setPen(QPen(c, 1.5));
    Bad b{{}, c, name};
    for (int i = 0; i < row.klByPosition.size(); ++i) {
      if (std::isfinite(row.klByPosition[i]))
        g->addData(i, row.klByPosition[i]);
      else if (i >= firstScored)
        b.at << i;
    }
    if (!b.at.isEmpty()) bad << b;
  }
  positions_->rescaleAxes();
  if (!bad.isEmpty()) {
    QCPRange y = positions_->yAxis->range();
    if (!(y.size() > 0)) y = QCPRange(0, 1);
    y.upper += 0.08 * y.size();
    positions_->yAxis->setRange(y);
    double x1 = positions_->xAxis->range().upper;
    for (const auto& b : bad) x1 = std::max(x1, b.at.back());
    positions_->xAxis->setRange(std::min(positions_->xAxis->range().lower, 0.0), std::max(x1, 1.0));
    for (const auto& b : bad) {
      auto* g = positions_->addGraph();
      g->setName(tr("%1: NaN/inf at %2 positions").arg(b.name).arg(b.at.size()));
      g->setPen(QPen(b.colour));
      g->setLineStyle(QCPGraph::lsNone);
      g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, b.colour, 7));
      g->setData(b.at, QVector<double>(b.at.size(), y.upper - 0.04 * y.size()));
    }
  }
  positions_->replot();
  QStringList key;
  for (int g = 0; g < positions_->graphCount(); ++g) {
    const QCPGraph* graph = positions_->graph(g);
    key << QString("<span style='color:%1'>%2</span>&nbsp;%3")
               .arg(graph->pen().color().name(), graph->lineStyle() == QCPGraph::lsNone ? "&#10005;" : "&#9473;",
                    graph->name().toHtmlEscaped());
  }
  positionsKey_->setText(key.join(" &nbsp; "));
  summary_->setToolTip(result.textPath);
  summary_->setText(tr("%1 window(s) of %2 tokens, %3 scored tokens per config%4")
                        .arg(result.windows)
                        .arg(result.ctx)
                        .arg(result.rows.isEmpty() ? 0 : result.rows.front().scored)
                        .arg(common.isEmpty() ? QString() : tr("; every config: %1").arg(common)));
}

}  // namespace kvscope::ui
