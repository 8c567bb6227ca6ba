#include "docks/text_view.h"

#include <QComboBox>
#include <QLabel>
#include <QScrollBar>
#include <QSignalBlocker>
#include <QStandardItemModel>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <utility>

namespace kvscope::ui {

namespace {
QColor klColour(float kl) {
  // 0 -> pale green, 0.05 -> yellow, >= 0.5 -> red; infinite (NaN logits) -> purple.
  if (!std::isfinite(kl)) return QColor(190, 120, 230);
  const double t = std::clamp(std::log10(1.0 + kl * 100.0) / std::log10(51.0), 0.0, 1.0);
  return QColor::fromHsvF((1.0 - t) * 0.33, 0.45, 1.0);
}
}  // namespace

TextView::TextView(Selection* selection, QWidget* parent) : QWidget(parent), sel_(selection) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout();
  metric_ = new QComboBox(this);
  metric_->setObjectName("colourBy");
  metric_->addItems(
      {tr("KL vs reference"), tr("top-1 agreement"), tr("K/V quantization error (selected layer)"), tr("log-prob")});
  metric_->setToolTip(
      tr("What each token's colour shows; the error of a token is that of its keys and values in the "
         "selected layer (grey: not quantized, e.g. still in a residual window)"));
  key_ = new QLabel(this);
  key_->setObjectName("colourKey");
  key_->setWordWrap(true);
  runTitle_ = new QLabel(this);
  runTitle_->setObjectName("textRunTitle");
  runTitle_->setTextFormat(Qt::PlainText);
  bar->addWidget(runTitle_);
  bar->addWidget(new QLabel(tr("Colour by"), this));
  bar->addWidget(metric_);
  bar->addWidget(key_, 1);
  l->addLayout(bar);
  browser_ = new QTextBrowser(this);
  browser_->setObjectName("textView");
  QFont mono("monospace", 11);
  mono.setStyleHint(QFont::Monospace);
  browser_->document()->setDefaultFont(mono);
  browser_->setOpenLinks(false);
  browser_->setPlaceholderText(tr("Generated text appears here, token by token. Click a token to select it."));
  l->addWidget(browser_, 1);
  connect(metric_, &QComboBox::currentIndexChanged, this, [this] { redraw(); });
  updateKey();
  connect(browser_, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (url.scheme() == "tok") sel_->setToken(url.path().toLongLong());
  });
  connect(sel_, &Selection::changed, this, [this] { redraw(); });
}

QString TextView::plainText() const {
  return browser_->toPlainText();
}

QString TextView::colourKey() const {
  return key_->text();
}

void TextView::updateKey() {
  auto sw = [](const QColor& c, const QString& what) {
    return QString("<span style='background-color:%1'>&nbsp;&nbsp;&nbsp;</span>&nbsp;%2").arg(c.name(), what);
  };
  key_->setToolTip({});
  const int m = metric_->currentIndex();
  const bool reference = !last_ || last_->shadow;
  QStringList k;
  if (m == Kl && reference) {
    k << sw(klColour(0), tr("KL 0")) << sw(klColour(0.05f), "0.05") << sw(klColour(0.5f), tr("&ge; 0.5 nats"))
      << sw(klColour(INFINITY), tr("NaN/inf"));
  } else if (m == Top1 && reference) {
    k << sw(QColor(200, 240, 200), tr("same top-1 as the reference")) << sw(QColor(255, 170, 170), tr("differs"));
  } else if (m == KvError) {
    k << sw(QColor::fromHsvF(0.33, 0.45, 1.0), tr("low |error|"))
      << sw(QColor::fromHsvF(0.0, 0.45, 1.0), tr("the run's worst token in this layer"))
      << sw(QColor(225, 225, 225), tr("not quantized"));
  } else {
    if (last_ && !last_->beamSteps.isEmpty())
      k << tr("<i>beam search (no shadow reference): each token coloured by its log-prob in the beam</i>");
    else if (!reference)
      k << tr("<i>no shadow reference in this run: coloured by log-prob</i>");
    k << sw(QColor::fromHsvF(0.33, 0.35, 1.0), tr("p &asymp; 1")) << sw(QColor::fromHsvF(0.165, 0.35, 1.0), "0.5")
      << sw(QColor::fromHsvF(0.0, 0.35, 1.0), tr("p &asymp; 0"));
  }
  key_->setText(k.join(" &nbsp; "));
}

