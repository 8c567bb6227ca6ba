// The window's messages: a bar above the generated text that shows an error (or an explanation with its fix) whole
// until it is dismissed, and a one-line status-bar label that never widens the window.
#pragma once

#include <QFrame>
#include <QLabel>
#include <QVector>
#include <functional>

class QHBoxLayout;
class QToolButton;

namespace kvscope::ui {

class MessageBar : public QFrame {
  Q_OBJECT
 public:
  enum class Kind { Error, Warning, Info };
  /// A button beside the text; clicking it dismisses the bar, then runs `run`.
  struct Action {
    QString text;
    QString objectName;
    std::function<void()> run;
  };

  explicit MessageBar(QWidget* parent = nullptr);
  /// Replaces what the bar shows with `text` (plain text, wrapped, selectable) and `actions`, and shows the bar.
  void showMessage(Kind kind, const QString& text, const QVector<Action>& actions = {});
  void showError(const QString& text) { showMessage(Kind::Error, text); }
  QString text() const;
  Kind kind() const { return kind_; }

 public Q_SLOTS:
  void dismiss();

 Q_SIGNALS:
  void dismissed();

 private:
  QLabel* icon_;
  QLabel* text_;
  QHBoxLayout* actions_;
  QToolButton* close_;
  Kind kind_ = Kind::Error;
};

/// A status-bar label: a long text is cut with "…" to the width the label gets, so a message cannot push the window
/// past the screen, and the whole text shows in the tooltip. text() stays the whole text.
class ElidedLabel : public QLabel {
  Q_OBJECT
 public:
  explicit ElidedLabel(QWidget* parent = nullptr);
  /// Hides QLabel::setText so that every new message also drops the error colour of the one before.
  void setText(const QString& text);
  /// The text in the error colour.
  void setError(const QString& text);
  bool isElided() const;
  QSize minimumSizeHint() const override;
  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* e) override;
  bool event(QEvent* e) override;

 private:
  QString line() const;  ///< the text on one line
};

}  // namespace kvscope::ui
