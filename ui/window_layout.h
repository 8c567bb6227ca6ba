// The window's dock arrangement: how docks are added, sized for the screen, and which saved layouts are restored.
// Free functions over QMainWindow, so that MainWindow only composes.
#pragma once

#include <QString>
#include <Qt>

class QByteArray;
class QDockWidget;
class QMainWindow;
class QWidget;

namespace kvscope::ui {

/// Saved dock states carry this version: a layout saved by an older arrangement (the plots stacked three high, taller
/// than a 1080p screen) is not restored.
inline constexpr int kLayoutVersion = 3;

QDockWidget* addDock(QMainWindow* w, const QString& title, const QString& name, QWidget* content,
                     Qt::DockWidgetArea area);
/// Dock sizes for the window's current size: run panel left, plots right, runs and token map below.
void sizeDocks(QMainWindow* w);
/// The saved geometry, or the default size, either at most the screen's available area.
void fitToScreen(QMainWindow* w, const QByteArray& savedGeometry);
/// Shrinks the window back within the screen's available area (never below its minimum) when a view's change grew it
/// past: a label's height for a narrow width, settling after a switch of views, can raise the minimum for a moment,
/// and Qt grows the window then but never shrinks it again.
void keepWithinScreen(QMainWindow* w);

}  // namespace kvscope::ui
