// c_api_internal.hpp — the C API's allocator for the files of the C API and for tests: the
// accessor instance() (a lease that keeps the allocator alive while a call uses it, see Note [C API
// allocator lifetime] in c_api.cpp), and install/uninstall of an allocator, e.g. one built on the
// simulated driver; c_api_trace.cpp and c_api_host.cpp reach the allocator through it with the
// same error handling. Not part of the public headers.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "streampool/allocator.hpp"
#include "streampool/host_allocator.hpp"

namespace streampool::c_api_impl {

struct c_api_instance;  // c_api.cpp: the allocator and its records of live allocations

/// A reference to the C API's allocator that keeps it alive: streampool_shutdown (or
/// c_api_uninstall) waits until every lease is gone before it destroys the allocator. Hold it only
/// for the duration of one call. Use it as a pointer: `instance()->allocate(...)`.
class allocator_lease {
 public:
  allocator_lease(allocator_lease&& other) noexcept : instance_(other.instance_) { other.instance_ = nullptr; }
  allocator_lease(const allocator_lease&) = delete;
  allocator_lease& operator=(const allocator_lease&) = delete;
  allocator_lease& operator=(allocator_lease&&) = delete;
  ~allocator_lease();

  [[nodiscard]] allocator* operator->() const noexcept;
  [[nodiscard]] allocator& operator*() const noexcept { return *operator->(); }
  [[nodiscard]] c_api_instance& owner() const noexcept { return *instance_; }

 private:
  friend allocator_lease instance();
  explicit allocator_lease(c_api_instance* instance) noexcept : instance_(instance) {}
  c_api_instance* instance_;
};

/// The C API's allocator, created from the environment on first use.
/// @throws what make_allocator() throws (config_error, cuda_error)
[[nodiscard]] allocator_lease instance();

/// What instance() calls to create the allocator on first use (and after a shutdown); empty (the
/// default) = make_allocator() from the environment. For tests: e.g. allocators on the sim driver.
void c_api_set_factory(std::function<std::unique_ptr<allocator>()> factory);

/// Installs `alloc` as the C API's allocator. @throws error if one is already installed.
void c_api_install(std::unique_ptr<allocator> alloc);
/// Removes and returns the C API's allocator (nullptr if none), whatever is still live; waits for
/// the calls using it to return.
std::unique_ptr<allocator> c_api_uninstall() noexcept;

/// Runs `body` as every C entry point does: any exception becomes the returned status and the
/// calling thread's streampool_last_error(); success clears them.
int c_api_guarded(const std::function<void()>& body) noexcept;
/// c_api_guarded over the C API's allocator (created from the environment on first use).
int c_api_with_allocator(const std::function<void(allocator&)>& body) noexcept;

/// Captures the C API's allocator tracks because nobody announced them (routing open, or pool
/// held until the graph is destroyed): Note [Captures the C API was not told about] in
/// c_api_capture.cpp. 0 when no allocator exists. For tests.
std::size_t c_api_unannounced_captures() noexcept;

/// Sets the calling thread's streampool_last_status() / streampool_last_error() (shared by every
/// file of the C API); returns `status`.
int c_api_set_last(int status, std::string message) noexcept;

/// Misuse of a C API lifecycle (init twice, shutdown with live allocations): STREAMPOOL_ERROR_STATE.
struct state_error : error {
  using error::error;
};

/// Called inside a catch block: the status of the exception in flight, recorded as the calling
/// thread's last status and message (Note [One exception ladder] in c_api.cpp).
int c_api_fail_current() noexcept;

/// The host C API's allocator (src/c_api/c_api_host.cpp): install one (e.g. on the sim driver) before
/// first use. @throws error if one is already installed.
void c_api_host_install(std::unique_ptr<host_allocator> alloc);
/// Removes and returns it (nullptr if none), whatever is still live.
std::unique_ptr<host_allocator> c_api_host_uninstall() noexcept;

}  // namespace streampool::c_api_impl
