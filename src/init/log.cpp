#include "init/log.hpp"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace gpureap::init {

namespace {

const char* level_tag(Level level) {
  switch (level) {
    case Level::kFatal: return "FATAL";
    case Level::kWarn: return "WARN ";
    case Level::kInfo: return "INFO ";
    case Level::kDebug: return "DEBUG";
    case Level::kTrace: return "TRACE";
  }
  return "?????";
}

}  // namespace

void Log::print(Level level, const char* fmt, ...) const {
  if (!enabled(level)) return;
  char buf[1024];
  int head = std::snprintf(buf, sizeof buf, "[%s gpureap-init (%d)] ", level_tag(level), static_cast<int>(pid));
  if (head < 0) return;
  size_t len = static_cast<size_t>(head);
  va_list ap;
  va_start(ap, fmt);
  int body = std::vsnprintf(buf + len, sizeof buf - len - 1, fmt, ap);
  va_end(ap);
  if (body < 0) return;
  len += static_cast<size_t>(body);
  if (len > sizeof buf - 2) len = sizeof buf - 2;  // truncated: still end the line
  buf[len++] = '\n';
  const char* p = buf;
  while (len > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // EPIPE, EBADF, EAGAIN: nowhere to log to; the init keeps working
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

const char* errno_name(int err) {
  const char* name = ::strerrorname_np(err);
  return name != nullptr ? name : "EUNKNOWN";
}

}  // namespace gpureap::init
