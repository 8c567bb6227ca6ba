// A connection between the engine's thread and the GUI's whose hand-off of the signal's arguments is visible to
// ThreadSanitizer (ui/thread_handoff.h).
//
// A plain queued connection copies the arguments into Qt's event in the sending thread and reads that copy in the
// receiving one, ordered by a mutex inside libQt6Core that TSan cannot see in Debian's uninstrumented Qt. Announcing
// the order ourselves (release before the emit, acquire before the slot) still leaves Qt's copy after the release:
// a race to TSan, which it can only be told to ignore when it still has the copy's stack, and a run that keeps a
// command queued for a minute (a load posted while a generation runs) outlives that history. So the arguments do not
// travel in Qt's event: a direct connection, called first in the sending thread, copies them into a mailbox under a
// std::mutex (which TSan sees) and releases; the queued connection, which takes no arguments, takes the copy out in
// the receiving thread. Qt still copies the arguments into its event, never read, only destroyed (tests/tsan.supp).
// Events to one receiver run in the order they were posted, and each emit posts one and puts one, so each slot call
// takes its own emit's arguments.
#pragma once

#include <QObject>
#include <deque>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "thread_handoff.h"

namespace kvscope::app {

namespace detail {

template <typename... Args>
class Mailbox {
 public:
  using Letter = std::tuple<std::decay_t<Args>...>;
  void put(Letter l) {
    const std::lock_guard lock(mutex_);
    letters_.push_back(std::move(l));
  }
  Letter take() {
    const std::lock_guard lock(mutex_);
    Letter l = std::move(letters_.front());
    letters_.pop_front();
    return l;
  }

 private:
  std::mutex mutex_;
  std::deque<Letter> letters_;
};

}  // namespace detail

/// Calls `receive(args...)` in `context`'s thread for every emit of `from`'s `signal`, with a copy of the emit's
/// arguments made in the emitting thread. The connection ends with `context` (or `from`).
template <typename Sender, typename... Args, typename Receive>
void link(Sender* from, void (Sender::*signal)(Args...), QObject* context, Receive receive) {
  auto box = std::make_shared<detail::Mailbox<Args...>>();
  QObject::connect(
      from, signal, context,
      [box](Args... args) {
        box->put(typename detail::Mailbox<Args...>::Letter(args...));
        ui::handoff::release();
      },
      Qt::DirectConnection);
  QObject::connect(from, signal, context, [box, receive] {
    ui::handoff::acquire();
    std::apply(receive, box->take());
  });
}

/// The same, calling `slot` on `to`.
template <typename Sender, typename Receiver, typename... Args>
void link(Sender* from, void (Sender::*signal)(Args...), Receiver* to, void (Receiver::*slot)(Args...)) {
  link(from, signal, to, [to, slot](const std::decay_t<Args>&... args) { (to->*slot)(args...); });
}

}  // namespace kvscope::app
