#include "probe_page.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "docks/plot_style.h"
#include "probe/suite.h"

namespace kvscope::ui {

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

QString lengthLabel(qint64 n) {
  return n % 1024 == 0 ? QStringLiteral("%1k").arg(n / 1024) : QString::number(n);
}

// Red (0) through yellow to green (1).
QColor goodness(double t) {
  t = std::clamp(t, 0.0, 1.0);
  return t < 0.5 ? QColor::fromRgbF(0.85f, float(0.25 + 1.3 * t), 0.2f)
                 : QColor::fromRgbF(float(0.85 - 1.3 * (t - 0.5)), 0.85f, 0.2f);
}

}  // namespace

ProbePage::ProbePage(QWidget* parent) : QWidget(parent) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout();
  QStringList names;
  for (const probe::TaskInfo& t : probe::tasks()) names << QString::fromUtf8(t.name.data(), qsizetype(t.name.size()));
  tasks_ = new QLineEdit(QStringLiteral("passkey,niah_single_1,niah_multikey_2,vt"), this);
  tasks_->setObjectName("probeTasks");
  tasks_->setPlaceholderText(tr("every task"));
  QString tip = tr("Comma-separated tasks (empty: every task):");
  for (const probe::TaskInfo& t : probe::tasks())
    tip += QStringLiteral("\n%1: %2 (%3)")
               .arg(QString::fromUtf8(t.name.data(), qsizetype(t.name.size())),
                    QString::fromUtf8(t.what.data(), qsizetype(t.what.size())),
                    QString::fromUtf8(t.origin.data(), qsizetype(t.origin.size())));
  tasks_->setToolTip(tip);
  lengths_ = new QLineEdit(QStringLiteral("1k,2k,4k"), this);
  lengths_->setObjectName("probeLengths");
  lengths_->setToolTip(tr("Comma-separated prompt lengths in tokens (4096 or 4k), up to the model's context"));
  depths_ = new QLineEdit(QStringLiteral("0,50,100"), this);
  depths_->setObjectName("probeDepths");
  depths_->setToolTip(tr("Comma-separated needle depths, in percent of the context before the needle"));
  samples_ = new QSpinBox(this);
  samples_->setObjectName("probeSamples");
  samples_->setRange(1, 100);
  samples_->setToolTip(tr("probes per task, length and depth (each with its own needle and haystack)"));
  seed_ = new QSpinBox(this);
  seed_->setObjectName("probeSeed");
  seed_->setRange(0, 1 << 30);
  seed_->setToolTip(tr("the suite's seed: the same seed writes the same texts"));
  probe_ = new QPushButton(tr("Probe"), this);
  probe_->setObjectName("probeButton");
  probe_->setToolTip(
      tr("Answer every probe greedily through the unquantized cache and each selected run's config "
         "(every run's when none is selected); Stop keeps the probes answered"));
  bar->addWidget(new QLabel(tr("Tasks"), this));
  bar->addWidget(tasks_, 3);
  bar->addWidget(new QLabel(tr("Lengths"), this));
  bar->addWidget(lengths_, 1);
  bar->addWidget(new QLabel(tr("Depths %"), this));
  bar->addWidget(depths_, 1);
  bar->addWidget(new QLabel(tr("×"), this));
  bar->addWidget(samples_);
  bar->addWidget(new QLabel(tr("seed"), this));
  bar->addWidget(seed_);
  bar->addWidget(probe_);
  auto* show = new QHBoxLayout();
  figure_ = new QComboBox(this);
  figure_->setObjectName("probeFigure");
  figure_->addItems({tr("agreement with unquantized"), tr("answer KL (mean)"), tr("score (RULER)")});
  a_ = new QComboBox(this);
  a_->setObjectName("probeA");
  b_ = new QComboBox(this);
  b_->setObjectName("probeB");
  a_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  b_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  a_->setMinimumContentsLength(12);
  b_->setMinimumContentsLength(12);
  show->addWidget(new QLabel(tr("Map"), this));
  show->addWidget(figure_);
  show->addWidget(new QLabel(tr("A"), this));
  show->addWidget(a_, 1);
  show->addWidget(new QLabel(tr("B"), this));
  show->addWidget(b_, 1);
  summary_ = new QLabel(tr("Probe to draw each config's agreement by length and depth."), this);
  summary_->setObjectName("probeSummary");
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  plot_ = new QCustomPlot(this);
  plot_->setObjectName("probeMap");
  plot_->setMinimumSize(kPlotMin);
  plot_->xAxis->setLabel(tr("prompt length (tokens)"));
  plot_->yAxis->setLabel(tr("needle depth"));
  cell_ = new QTableWidget(0, 5, this);
  cell_->setObjectName("probeCell");
  cell_->setHorizontalHeaderLabels({tr("probe"), tr("expected"), tr("unquantized"), tr("A"), tr("B")});
  cell_->verticalHeader()->setVisible(false);
  cell_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  cell_->setSelectionBehavior(QAbstractItemView::SelectRows);
  cell_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  cell_->setToolTip(tr("The clicked cell's probes: click one to open it as a run"));
  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(plot_);
  split->addWidget(cell_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  l->addLayout(bar);
  l->addLayout(show);
  l->addWidget(summary_);
  l->addWidget(split, 1);

  connect(probe_, &QPushButton::clicked, this, &ProbePage::probeClicked);
  for (QComboBox* c : {figure_, a_, b_}) connect(c, &QComboBox::currentIndexChanged, this, [this] { redraw(); });
  connect(plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    const int x = static_cast<int>(std::lround(plot_->xAxis->pixelToCoord(e->position().x())));
    const int y = static_cast<int>(std::lround(plot_->yAxis->pixelToCoord(e->position().y())));
    if (x < 0 || x >= lengthsShown_.size() || y < 0 || y >= depthsShown_.size()) return;
    openCell(lengthsShown_[x], depthsShown_[y]);
  });
  connect(cell_, &QTableWidget::cellClicked, this, [this](int row, int) {
    const QString id = cell_->item(row, 0)->text();
    const int c = shownConfig();
    for (const ProbeView& p : result_.probes)
      if (p.id == id && c >= 1 && c <= static_cast<int>(configs_.size()))
        Q_EMIT runProbe(configs_[static_cast<std::size_t>(c - 1)], p.prompt, p.maxNew);
  });
}

