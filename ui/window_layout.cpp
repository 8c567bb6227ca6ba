#include "window_layout.h"

#include <QDockWidget>
#include <QLayout>
#include <QMainWindow>
#include <QScreen>
#include <algorithm>

namespace kvscope::ui {

namespace {
// The window frame is unknown until a window manager has mapped the window: leave room for a title bar and borders.
const QSize kFrameAllowance(16, 48);

}  // namespace

QDockWidget* addDock(QMainWindow* w, const QString& title, const QString& name, QWidget* content,
                     Qt::DockWidgetArea area) {
  auto* d = new QDockWidget(title, w);
  d->setObjectName(name);  // restorable layout
  d->setWidget(content);
  w->addDockWidget(area, d);
  return d;
}

void sizeDocks(QMainWindow* w) {
  auto* run = w->findChild<QDockWidget*>("runDock");
  auto* plots = w->findChild<QDockWidget*>("memoryDock");
  auto* runs = w->findChild<QDockWidget*>("runsDock");
  auto* tokens = w->findChild<QDockWidget*>("tokenErrorDock");
  const int left = std::clamp(w->width() * 22 / 100, 300, 400);
  w->resizeDocks({run, plots}, {left, std::clamp(w->width() * 30 / 100, 340, 620)}, Qt::Horizontal);
  w->resizeDocks({runs}, {std::clamp(w->height() * 40 / 100, 220, 420)}, Qt::Vertical);
  const int bottom = w->width() - left;
  // The runs table needs the room on a narrow screen (its config names beside nine figures); the token map reads at
  // a third of the width.
  const int share = w->width() < 1600 ? 7 : 6;
  w->resizeDocks({runs, tokens}, {bottom * share / 10, bottom * (10 - share) / 10}, Qt::Horizontal);
}

void fitToScreen(QMainWindow* w, const QByteArray& savedGeometry) {
  const QRect avail = w->screen()->availableGeometry();
  const QSize room = avail.size() - kFrameAllowance;
  if (!w->restoreGeometry(savedGeometry)) {
    w->resize(room);  // the first start takes the screen: the plots need every pixel
    w->move(avail.topLeft() +
            QPoint(std::max(0, room.width() - w->width()) / 2, std::max(0, room.height() - w->height()) / 2));
  } else if (!w->isMaximized() && !w->isFullScreen() && w->size().boundedTo(room) != w->size()) {
    w->resize(w->size().boundedTo(room));  // saved on a larger screen
  }
}

void keepWithinScreen(QMainWindow* w) {
  if (w->isMaximized() || w->isFullScreen() || !w->screen()) return;
  const QSize room = w->screen()->availableGeometry().size() - kFrameAllowance;
  if (w->width() <= room.width() && w->height() <= room.height()) return;
  if (w->layout()) w->layout()->activate();
  w->resize(w->size().boundedTo(room).expandedTo(w->minimumSizeHint()));
}

}  // namespace kvscope::ui
