// c_api_internal.hpp — lets tests (and embedders) install the allocator behind the C API, e.g. one
// built on the simulated driver. Not part of the public headers.
#pragma once

#include <memory>

#include "streampool/allocator.hpp"

namespace streampool::detail {

/// Installs `alloc` as the C API's allocator. @throws error if one is already installed.
void c_api_install(std::unique_ptr<allocator> alloc);
/// Removes and returns the C API's allocator (nullptr if none), whatever is still live.
std::unique_ptr<allocator> c_api_uninstall() noexcept;

}  // namespace streampool::detail