ProbeRequest ProbePage::request(const std::vector<cache::CacheConfig>& configs) const {
  ProbeRequest r;
  r.configs = configs;
  r.tasks = tasks_->text();
  r.lengths = lengths_->text();
  r.depths = depths_->text();
  r.samples = samples_->value();
  r.seed = static_cast<quint64>(seed_->value());
  return r;
}

void ProbePage::showStarted(const ProbeRequest& r) {
  configs_ = r.configs;
  summary_->setText(tr("Probing %n config(s) and the unquantized cache…", nullptr, static_cast<int>(r.configs.size())));
}

void ProbePage::showFailed(const QString& message) {
  summary_->setText(tr("Probes failed: %1").arg(message));
}

void ProbePage::setStartEnabled(bool on) {
  probe_->setEnabled(on);
}

void ProbePage::showResult(const ProbeResultView& result) {
  result_ = result;
  std::set<qint64> lengths;
  std::set<int> depths;
  for (const ProbeView& p : result_.probes) lengths.insert(p.length), depths.insert(p.depth);
  lengthsShown_ = QVector<qint64>(lengths.begin(), lengths.end());
  depthsShown_ = QVector<int>(depths.begin(), depths.end());
  const QSignalBlocker ba(a_), bb(b_);
  const int a = a_->currentIndex(), b = b_->currentIndex();
  a_->clear();
  b_->clear();
  b_->addItem(tr("— (A alone)"));
  for (int i = 0; i < result_.specs.size(); ++i) {
    a_->addItem(result_.specs[i]);
    a_->setItemData(i, result_.specs[i], Qt::ToolTipRole);
    b_->addItem(result_.specs[i]);
    b_->setItemData(i + 1, result_.specs[i], Qt::ToolTipRole);
  }
  // A: the first config (the reference agrees with itself); B: none, or what was chosen before.
  a_->setCurrentIndex(a >= 1 && a < a_->count() ? a : std::min(1, a_->count() - 1));
  b_->setCurrentIndex(b >= 0 && b < b_->count() ? b : 0);
  cell_->setRowCount(0);
  redraw();
}

