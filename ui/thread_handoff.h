// Qt hands a queued signal's arguments from one thread to another through its event queue, under a mutex inside
// libQt6Core. ThreadSanitizer sees that lock only when Qt itself is built with `-sanitize thread` (Debian's is not),
// so without help everything the engine sends the window would look like a race. In a ThreadSanitizer build
// (KVSCOPE_TSAN) these two calls state the ordering the queue provides: release() in the sending thread after what it
// hands over is written, acquire() in the receiving thread before the slot reads. Elsewhere they compile to nothing.
// app/gui/thread_link.h makes every engine <-> window connection through them, with the arguments copied before the
// release.
#pragma once

#ifdef KVSCOPE_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace kvscope::ui::handoff {

#ifdef KVSCOPE_TSAN
inline constexpr bool enabled = true;
inline char token;
inline void release() {
  __tsan_release(&token);
}
inline void acquire() {
  __tsan_acquire(&token);
}
#else
inline constexpr bool enabled = false;
inline void release() {}
inline void acquire() {}
#endif

}  // namespace kvscope::ui::handoff
