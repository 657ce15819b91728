// Error and Result: the one error type of the project. An Error names what
// failed (a path, a value) and keeps errno where one applies, so callers can
// tell "vanished" (ENOENT/ESRCH) from "denied" (EACCES/EPERM) without parsing text.
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace gpureap::sys {

struct Error {
  int code = 0;          // errno, or 0 when the failure is not a system call's
  std::string message;   // what failed, naming the file or value

  [[nodiscard]] bool vanished() const { return code == ENOENT || code == ESRCH; }
  [[nodiscard]] bool denied() const { return code == EACCES || code == EPERM; }
};

// Builds an Error from errno (captured by the caller right after the failing call).
Error errno_error(int saved_errno, std::string what);

template <class T>
class Result {
 public:
  Result(T value) : data_(std::move(value)) {}           // NOLINT(google-explicit-constructor)
  Result(Error error) : data_(std::move(error)) {}       // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  [[nodiscard]] const Error& error() const { return std::get<Error>(data_); }

 private:
  std::variant<T, Error> data_;
};

// Result for operations that return nothing on success.
struct Ok {};
using Status = Result<Ok>;

}  // namespace gpureap::sys
