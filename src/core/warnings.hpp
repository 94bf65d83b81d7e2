// warnings.hpp — warn(), for the layers that report a warning and need nothing else of the
// allocator interface. The public declaration (with the handler it calls, set_warning_handler)
// is in streampool/allocator.hpp; this one is the same function, defined in warnings.cpp.
#pragma once

#include <string_view>

#include "streampool/export.h"

namespace streampool {

/// Passes `message` to the process-wide warning handler (by default: printed once to stderr).
STREAMPOOL_API void warn(std::string_view message);

}  // namespace streampool
