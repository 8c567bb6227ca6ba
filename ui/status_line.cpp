#include "status_line.h"

#include <unistd.h>

#include <QCoreApplication>
#include <QFile>

namespace kvscope::ui {

QString statusLine(const QString& device, const RunSnapshotPtr& last, const DeviceMemoryView& loaded) {
  const auto tr = [](const char* s) { return QCoreApplication::translate("MainWindow", s); };
  QString text = tr("device %1").arg(device);
  const DeviceMemoryView mem = last && last->deviceMemory.total > 0 ? last->deviceMemory : loaded;
  if (mem.total > 0)
    text += tr(" (%1 of %2 GiB)").arg(mem.used / 1073741824.0, 0, 'f', 2).arg(mem.total / 1073741824.0, 0, 'f', 1);
  if (last) {
    text += tr(" — %1: %2 tokens, KV %3 MiB, prefill %4 tok/s, decode %5 tok/s")
                .arg(last->spec)
                .arg(last->tokens.size())
                .arg(last->cache.total().stored() / 1048576.0, 0, 'f', 2)
                .arg(last->prefillTokS, 0, 'f', 1)
                .arg(last->decodeTokS, 0, 'f', 1);
  }
  // Resident memory of the whole process (model, caches, GUI).
  QFile statm("/proc/self/statm");
  if (statm.open(QIODevice::ReadOnly)) {
    const auto parts = statm.readAll().split(' ');
    if (parts.size() > 1) text += tr(" — process %1 MiB").arg(parts[1].toLongLong() * sysconf(_SC_PAGESIZE) / 1048576);
  }
  return text;
}

}  // namespace kvscope::ui