void TextView::setMetric(Metric m) {
  metric_->setCurrentIndex(static_cast<int>(m));
}

void TextView::show(const RunSnapshotPtr& run, const RunSnapshotPtr& against) {
  const bool sameRun = last_ && last_->runId == run->runId && against_ == against;
  const int before = sameRun ? shown_ : 0;
  last_ = run;
  against_ = against;
  // KL and top-1 need the shadow reference: without one (beam search, shadow off) they are not offered, and the
  // chosen metric comes back with the next run that has one.
  auto* items = qobject_cast<QStandardItemModel*>(metric_->model());
  for (const int m : {Kl, Top1})
    if (items && items->item(m)) items->item(m)->setEnabled(run->shadow);
  if (!run->shadow && (metric_->currentIndex() == Kl || metric_->currentIndex() == Top1)) {
    preferred_ = metric_->currentIndex();
    const QSignalBlocker quiet(metric_);
    metric_->setCurrentIndex(LogProb);
  } else if (run->shadow && preferred_ >= 0) {
    const QSignalBlocker quiet(metric_);
    metric_->setCurrentIndex(std::exchange(preferred_, -1));
  }
  runTitle_->setText(against ? tr("A: run #%1").arg(run->runId) : tr("run #%1").arg(run->runId));
  runTitle_->setToolTip(against ? tr("A: %1\nB: run #%2 %3").arg(run->spec).arg(against->runId).arg(against->spec)
                                : run->spec);
  if (against) {  // two runs: where B parts from A decides the marks, so the text is drawn whole
    if (run->tokenErrors) errors_ = run->tokenErrors;
    return redraw();
  }
  divergence_ = -1;
  if (!run->beamSteps.isEmpty()) {  // the beams reorder at every step: the sequence is traced again, whole
    if (run->tokenErrors) errors_ = run->tokenErrors;
    return redraw();
  }
  if (run->tokenErrors)
    errors_ = run->tokenErrors;
  else if (!sameRun)
    errors_.reset();
  // While a run streams, the tokens already shown keep their colour (KL, top-1, log-prob are per token): only the
  // new ones are appended, so a long text costs no more per snapshot than a short one. The error colouring depends
  // on the run's worst token, so it redraws whole.
  if (sameRun && before > 0 && before <= run->tokens.size() && metric_->currentIndex() != KvError) {
    QString html;
    for (int i = before; i < run->tokens.size(); ++i) html += tokenHtml(i);
    if (!html.isEmpty()) {
      QTextCursor c(browser_->document());
      c.movePosition(QTextCursor::End);
      c.insertHtml(html);
    }
    shown_ = static_cast<int>(run->tokens.size());
  } else {
    redraw();
  }
  if (!run->finished) browser_->moveCursor(QTextCursor::End);
}

QString TextView::tokenHtml(int i) const {
  const TokenView& t = tokens()[i];
  const qint64 pos = last_->promptTokens + i;
  const bool beams = !last_->beamSteps.isEmpty();
  QString tip = tr("position %1, id %2, log-prob %3%4")
                    .arg(pos)
                    .arg(t.id)
                    .arg(t.logprob, 0, 'f', 3)
                    .arg(beams ? tr(" in beam %1").arg(sel_->beam()) : QString());
  if (beams) tip += tr("\n  what the step kept after the same parent");
  if (last_->shadow)
    tip += tr("\nKL vs reference %1%2").arg(t.kl, 0, 'g', 3).arg(t.top1Agrees ? "" : tr(", top-1 differs"));
  if (!beams) tip += last_->shadow ? tr("\n  quantized            reference") : tr("\n  top candidates");
  for (int k = 0; k < t.top.size(); ++k) {
    tip += QString("\n  %1 %2").arg(t.top[k].first.toHtmlEscaped(), -10).arg(t.top[k].second, 7, 'f', 3);
    if (k < t.refTop.size())
      tip += QString("   %1 %2").arg(t.refTop[k].first.toHtmlEscaped(), -10).arg(t.refTop[k].second, 7, 'f', 3);
  }
  const bool selected = pos == sel_->token();
  return (i == divergence_ ? divergenceMark() : QString()) +
         QString(
             "<a href='tok:%1' style='color:black; text-decoration:%2; background-color:%3; white-space:pre-wrap;%4' "
             "title='%5'>%6</a>")
             .arg(pos)
             .arg(selected ? "underline" : "none", colour(t, pos).name(), selected ? " font-weight:bold;" : "",
                  tip.toHtmlEscaped(), t.text.toHtmlEscaped());
}

