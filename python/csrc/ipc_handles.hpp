// ipc_handles.hpp — the CUDA IPC handles torch.multiprocessing sends for a CUDA tensor
// (c10's ShareableHandle::handle), as PyTorch >= 2.5 writes and reads them, so that streampool's
// extension and stock PyTorch open each other's: a version byte, a kind ('c': one cudaMalloc,
// followed by its cudaIpcMemHandle_t; 'e': pages of an expandable segment, followed by a header
// and one POSIX file descriptor per page, which the receiver takes from the sender with
// pidfd_getfd), the bare 64-byte cudaIpcMemHandle_t of older senders, and streampool's own first
// format. Note [IPC handle formats]. No torch here: tests/unit/torch_ext tests it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace streampool::torch_ext::ipc {

inline constexpr char handle_version = 2;          ///< c10's SHAREABLE_HANDLE_VERSION
inline constexpr char kind_cuda_malloc = 'c';      ///< SHAREABLE_CUDA_MALLOC
inline constexpr char kind_expandable = 'e';       ///< SHAREABLE_CUDA_EXPANDABLE_SEGMENT
inline constexpr std::size_t cuda_ipc_handle_size = 64;  ///< CUDA_IPC_HANDLE_SIZE
/// What streampool's extension sent before it spoke PyTorch's format (then followed by the handle).
inline constexpr std::string_view streampool_v1_prefix = "streampool-ipc-v1:";

/// Pages of an expandable segment as the sender shares them: its pid, the page size, and the
/// descriptor of each page, open in the sender's process, in address order from the first page.
struct expandable_pages {
  std::int32_t pid = 0;
  std::size_t page_size = 0;
  std::vector<int> fds;
};

struct decoded_handle {
  char kind = kind_cuda_malloc;
  std::string cuda_handle;  ///< kind_cuda_malloc: the 64 bytes of the cudaIpcMemHandle_t
  expandable_pages pages;   ///< kind_expandable
};

/// "\x02c" + the 64 bytes at `cuda_ipc_handle` (a cudaIpcMemHandle_t).
[[nodiscard]] std::string encode_cuda_malloc(const void* cuda_ipc_handle);
/// "\x02e" + the header + the descriptors. @throws error for no pages or a page size of 0
[[nodiscard]] std::string encode_expandable(const expandable_pages& pages);
/// Reads a handle of any of the formats. @throws error naming what is wrong and, where the sender
/// used a format this side cannot read, what the sender must do
[[nodiscard]] decoded_handle decode(std::string_view handle);

}  // namespace streampool::torch_ext::ipc