void ProbePage::setFigure(Figure f) {
  figure_->setCurrentIndex(static_cast<int>(f));
}

void ProbePage::setConfigs(int a, int b) {
  a_->setCurrentIndex(a);
  b_->setCurrentIndex(b + 1);
}

int ProbePage::shownConfig() const {
  return b_->currentIndex() > 0 ? b_->currentIndex() - 1 : a_->currentIndex();
}

double ProbePage::cellValue(int config, qint64 length, int depth) const {
  const auto f = static_cast<Figure>(figure_->currentIndex());
  double sum = 0;
  int n = 0;
  for (const ProbeView& p : result_.probes) {
    if (p.length != length || p.depth != depth || config < 0 || config >= p.results.size()) continue;
    const ProbeAnswerView& a = p.results[config];
    sum += f == Figure::Agreement ? (a.sameAnswer ? 1.0 : 0.0) : f == Figure::Score ? a.score : a.meanKl;
    ++n;
  }
  return n ? sum / n : kNan;
}

void ProbePage::redraw() {
  plot_->clearItems();
  const int a = a_->currentIndex(), b = b_->currentIndex() - 1;
  const auto f = static_cast<Figure>(figure_->currentIndex());
  const bool diff = b >= 0;
  if (result_.probes.isEmpty() || a < 0) {
    plot_->replot();
    return;
  }
  // The values drawn, and their scale: agreement and score in [0, 1]; KL from 0 to the largest; B - A symmetric.
  const int L = static_cast<int>(lengthsShown_.size()), D = static_cast<int>(depthsShown_.size());
  std::vector<double> v(static_cast<std::size_t>(L * D), kNan);
  double most = 0;
  for (int x = 0; x < L; ++x)
    for (int y = 0; y < D; ++y) {
      double val = cellValue(a, lengthsShown_[x], depthsShown_[y]);
      if (diff) val = cellValue(b, lengthsShown_[x], depthsShown_[y]) - val;
      v[static_cast<std::size_t>(x) * static_cast<std::size_t>(D) + static_cast<std::size_t>(y)] = val;
      if (std::isfinite(val)) most = std::max(most, std::abs(val));
    }
  const bool kl = f == Figure::AnswerKl;
  for (int x = 0; x < L; ++x)
    for (int y = 0; y < D; ++y) {
      const double val = v[static_cast<std::size_t>(x) * static_cast<std::size_t>(D) + static_cast<std::size_t>(y)];
      auto* r = new QCPItemRect(plot_);
      r->topLeft->setCoords(x - 0.5, y + 0.5);
      r->bottomRight->setCoords(x + 0.5, y - 0.5);
      r->setPen(QPen(Qt::white));
      QColor c;
      if (!std::isfinite(val)) {
        c = kNanColour;  // a KL that is not finite (the run stored NaN/inf)
      } else if (diff) {
        // B better than A: green; worse: red; equal: grey. Better is more agreement or score, less KL.
        const double t = most > 0 ? val / most : 0;
        const double good = kl ? -t : t;
        c = good == 0 ? QColor(200, 200, 200) : goodness(0.5 + 0.5 * good);
      } else {
        c = goodness(kl ? (most > 0 ? 1.0 - val / most : 1.0) : val);
      }
      r->setBrush(c);
      auto* t = new QCPItemText(plot_);
      t->position->setCoords(x, y);
      t->setText(!std::isfinite(val) ? tr("NaN")
                 : kl                ? QString::number(val, 'g', 2)
                 : diff              ? QStringLiteral("%1%2%").arg(val > 0 ? "+" : "").arg(100 * val, 0, 'f', 0)
                                     : QStringLiteral("%1%").arg(100 * val, 0, 'f', 0));
    }
  QSharedPointer<QCPAxisTickerText> xt(new QCPAxisTickerText), yt(new QCPAxisTickerText);
  for (int x = 0; x < L; ++x) xt->addTick(x, lengthLabel(lengthsShown_[x]));
  for (int y = 0; y < D; ++y)
    yt->addTick(y, depthsShown_[y] < 0 ? tr("none") : QStringLiteral("%1%").arg(depthsShown_[y]));
  plot_->xAxis->setTicker(xt);
  plot_->yAxis->setTicker(yt);
  plot_->xAxis->setRange(-0.5, L - 0.5);
  plot_->yAxis->setRange(-0.5, D - 0.5);
  plot_->xAxis->setLabel(diff ? tr("prompt tokens (B − A)") : tr("prompt tokens (A)"));
  // The summary: each config's agreement over every probe, and where the reference itself is right.
  QStringList parts;
  int refRight = 0;
  for (const ProbeView& p : result_.probes) refRight += p.results.value(0).score >= 1.0;
  for (int c = 1; c < result_.specs.size(); ++c) {
    int same = 0, reads = 0, tokens = 0;
    for (const ProbeView& p : result_.probes) {
      same += p.results.value(c).sameAnswer;
      reads += static_cast<int>(p.results.value(c).quantizedReads);
      tokens += static_cast<int>(p.results.value(c).tokens);
    }
    parts << tr("%1: %2% agree")
                 .arg(result_.specs[c])
                 .arg(100.0 * same / std::max<qsizetype>(1, result_.probes.size()), 0, 'f', 0);
    if (reads < tokens) parts.back() += tr(" (%1 of %2 answer tokens read quantized states)").arg(reads).arg(tokens);
  }
  summary_->setText(tr("%1 probes%2; the unquantized answer is right in %3. %4. Click a cell to open its probe as a "
                       "run.")
                        .arg(result_.probes.size())
                        .arg(result_.stopped ? tr(" (stopped)") : QString())
                        .arg(refRight)
                        .arg(parts.join(QStringLiteral("; "))));
  summary_->setToolTip(summary_->text());
  plot_->replot();
}

