#include "doctor_page.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <cmath>

#include "eval_page.h"  // TextPicker

namespace kvscope::ui {

DoctorPage::DoctorPage(QWidget* parent) : QWidget(parent) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout();
  const TextPicker picker = makeTextPicker(this, "doctor", tr("Calibration text"), 512, 1);
  text_ = picker.path;
  ctx_ = picker.ctx;
  windows_ = picker.windows;
  diagnose_ = new QPushButton(tr("Diagnose"), this);
  diagnose_->setObjectName("doctorButton");
  diagnose_->setToolTip(
      tr("One unquantized forward of the loaded model over the text: outlier channels, projection biases, fp8 "
         "overflow at vLLM's default scale, the rotations that apply, the boundary layers"));
  bar->addWidget(new QLabel(tr("Text"), this));
  bar->addWidget(text_, 3);
  bar->addWidget(picker.browse);
  bar->addWidget(new QLabel(tr("tokens/window"), this));
  bar->addWidget(ctx_);
  bar->addWidget(new QLabel(tr("windows"), this));
  bar->addWidget(windows_);
  bar->addWidget(diagnose_);
  facts_ = new QLabel(this);
  facts_->setObjectName("doctorFacts");
  facts_->setWordWrap(true);
  verdicts_ = new QWidget(this);
  verdicts_->setObjectName("doctorVerdicts");
  verdictLayout_ = new QVBoxLayout(verdicts_);
  verdictLayout_->setContentsMargins(0, 0, 0, 0);
  table_ = new QTableWidget(0, 9, this);
  table_->setObjectName("doctorTable");
  table_->setHorizontalHeaderLabels({tr("layer"), tr("|k| max"), tr("× median"), tr("k > 448"), tr("k bias"),
                                     tr("|v| max"), tr("× median"), tr("v > 448"), tr("v bias")});
  table_->horizontalHeaderItem(2)->setToolTip(tr("the largest key channel's max |k| ÷ the median channel's"));
  table_->horizontalHeaderItem(3)->setToolTip(
      tr("share of keys past 448: what vLLM's fp8 cache with its default scale of 1.0 saturates"));
  table_->horizontalHeaderItem(4)->setToolTip(tr("the k projection's largest |bias| (- without a bias)"));
  table_->verticalHeader()->setVisible(false);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  l->addLayout(bar);
  l->addWidget(facts_);
  l->addWidget(verdicts_);
  l->addWidget(table_, 1);
  connect(diagnose_, &QPushButton::clicked, this, &DoctorPage::diagnoseClicked);
}

DoctorRequest DoctorPage::request() const {
  DoctorRequest r;
  r.textPath = text_->text();
  r.ctx = ctx_->value();
  r.windows = windows_->value();
  return r;
}

void DoctorPage::showStarted(const DoctorRequest& r) {
  facts_->setText(tr("Diagnosing on %1 ...").arg(r.textPath));
}

void DoctorPage::showFailed(const QString& message) {
  facts_->setText(tr("Diagnosis failed: %1").arg(message));
}

void DoctorPage::setStartEnabled(bool on) {
  diagnose_->setEnabled(on);
}

namespace {

// fp8 on every layer, unit scale against calibrated scales, as a sentence after the facts (the doctor's own words).
QString fp8Line(const generate::DoctorFp8& f) {
  return f.measured() ? " " + QString::fromStdString(generate::doctorFp8Text(f)) + "." : QString();
}

}  // namespace

void DoctorPage::showResult(const DoctorResultView& result) {
  const generate::DoctorReport& r = result.report;
  facts_->setText(
      tr("%1 · %2 layers · %3 query / %4 KV heads (GQA %5:1) · head size %6 · %7 tokens of %8. llama.cpp's K/V "
         "rotation %9; TurboQuant, UltraQuant and mxfp4:rot=on %10. Boundary layers (vLLM leaves them unquantized for "
         "TurboQuant): %11.")
          .arg(QString::fromStdString(r.arch))
          .arg(r.layers)
          .arg(r.heads)
          .arg(r.kvHeads)
          .arg(r.kvHeads > 0 ? r.heads / r.kvHeads : 0)
          .arg(r.headDim)
          .arg(r.tokens)
          .arg(result.textPath, r.llamaCppRotation ? tr("applies") : tr("does not apply (not a multiple of 64)"),
               r.powerOfTwoHead ? tr("take the head size") : tr("need a power-of-two head size"),
               [&] {
                 QStringList s;
                 for (int b : r.boundaryLayers) s << QString::number(b);
                 return s.join(", ");
               }()) +
      fp8Line(r.fp8));
  // The verdicts: a line each, with Use for its config where it is a SPEC.
  while (QLayoutItem* item = verdictLayout_->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  if (r.verdicts.empty()) {
    auto* ok = new QLabel(tr("Nothing alarming: no outlier channels, bias spikes or fp8 overflow."), verdicts_);
    ok->setObjectName("doctorVerdict");
    verdictLayout_->addWidget(ok);
  }
  for (const auto& v : r.verdicts) {
    auto* row = new QWidget(verdicts_);
    auto* h = new QHBoxLayout(row);
    h->setContentsMargins(0, 0, 0, 0);
    auto* text = new QLabel(QString::fromStdString(v.text), row);
    text->setObjectName("doctorVerdict");
    text->setWordWrap(true);
    text->setStyleSheet("color: #a04000");
    text->setToolTip(QString::fromStdString(v.config));
    h->addWidget(text, 1);
    std::optional<cache::CacheConfig> cfg;
    try {
      cfg = cache::parseSpec(v.config);
    } catch (const cache::ConfigError&) {  // a command (calibrate), not a SPEC: shown in the tooltip
    }
    if (cfg) {
      auto* use = new QPushButton(tr("Use"), row);
      use->setObjectName("doctorUse");
      use->setToolTip(tr("Load %1 into the form").arg(QString::fromStdString(v.config)));
      connect(use, &QPushButton::clicked, this, [this, c = *cfg] { Q_EMIT configChosen(c); });
      h->addWidget(use);
    }
    verdictLayout_->addWidget(row);
  }
  table_->setRowCount(static_cast<int>(r.sides.size()));
  auto pct = [](const generate::DoctorSide& s) {
    return s.overUnitScale ? QString::number(100.0 * double(s.overUnitScale) / double(s.values), 'g', 3) + "%"
                           : QString("0");
  };
  auto bias = [](const generate::DoctorSide& s) {
    return s.hasBias ? QString::number(s.biasMax, 'g', 4) : QString("-");
  };
  for (int l = 0; l < static_cast<int>(r.sides.size()); ++l) {
    const auto& k = r.sides[static_cast<std::size_t>(l)][0];
    const auto& v = r.sides[static_cast<std::size_t>(l)][1];
    const QStringList cells = {QString::number(l),
                               QString::number(k.amax, 'g', 4),
                               QString::number(k.outlierRatio, 'f', 1),
                               pct(k),
                               bias(k),
                               QString::number(v.amax, 'g', 4),
                               QString::number(v.outlierRatio, 'f', 1),
                               pct(v),
                               bias(v)};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      table_->setItem(l, c, item);
    }
  }
}

}  // namespace kvscope::ui
