// driver_ipc_ops.cpp — the defaults of the calls that share VMM memory with other processes
// (vmm_export_fd, vmm_import_fd, vmm_retain): a driver that predates them (a test double, a wrapper) still
// compiles and reports that it cannot. cuda_vmm.cpp and sim_ipc.cpp hold the real ones.
#include "streampool/driver.hpp"

namespace streampool {

// Note [Sharing VMM handles]
// CUDA shares a cuMem allocation between processes as an OS handle: cuMemCreate must ask for the
// handle type up front (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR on Linux), the owner exports a
// file descriptor (cuMemExportToShareableHandle), passes it to the other process (SCM_RIGHTS, or
// the receiver takes it with pidfd_getfd, as PyTorch's expandable-segment IPC does), and the other
// process imports it as a handle of its own (cuMemImportFromShareableHandle), which it maps into
// address space it reserved, sets access on, and releases like any handle. The physical memory
// lives until every handle of it, in every process, is released and unmapped, so either side may
// exit first. The real driver asks for shareable handles wherever the device supports them
// (device_info::vmm_ipc_supported) and falls back to plain ones when the driver refuses, as
// PyTorch does; the sim models export and import between sim_driver instances of one process
// (the "processes"), with the same reference counting and errors (sim_ipc.cpp).

drv_result driver::vmm_export_fd(vmm_handle_t /*handle*/, int* fd) noexcept {
  if (fd != nullptr) *fd = -1;
  return {status::not_supported, 0};
}

drv_result driver::vmm_import_fd(int /*fd*/, vmm_handle_t* out) noexcept {
  if (out != nullptr) *out = 0;
  return {status::not_supported, 0};
}

drv_result driver::vmm_retain(void* /*va*/, vmm_handle_t* out) noexcept {
  if (out != nullptr) *out = 0;
  return {status::not_supported, 0};
}

}  // namespace streampool
