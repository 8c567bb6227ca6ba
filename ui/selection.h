// The shared selection every view observes: the layer, KV head, token position and beam the user is looking at.
// Views set it when clicked and redraw when it changes; none calls another (MainWindow only composes them).
#pragma once

#include <QObject>
#include <algorithm>

namespace kvscope::ui {

class Selection : public QObject {
  Q_OBJECT
 public:
  using QObject::QObject;

  int layer() const { return layer_; }
  int head() const { return head_; }
  qint64 token() const { return token_; }  ///< absolute position (prompt included); -1: none
  int beam() const { return beam_; }

  void setLayer(int layer) { set(layer_, std::max(layer, 0)); }
  void setHead(int head) { set(head_, std::max(head, 0)); }
  void setToken(qint64 token) { set(token_, std::max<qint64>(token, -1)); }
  void setBeam(int beam) { set(beam_, std::max(beam, 0)); }
  /// A new model: its layers and heads differ, so the selection starts again.
  void clear() {
    layer_ = head_ = beam_ = 0;
    token_ = -1;
    Q_EMIT changed();
  }

 Q_SIGNALS:
  void changed();

 private:
  template <typename T>
  void set(T& field, T value) {
    if (field == value) return;
    field = value;
    Q_EMIT changed();
  }
  int layer_ = 0, head_ = 0, beam_ = 0;
  qint64 token_ = -1;
};

}  // namespace kvscope::ui
