// Session files: the finished runs of a workbench session (config, prompt size, tokens with their log-probs and KL,
// figures, per-layer memory) as JSON, so that a session can be reopened and compared later.
#pragma once

#include <QByteArray>
#include <QString>
#include <QVector>
#include <stdexcept>

#include "snapshots.h"
#include "util/error.h"

namespace kvscope::ui {

struct Session {
  QString modelPath;
  QVector<RunSnapshotPtr> runs;
};

/// A session file that cannot be read or written (ErrorCode::BadFile); the message names the file and the key.
class SessionError : public Error {
 public:
  explicit SessionError(const std::string& what) : Error(ErrorCode::BadFile, what) {}
};

/// Writes atomically (QSaveFile). Throws SessionError naming the file.
void saveSession(const Session& s, const QString& path);
/// Throws SessionError naming the file and the problem; nothing is half-read.
Session loadSession(const QString& path);
/// What loadSession does with the file's bytes; `name` is the file named in errors. Every key is type-checked and
/// every integer range-checked, and errors name the run, token or layer and the key.
Session parseSession(const QByteArray& bytes, const QString& name);
/// The JSON that saveSession writes.
QByteArray sessionJson(const Session& s);

}  // namespace kvscope::ui
