// streampool/errors.hpp — the exception types every public entry point may throw.
//
// error          misuse, bad input, bad config (std::runtime_error)
//   config_error a config string that does not parse or validate (key, value, position)
//   cuda_error   a driver call failed for a reason other than "out of memory" (keeps the status)
// out_of_memory  the device, the pool or the memory-fraction cap cannot serve a request; derives
//                from std::bad_alloc so generic code that catches bad_alloc keeps working.
#pragma once

#include "streampool/export.h"

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

namespace streampool {

/// Misuse of the API or bad input (unknown pointer, double free, size 0 where forbidden, ...).
class STREAMPOOL_API error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A config string or environment variable that does not parse or validate.
class STREAMPOOL_API config_error : public error {
 public:
  config_error(std::string message, std::string key, std::size_t position)
      : error(std::move(message)), key_(std::move(key)), position_(position) {}
  /// The offending key ("" when the problem is not tied to one key).
  [[nodiscard]] const std::string& key() const noexcept { return key_; }
  /// 0-based character offset in the config string where the problem starts.
  [[nodiscard]] std::size_t position() const noexcept { return position_; }

 private:
  std::string key_;
  std::size_t position_;
};

/// A failed driver call. `native_status()` is the cudaError_t / CUresult value (or the sim
/// driver's code); the message carries its name and description.
class STREAMPOOL_API cuda_error : public error {
 public:
  cuda_error(std::string message, int native_status)
      : error(std::move(message)), native_status_(native_status) {}
  [[nodiscard]] int native_status() const noexcept { return native_status_; }

 private:
  int native_status_;
};

/// The request cannot be served: device exhausted, memory-fraction cap reached, or the request is
/// absurdly large. `what()` holds the full diagnostic (see Note [OOM message] in src/core).
class STREAMPOOL_API out_of_memory : public std::bad_alloc {
 public:
  out_of_memory(std::string message, std::size_t requested_bytes, int device)
      : message_(std::move(message)), requested_bytes_(requested_bytes), device_(device) {}
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }
  [[nodiscard]] std::size_t requested_bytes() const noexcept { return requested_bytes_; }
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  std::string message_;
  std::size_t requested_bytes_;
  int device_;
};

}  // namespace streampool
