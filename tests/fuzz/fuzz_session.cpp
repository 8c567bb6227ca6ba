// libFuzzer target: a workbench session file (ui/session.cpp, Qt JSON) -> Session. Only SessionError may come out,
// with a message; and whatever reads must write and read back to the same file (what the writer emits is what the
// reader accepts, and nothing is lost or changed on the way).
#include <QByteArray>
#include <cstddef>
#include <cstdint>

#include "session.h"

namespace ui = kvscope::ui;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ui::Session s;
  try {
    s = ui::parseSession(QByteArray(reinterpret_cast<const char*>(data), static_cast<qsizetype>(size)),
                         "fuzz.kvscope.json");
  } catch (const ui::SessionError& e) {
    if (*e.what() == '\0') __builtin_trap();
    return 0;
  }
  const QByteArray written = ui::sessionJson(s);
  const ui::Session again = ui::parseSession(written, "written.kvscope.json");  // an exception here aborts the run
  if (again.modelPath != s.modelPath || again.runs.size() != s.runs.size()) __builtin_trap();
  for (qsizetype i = 0; i < s.runs.size(); ++i)
    if (again.runs[i]->tokens.size() != s.runs[i]->tokens.size() ||
        again.runs[i]->cache.memory.size() != s.runs[i]->cache.memory.size() ||
        again.runs[i]->beamTexts != s.runs[i]->beamTexts || again.runs[i]->spec != s.runs[i]->spec)
      __builtin_trap();
  if (ui::sessionJson(again) != written) __builtin_trap();
  return 0;
}
