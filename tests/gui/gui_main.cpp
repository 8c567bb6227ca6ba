// The GUI tests (gui.workbench): the window's fixture first, then the workbench's, in one QApplication.
#include <QApplication>
#include <QTest>

#include "gui_tests.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  app.setAttribute(Qt::AA_Use96Dpi, true);
  QTEST_SET_MAIN_SOURCE_PATH
  int rc = kvscope::guitest::runWindowTests(argc, argv);
  rc |= kvscope::guitest::runWorkbenchTests(argc, argv);
  rc |= kvscope::guitest::runLongContextTests(argc, argv);
  return rc;
}
