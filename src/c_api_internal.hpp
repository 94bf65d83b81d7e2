// c_api_internal.hpp — lets tests (and embedders) install the allocator behind the C API, e.g. one
// built on the simulated driver, and lets the C entry points outside c_api.cpp (c_api_trace.cpp)
// reach the allocator with the same error handling. Not part of the public headers.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "streampool/allocator.hpp"
#include "streampool/host_allocator.hpp"

namespace streampool::detail {

/// Installs `alloc` as the C API's allocator. @throws error if one is already installed.
void c_api_install(std::unique_ptr<allocator> alloc);
/// Removes and returns the C API's allocator (nullptr if none), whatever is still live.
std::unique_ptr<allocator> c_api_uninstall() noexcept;

/// Runs `body` as every C entry point does: any exception becomes the returned status and the
/// calling thread's streampool_last_error(); success clears them.
int c_api_guarded(const std::function<void()>& body) noexcept;
/// c_api_guarded over the C API's allocator (created from the environment on first use).
int c_api_with_allocator(const std::function<void(allocator&)>& body) noexcept;

/// Sets the calling thread's streampool_last_status() / streampool_last_error() (shared by every
/// file of the C API); returns `status`.
int c_api_set_last(int status, std::string message) noexcept;

/// The host C API's allocator (src/c_api_host.cpp): install one (e.g. on the sim driver) before
/// first use. @throws error if one is already installed.
void c_api_host_install(std::unique_ptr<host_allocator> alloc);
/// Removes and returns it (nullptr if none), whatever is still live.
std::unique_ptr<host_allocator> c_api_host_uninstall() noexcept;

}  // namespace streampool::detail
