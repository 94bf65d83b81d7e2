// backends.hpp — internal constructors of the two backends, called by make_allocator()
// (src/factory). Declared in core, below both backends, so that each defines its own and the
// factory above them calls them: no layer includes one above it (docs/architecture.md, Layers).
#pragma once

#include <memory>

#include "streampool/allocator.hpp"

namespace streampool::native {

/// The caching backend (src/native). @throws error when the config cannot run on `drv`.
[[nodiscard]] std::unique_ptr<allocator> make_native_allocator(allocator_config config,
                                                               std::shared_ptr<driver> drv);

}  // namespace streampool::native

namespace streampool::async {

/// The stream-ordered pool backend (src/async). @throws error when the device lacks memory pools.
[[nodiscard]] std::unique_ptr<allocator> make_async_allocator(allocator_config config,
                                                              std::shared_ptr<driver> drv);

}  // namespace streampool::async
