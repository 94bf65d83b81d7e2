// torch_allocator_ipc.cpp — sharing memory with other processes (torch.multiprocessing's CUDA
// tensors) and between devices: cudaIpc handles of whole segments of the native backend, peer
// access, and peer-aware copies.
#include "torch_allocator.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <cuda_runtime_api.h>

#include <cstring>

namespace streampool::torch_ext {

namespace {

/// Note [IPC handles]: a handle is this prefix followed by the cudaIpcMemHandle_t of the segment
/// (a cudaMalloc of the native backend) holding the tensor; the offset inside it travels beside it
/// (ShareableHandle::offset). Only a process with streampool's extension installed opens it. The
/// cudaMallocAsync backend's memory comes from a pool that is not created IPC-exportable, and an
/// expandable segment is a set of mapped pages rather than one cudaMalloc: both are refused with an
/// error that says so.
constexpr std::string_view ipc_prefix = "streampool-ipc-v1:";

}  // namespace

c10a::ShareableHandle torch_allocator::shareIpcHandle(void* ptr) {
  TORCH_CHECK(impl().config().backend == backend_kind::native,
              "streampool: sharing CUDA memory with another process (cudaIpc) is not supported on the "
              "cudaMallocAsync backend: its memory pool is not IPC-exportable. Use the native backend "
              "(unset backend:cudaMallocAsync) for torch.multiprocessing with CUDA tensors.");
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  for (const segment_info& s : segments_of(-1, {0, 0})) {
    if (address < s.address || address >= s.address + s.total_size) continue;
    TORCH_CHECK(!s.is_expandable,
                "streampool: sharing memory of an expandable segment with another process is not supported "
                "(it is mapped pages, not one cudaMalloc); set expandable_segments:False to share CUDA tensors.");
    // Note [Pool options]: a segment of a MemPool with an allocator of its own need not be one
    // cudaMalloc of its own, so its cudaIpc handle could name other memory.
    TORCH_CHECK(s.pool.is_default() || impl().get_pool_options(s.pool, s.device).provider == nullptr,
                "streampool: sharing memory of a torch.cuda.MemPool with an allocator of its own with another "
                "process is not supported (its segments come from that allocator, not from cudaMalloc).");
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(s.device));
    cudaIpcMemHandle_t handle;
    C10_CUDA_CHECK(cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(s.address)));
    c10a::ShareableHandle out;
    out.offset = static_cast<ptrdiff_t>(address - s.address);
    out.handle = std::string(ipc_prefix);
    out.handle.append(reinterpret_cast<const char*>(&handle), sizeof(handle));
    return out;
  }
  TORCH_CHECK(false, "streampool: shareIpcHandle: ", ptr, " is in no segment of streampool's");
}

std::shared_ptr<void> torch_allocator::getIpcDevPtr(std::string handle) {
  // A bare cudaIpcMemHandle_t (what code that calls cudaIpcGetMemHandle on getBaseAllocation's
  // result sends) is accepted too.
  const bool ours = handle.size() == ipc_prefix.size() + sizeof(cudaIpcMemHandle_t) &&
                    handle.compare(0, ipc_prefix.size(), ipc_prefix) == 0;
  TORCH_CHECK(ours || handle.size() == sizeof(cudaIpcMemHandle_t),
              "streampool: cannot open this CUDA IPC handle (", handle.size(), " bytes): it was not made by "
              "streampool (the sending process must also use streampool's extension allocator, streampool.install()).");
  std::lock_guard<std::mutex> lock(ipc_mutex_);
  auto it = ipc_opened_.find(handle);
  if (it != ipc_opened_.end()) {
    if (std::shared_ptr<void> open = it->second.lock()) return open;
  }
  cudaIpcMemHandle_t raw;
  std::memcpy(&raw, handle.data() + (ours ? ipc_prefix.size() : 0), sizeof(raw));
  void* ptr = nullptr;
  C10_CUDA_CHECK(cudaIpcOpenMemHandle(&ptr, raw, cudaIpcMemLazyEnablePeerAccess));
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  std::shared_ptr<void> open(ptr, [device](void* p) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    C10_CUDA_CHECK_WARN(cudaIpcCloseMemHandle(p));
  });
  ipc_opened_[handle] = open;
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
