#include "message_bar.h"

#include <QEvent>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QPainter>
#include <QPushButton>
#include <QStyle>
#include <QToolButton>
#include <QToolTip>

namespace kvscope::ui {

MessageBar::MessageBar(QWidget* parent) : QFrame(parent) {
  setObjectName("messageBar");
  auto* l = new QHBoxLayout(this);
  l->setContentsMargins(8, 6, 4, 6);
  icon_ = new QLabel(this);
  text_ = new QLabel(this);
  text_->setObjectName("messageText");
  text_->setWordWrap(true);
  text_->setTextFormat(Qt::PlainText);  // engine and file errors quote paths and inputs: never markup
  text_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  text_->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
  actions_ = new QHBoxLayout();
  close_ = new QToolButton(this);
  close_->setObjectName("messageBarClose");
  close_->setIcon(style()->standardIcon(QStyle::SP_TitleBarCloseButton));
  if (close_->icon().isNull()) close_->setText(QStringLiteral("×"));
  close_->setAutoRaise(true);
  close_->setToolTip(tr("Dismiss"));
  l->addWidget(icon_, 0, Qt::AlignTop);
  l->addWidget(text_, 1);
  l->addLayout(actions_);
  l->addWidget(close_, 0, Qt::AlignTop);
  connect(close_, &QToolButton::clicked, this, &MessageBar::dismiss);
  setVisible(false);
}

void MessageBar::showMessage(Kind kind, const QString& text, const QVector<Action>& actions) {
  kind_ = kind;
  // The colours are set whole (text too): a light bar must stay readable under a dark desktop theme.
  setStyleSheet(kind == Kind::Error
                    ? "QFrame#messageBar { background: #fdecea; border: 1px solid #b00020; border-radius: 3px; }"
                      "QFrame#messageBar > QLabel { color: #3a0010; }"
                : kind == Kind::Warning
                    ? "QFrame#messageBar { background: #fff4e0; border: 1px solid #c77700; border-radius: 3px; }"
                      "QFrame#messageBar > QLabel { color: #3a2400; }"
                    : "QFrame#messageBar { background: #e8f1fb; border: 1px solid #3465a4; border-radius: 3px; }"
                      "QFrame#messageBar > QLabel { color: #0d2440; }");
  const int px = style()->pixelMetric(QStyle::PM_SmallIconSize, nullptr, this);
  const auto icon = kind == Kind::Error     ? QStyle::SP_MessageBoxCritical
                    : kind == Kind::Warning ? QStyle::SP_MessageBoxWarning
                                            : QStyle::SP_MessageBoxInformation;
  icon_->setPixmap(style()->standardIcon(icon).pixmap(px, px));
  text_->setText(text);
  // The old buttons may be the sender of the click that led here: out of the bar now, deleted once that signal has
  // returned.
  while (QLayoutItem* item = actions_->takeAt(0)) {
    if (QWidget* w = item->widget()) {
      w->hide();
      w->setParent(nullptr);
      w->deleteLater();
    }
    delete item;
  }
  for (const Action& a : actions) {
    auto* b = new QPushButton(a.text, this);
    b->setObjectName(a.objectName);
    const auto run = a.run;
    connect(b, &QPushButton::clicked, this, [this, run] {
      dismiss();
      if (run) run();
    });
    actions_->addWidget(b, 0, Qt::AlignTop);
    b->show();  // the layout would show it only later, from the event loop, when the bar is already up
  }
  show();
}

QString MessageBar::text() const {
  return text_->text();
}

void MessageBar::dismiss() {
  if (isHidden()) return;
  hide();
  Q_EMIT dismissed();
}

ElidedLabel::ElidedLabel(QWidget* parent) : QLabel(parent) {
  setTextFormat(Qt::PlainText);
}

void ElidedLabel::setText(const QString& text) {
  setPalette(QPalette());  // the inherited colours again
  QLabel::setText(text);
}

void ElidedLabel::setError(const QString& text) {
  QPalette p = palette();
  p.setColor(QPalette::WindowText, QColor(0xb0, 0x00, 0x20));
  setPalette(p);
  QLabel::setText(text);
}

QString ElidedLabel::line() const {
  return text().simplified();
}

bool ElidedLabel::isElided() const {
  const int room = contentsRect().width() - 2 * margin();
  return fontMetrics().horizontalAdvance(line()) > room;
}

QSize ElidedLabel::minimumSizeHint() const {
  const QMargins m = contentsMargins();
  return {fontMetrics().averageCharWidth() * 6 + m.left() + m.right() + 2 * margin(),
          fontMetrics().height() + m.top() + m.bottom() + 2 * margin()};
}

QSize ElidedLabel::sizeHint() const {
  const QMargins m = contentsMargins();
  return {fontMetrics().horizontalAdvance(line()) + m.left() + m.right() + 2 * margin(), minimumSizeHint().height()};
}

void ElidedLabel::paintEvent(QPaintEvent*) {
  QPainter p(this);
  drawFrame(&p);
  const QRect r = contentsRect().adjusted(margin(), margin(), -margin(), -margin());
  const QString shown = fontMetrics().elidedText(line(), Qt::ElideRight, r.width());
  style()->drawItemText(&p, r, QStyle::visualAlignment(layoutDirection(), alignment()) | Qt::TextSingleLine, palette(),
                        isEnabled(), shown, foregroundRole());
}

bool ElidedLabel::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip && isElided()) {
    QToolTip::showText(static_cast<QHelpEvent*>(e)->globalPos(), text(), this);
    return true;
  }
  return QLabel::event(e);
}

}  // namespace kvscope::ui