void ProbePage::listCell(qint64 length, int depth) {
  const int a = a_->currentIndex(), b = b_->currentIndex() - 1;
  cell_->setRowCount(0);
  for (const ProbeView& p : result_.probes) {
    if (p.length != length || p.depth != depth) continue;
    const int row = cell_->rowCount();
    cell_->insertRow(row);
    auto answer = [&](int c) {
      if (c < 0 || c >= p.results.size()) return QString();
      const ProbeAnswerView& x = p.results[c];
      return (c > 0 ? (x.sameAnswer ? QStringLiteral("= ") : QStringLiteral("≠ ")) : QString()) + x.text.trimmed();
    };
    const QStringList cells = {p.id, p.answers.join(QStringLiteral(", ")), answer(0), answer(a), answer(b)};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setToolTip(cells[c]);
      cell_->setItem(row, c, item);
    }
  }
}

void ProbePage::openCell(qint64 length, int depth) {
  listCell(length, depth);
  const int c = shownConfig();
  if (c < 1 || c > static_cast<int>(configs_.size())) return;
  const ProbeView* pick = nullptr;
  for (const ProbeView& p : result_.probes) {
    if (p.length != length || p.depth != depth) continue;
    if (!pick) pick = &p;
    if (c < p.results.size() && !p.results[c].sameAnswer) {
      pick = &p;
      break;
    }
  }
  if (pick) Q_EMIT runProbe(configs_[static_cast<std::size_t>(c - 1)], pick->prompt, pick->maxNew);
}

}  // namespace kvscope::ui
