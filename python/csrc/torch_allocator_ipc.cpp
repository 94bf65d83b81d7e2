// torch_allocator_ipc.cpp — sharing memory with other processes (torch.multiprocessing's CUDA
// tensors) and between devices: PyTorch's IPC handles (Note [IPC handle formats] in
// ipc_handles.cpp) of whole cudaMalloc segments and of expandable pages (ipc_export.cpp) of the
// native backend, the opening of any of them (ipc_import.cpp), peer access, and peer-aware copies.
#include "torch_allocator.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <cuda_runtime_api.h>

#include <cstring>

#include "ipc_export.hpp"
#include "ipc_handles.hpp"
#include "ipc_import.hpp"

namespace streampool::torch_ext {

c10a::ShareableHandle torch_allocator::shareIpcHandle(void* ptr) {
  TORCH_CHECK(impl().config().backend == backend_kind::native,
              "streampool: sharing CUDA memory with another process (cudaIpc) is not supported on the "
              "cudaMallocAsync backend: its memory pool is not IPC-exportable. Use the native backend "
              "(unset backend:cudaMallocAsync) for torch.multiprocessing with CUDA tensors.");
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  for (const segment_info& s : segments_of(-1, {0, 0})) {
    if (address < s.address || address >= s.address + s.total_size) continue;
    if (s.is_expandable) {
      // Note [Exporting expandable pages]: the pages of the tensor's block, as PyTorch's 'e' handle.
      for (const block_info& b : s.blocks) {
        if (address < b.address || address >= b.address + b.size) continue;
        c10a::ShareableHandle out;
        try {
          c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(s.device));
          out.handle = page_exports().share(impl().device_driver(), s.address, s.page_size, b.address, b.size,
                                            &out.offset);
        } catch (const std::exception& e) {
          TORCH_CHECK(false, e.what());
        }
        out.offset += static_cast<ptrdiff_t>(address - b.address);
        return out;
      }
      TORCH_CHECK(false, "streampool: shareIpcHandle: ", ptr, " is in no block of its expandable segment");
    }
    // Note [Pool options]: a segment of a MemPool with an allocator of its own need not be one
    // cudaMalloc of its own, so its cudaIpc handle could name other memory.
    TORCH_CHECK(s.pool.is_default() || impl().get_pool_options(s.pool, s.device).provider == nullptr,
                "streampool: sharing memory of a torch.cuda.MemPool with an allocator of its own with another "
                "process is not supported (its segments come from that allocator, not from cudaMalloc).");
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(s.device));
    cudaIpcMemHandle_t handle;
    C10_CUDA_CHECK(cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(s.address)));
    static_assert(sizeof(handle) == ipc::cuda_ipc_handle_size);
    c10a::ShareableHandle out;
    out.offset = static_cast<ptrdiff_t>(address - s.address);
    out.handle = ipc::encode_cuda_malloc(&handle);  // Note [IPC handle formats]: PyTorch's own bytes
    return out;
  }
  TORCH_CHECK(false, "streampool: shareIpcHandle: ", ptr, " is in no segment of streampool's");
}

std::shared_ptr<void> torch_allocator::getIpcDevPtr(std::string handle) {
  ipc::decoded_handle decoded;
  try {
    decoded = ipc::decode(handle);  // Note [IPC handle formats]
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  std::lock_guard<std::mutex> lock(ipc_mutex_);
  // Note [IPC handle formats]: an 'e' handle names descriptor numbers, which the sender reuses once
  // it has closed them, so the same bytes can name other memory later: it is opened anew each time.
  // A 'c' handle names one allocation for good and is shared while open.
  auto it = decoded.kind == ipc::kind_cuda_malloc ? ipc_opened_.find(handle) : ipc_opened_.end();
  if (it != ipc_opened_.end()) {
    if (std::shared_ptr<void> open = it->second.lock()) return open;
  }
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  std::shared_ptr<void> open;
  if (decoded.kind == ipc::kind_cuda_malloc) {
    cudaIpcMemHandle_t raw;
    std::memcpy(&raw, decoded.cuda_handle.data(), sizeof(raw));
    void* ptr = nullptr;
    C10_CUDA_CHECK(cudaIpcOpenMemHandle(&ptr, raw, cudaIpcMemLazyEnablePeerAccess));
    open = std::shared_ptr<void>(ptr, [device](void* p) {
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
      C10_CUDA_CHECK_WARN(cudaIpcCloseMemHandle(p));
    });
  } else {
    // Note [Importing expandable pages]: exactly the pages sent, through streampool's driver.
    std::shared_ptr<ipc::imported_pages> pages;
    try {
      pages = std::make_shared<ipc::imported_pages>(
          ipc::imported_pages::open(impl().device_driver(), device, decoded.pages));
    } catch (const std::exception& e) {
      TORCH_CHECK(false, e.what());
    }
    void* base = pages->base();
    driver* drv = &impl().device_driver();  // the allocator (and its driver) lives as long as the process
    open = std::shared_ptr<void>(base, [pages, drv](void*) {
      const drv_result closed = pages->close();
      if (!closed.ok()) TORCH_WARN("streampool: closing imported CUDA tensor memory failed: ", drv->describe(closed));
    });
  }
  if (decoded.kind == ipc::kind_cuda_malloc) ipc_opened_[handle] = open;
  return open;
}

void torch_allocator::enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
  c10::cuda::CUDAGuard guard(dev);
  const cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // already enabled: clear the sticky status and carry on
  } else {
    C10_CUDA_CHECK(err);
  }
}

cudaError_t torch_allocator::memcpyAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                                         cudaStream_t stream, bool p2p_enabled) {
  // Pool memory (cudaMallocAsync backend) needs the Peer copy between devices without peer access.
  if (p2p_enabled || dst_device == src_device) {
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
  }
  return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, stream);
}

}  // namespace streampool::torch_ext
