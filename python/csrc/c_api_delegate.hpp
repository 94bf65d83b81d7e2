// c_api_delegate.hpp — the extension's table for streampool_set_delegate (c_api_delegate.cpp).
#pragma once

#include <streampool/c_api.h>

namespace streampool::torch_ext {

/// The table over the installed torch_allocator; lives until the process exits.
[[nodiscard]] const streampool_delegate& c_api_delegate() noexcept;

}  // namespace streampool::torch_ext
