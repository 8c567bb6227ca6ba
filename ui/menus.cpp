#include "menus.h"

#include <QAction>
#include <QApplication>
#include <QDockWidget>
#include <QFileDialog>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>

#include "main_window.h"

namespace kvscope::ui {

namespace {
QString tr(const char* s) {
  return QCoreApplication::translate("MainWindow", s);
}

void addFileMenu(MainWindow* w) {
  QMenu* file = w->menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open model…"), w, [w] {
    const QString p =
        QFileDialog::getOpenFileName(w, tr("Open model"), QString(), tr("GGUF models (*.gguf);;All files (*)"));
    if (!p.isEmpty()) w->openModel(p);
  });
  open->setShortcut(QKeySequence::Open);
  file->addAction(tr("Open model &directory…"), w, [w] {
    const QString p = QFileDialog::getExistingDirectory(w, tr("Open a Hugging Face model directory"));
    if (!p.isEmpty()) w->openModel(p);
  });
  QMenu* recent = file->addMenu(tr("Open &recent"));
  recent->setObjectName("recentMenu");
  // Filled when it opens: whatever opened a model since (this window or another) is there.
  QObject::connect(recent, &QMenu::aboutToShow, w, [w, recent] {
    recent->clear();
    const QStringList paths = QSettings().value("recent/models").toStringList();
    for (const QString& p : paths) recent->addAction(p, w, [w, p] { w->openModel(p); });
    if (paths.isEmpty()) recent->addAction(tr("(none yet)"))->setEnabled(false);
  });
  QAction* exp = file->addAction(tr("&Export cache config…"), w, [w] {
    // One dialog for every target; the filter chosen says which.
    const auto targets = exportFilters();
    QStringList filters;
    for (const auto& t : targets) filters << t.second;
    QString chosen = filters.front();
    const QString path =
        QFileDialog::getSaveFileName(w, tr("Export cache config"), "cache_config.json", filters.join(";;"), &chosen);
    if (path.isEmpty()) return;
    for (const auto& t : targets)
      if (t.second == chosen) w->exportConfigTo(path, t.first);
  });
  exp->setShortcut(QKeySequence(tr("Ctrl+E")));
  file->addAction(tr("&Save session…"), w, [w] {
    const QString p = QFileDialog::getSaveFileName(w, tr("Save session"), "session.kvscope.json",
                                                   tr("kvscope sessions (*.kvscope.json *.json)"));
    if (!p.isEmpty()) w->saveSessionTo(p);
  });
  file->addAction(tr("Open &session…"), w, [w] {
    const QString p =
        QFileDialog::getOpenFileName(w, tr("Open session"), QString(), tr("kvscope sessions (*.kvscope.json *.json)"));
    if (!p.isEmpty()) w->openSession(p);
  });
  file->addAction(tr("Export runs as &CSV…"), w, [w] {
    const QString p = QFileDialog::getSaveFileName(w, tr("Export runs"), "kvscope_runs.csv", tr("CSV (*.csv)"));
    if (!p.isEmpty()) w->exportRunsTo(p);
  });
  file->addAction(tr("Export &plots as PNG/PDF…"), w, [w] {
    const QString dir = QFileDialog::getExistingDirectory(w, tr("Export plots to a folder"));
    if (!dir.isEmpty()) w->exportPlotsTo(dir);
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, w, &QWidget::close);
}
}  // namespace

void buildMenus(MainWindow* w) {
  addFileMenu(w);
  QMenu* runMenu = w->menuBar()->addMenu(tr("&Run"));
  runMenu->addAction(tr("&Run"), w, &MainWindow::run)->setShortcut(QKeySequence(tr("Ctrl+R")));
  runMenu->addAction(tr("&Stop"), w, &MainWindow::stop)->setShortcut(QKeySequence(Qt::Key_Escape));
  QMenu* view = w->menuBar()->addMenu(tr("&View"));
  view->setObjectName("viewMenu");
  for (QDockWidget* d : w->findChildren<QDockWidget*>(Qt::FindDirectChildrenOnly))
    view->addAction(d->toggleViewAction());
  view->addSeparator();
  view->addAction(tr("&Reset layout"), w, &MainWindow::resetLayout)->setObjectName("resetLayout");
  QMenu* help = w->menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About kvscope"), w, [w] {
    QMessageBox::about(w, tr("About kvscope"),
                       tr("<b>kvscope %1</b><br>Quantized KV-cache workbench.<br>Qt %2.")
                           .arg(QApplication::applicationVersion(), qVersion()));
  });
}

void rememberModel(const QString& path) {
  QSettings s;
  QStringList recent = s.value("recent/models").toStringList();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > 8) recent.removeLast();
  s.setValue("recent/models", recent);
}

}  // namespace kvscope::ui