QString TextView::divergenceMark() const {
  // B's token where it parts from A (or its end), in B's colour, before A's token there.
  const QVector<TokenView>& b = against_->tokens;
  const int i = divergence_;
  const QString theirs = i < b.size() ? QString("«%1»").arg(b[i].text) : tr("(B ended)");
  return QString("<span style='color:white; background-color:#75507b;' title='%1'>&#9660;B %2</span>")
      .arg(tr("run #%1 (B) generated %2 here").arg(against_->runId).arg(theirs).toHtmlEscaped(),
           theirs.toHtmlEscaped());
}

void TextView::showErrors(const TokenErrorViewPtr& errors) {
  if (!errors || !last_ || errors->runId != last_->runId) return;
  errors_ = errors;
  if (metric_->currentIndex() == KvError) redraw();
}

QColor TextView::colour(const TokenView& t, qint64 pos) const {
  switch (metric_->currentIndex()) {
    case Kl:
      if (last_->shadow) return klColour(t.kl);
      break;
    case Top1:
      if (last_->shadow) return t.top1Agrees ? QColor(200, 240, 200) : QColor(255, 170, 170);
      break;
    case KvError: {
      const double e = errors_ && pos < errors_->tokens ? errors_->tokenMean(pos) : NAN;
      if (!std::isfinite(e) || errorScale_ <= 0) return QColor(225, 225, 225);  // not quantized (yet)
      // Mean |error| of the token's K and V: 0 -> green, the run's worst token in this layer -> red.
      return QColor::fromHsvF((1.0 - std::clamp(e / errorScale_, 0.0, 1.0)) * 0.33, 0.45, 1.0);
    }
    default:
      break;
  }
  return QColor::fromHsvF(0.33 * std::clamp(std::exp(t.logprob), 0.0f, 1.0f), 0.35, 1.0);
}

void TextView::redraw() {
  updateKey();
  if (!last_) return;
  divergence_ = -1;
  if (against_) {
    const QVector<TokenView>& a = tokens();
    const QVector<TokenView>& b = against_->tokens;
    const int common = static_cast<int>(std::min(a.size(), b.size()));
    int i = 0;
    while (i < common && a[i].id == b[i].id) ++i;
    if (i < a.size() || i < b.size()) divergence_ = i;
    // Short (the bar is one line at 1366 px); the run's colours are said by the tooltip's key.
    key_->setToolTip(key_->text());
    key_->setText(divergence_ < 0
                      ? tr("A #%1 and B #%2: the same %3 tokens").arg(last_->runId).arg(against_->runId).arg(a.size())
                      : tr("A #%1 and B #%2 agree on the first %3 generated tokens; <span style='color:white; "
                           "background-color:#75507b'>&#9660;B</span>: where they part")
                            .arg(last_->runId)
                            .arg(against_->runId)
                            .arg(i));
  }
  errorScale_ = 0;
  if (errors_ && metric_->currentIndex() == KvError)
    for (qint64 t = 0; t < errors_->tokens; ++t)
      if (const double e = errors_->tokenMean(t); std::isfinite(e)) errorScale_ = std::max(errorScale_, e);
  const auto* bar = browser_->verticalScrollBar();
  const int scroll = bar ? bar->value() : 0;
  QString html;
  if (!last_->beamSteps.isEmpty()) {
    beam_ = beamSequence(*last_, sel_->beam());
    html = tr("<b>beam %1</b> (what its cache rows hold after step %2; click another beam in Beams): ")
               .arg(sel_->beam())
               .arg(last_->beamSteps.back().step);
  }
  for (int i = 0; i < tokens().size(); ++i) html += tokenHtml(i);
  if (divergence_ >= 0 && divergence_ == tokens().size()) html += divergenceMark();  // A ended, B went on
  browser_->setHtml(html);
  shown_ = static_cast<int>(tokens().size());
  if (auto* b = browser_->verticalScrollBar()) b->setValue(scroll);
}

}  // namespace kvscope::ui
