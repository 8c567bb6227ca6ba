// The window's menu bar (File, Run, View, Help): dialogs in front of MainWindow's public slots, and the recent models.
#pragma once

class QString;

namespace kvscope::ui {

class MainWindow;

void buildMenus(MainWindow* w);
/// Puts `path` first in File > Open recent (at most eight, kept in QSettings).
void rememberModel(const QString& path);

}  // namespace kvscope::ui
