// allocator_factory.cpp — make_allocator(): picks the backend named by the config and reports the
// config's warnings to the warning handler; with debug_checks:True the backend is wrapped in
// checking mode (src/check).

#include "check/checking_allocator.hpp"
#include "core/backends.hpp"
#include "streampool/allocator.hpp"

namespace streampool {

namespace {

std::unique_ptr<allocator> make_backend(allocator_config config, std::shared_ptr<driver> drv) {
  switch (config.backend) {
    case backend_kind::native:
      return native::make_native_allocator(std::move(config), std::move(drv));
    case backend_kind::cuda_malloc_async:
      return async::make_async_allocator(std::move(config), std::move(drv));
  }
  throw error("make_allocator: unknown backend");
}

}  // namespace

std::unique_ptr<allocator> make_allocator(allocator_config config, std::shared_ptr<driver> drv) {
  if (!drv) throw error("make_allocator: driver is null; pass make_cuda_driver() or a sim_driver");
  for (const std::string& warning : config.warnings) warn(warning);
  if (config.debug_checks) {  // checking mode wraps either backend (src/check)
    std::unique_ptr<allocator> inner = make_backend(config, drv);
    return check_impl::make_checking_allocator(std::move(inner), std::move(config), std::move(drv));
  }
  return make_backend(std::move(config), std::move(drv));
}

std::unique_ptr<allocator> make_allocator() { return make_allocator(config_from_env(), make_cuda_driver()); }

}  // namespace streampool
