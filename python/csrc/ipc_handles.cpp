// ipc_handles.cpp — writing and reading the IPC handle formats of ipc_handles.hpp.
#include "ipc_handles.hpp"

#include <cstring>

#include <streampool/errors.hpp>

namespace streampool::torch_ext::ipc {

// Note [IPC handle formats]
// torch.multiprocessing pickles a CUDA tensor's storage as the allocator's shareIpcHandle()
// (bytes, plus the offset of the tensor in them) and the receiver's allocator opens it with
// getIpcDevPtr(). PyTorch (>= 2.5, c10/cuda/CUDACachingAllocator.cpp) writes a version byte (2)
// and a kind: 'c' and the cudaIpcMemHandle_t of the cudaMalloc holding the tensor, or 'e' and, for
// the pages of an expandable segment that hold it, a header {pid_t pid; size_t segment_size;
// size_t num_handles} (the C struct as laid out on x86-64 and aarch64 Linux: 24 bytes, 4 of them
// padding after pid) and one int, a file descriptor of cuMemExportToShareableHandle per page. The
// receiver opens the sender's process with pidfd_open(pid) and takes each descriptor with
// pidfd_getfd, so the sender keeps the descriptors open for as long as the pages exist. A bare
// 64-byte handle is what PyTorch before the version byte sent ('c' implied). streampool's
// extension speaks the same format in both directions, so a tensor moves between a process with
// streampool and one with stock PyTorch; it still reads its own first format
// ("streampool-ipc-v1:" + cudaIpcMemHandle_t). A layout this side does not know (a later PyTorch
// that writes more in its header, or fabric handles of multi-node NVLink) is refused with the
// sizes found, rather than read wrong.

namespace {

struct share_header {  // c10's ExpandableSegment::ShareHeader
  std::int32_t pid;
  std::size_t segment_size;
  std::size_t num_handles;
};
static_assert(sizeof(share_header) == 24, "c10's ShareHeader is 24 bytes on the Linux targets PyTorch builds for");

constexpr std::string_view refuse_prefix = "streampool: cannot open this CUDA IPC handle: ";

}  // namespace

std::string encode_cuda_malloc(const void* cuda_ipc_handle) {
  std::string out;
  out.reserve(2 + cuda_ipc_handle_size);
  out.push_back(handle_version);
  out.push_back(kind_cuda_malloc);
  out.append(static_cast<const char*>(cuda_ipc_handle), cuda_ipc_handle_size);
  return out;
}

std::string encode_expandable(const expandable_pages& pages) {
  if (pages.fds.empty() || pages.page_size == 0) {
    throw error("streampool: an expandable-segment IPC handle needs at least one page and a page size");
  }
  share_header header{};
  header.pid = pages.pid;
  header.segment_size = pages.page_size;
  header.num_handles = pages.fds.size();
  std::string out;
  out.reserve(2 + sizeof(header) + pages.fds.size() * sizeof(int));
  out.push_back(handle_version);
  out.push_back(kind_expandable);
  out.append(reinterpret_cast<const char*>(&header), sizeof(header));
  for (const int fd : pages.fds) out.append(reinterpret_cast<const char*>(&fd), sizeof(fd));
  return out;
}

decoded_handle decode(std::string_view handle) {
  decoded_handle out;
  if (handle.size() == cuda_ipc_handle_size) {  // a sender from before the version byte
    out.cuda_handle.assign(handle);
    return out;
  }
  if (handle.size() == streampool_v1_prefix.size() + cuda_ipc_handle_size &&
      handle.substr(0, streampool_v1_prefix.size()) == streampool_v1_prefix) {
    out.cuda_handle.assign(handle.substr(streampool_v1_prefix.size()));
    return out;
  }
  if (handle.size() < 2) {
    throw error(std::string(refuse_prefix) + "it has " + std::to_string(handle.size()) +
                " bytes, too few for any format (PyTorch's start with a version byte and a kind)");
  }
  const auto version = static_cast<unsigned char>(handle[0]);
  if (version > static_cast<unsigned char>(handle_version) || version == 0) {
    throw error(std::string(refuse_prefix) + "format version " + std::to_string(version) +
                " (this side reads PyTorch's version 2 handles); the sending process must run a PyTorch or "
                "streampool whose IPC handles are version 2 (PyTorch 2.5 to 2.11)");
  }
  out.kind = handle[1];
  const std::string_view body = handle.substr(2);
  if (out.kind == kind_cuda_malloc) {
    if (body.size() != cuda_ipc_handle_size) {
      throw error(std::string(refuse_prefix) + "a cudaMalloc handle of " + std::to_string(body.size()) +
                  " bytes (expected " + std::to_string(cuda_ipc_handle_size) + ")");
    }
    out.cuda_handle.assign(body);
    return out;
  }
  if (out.kind != kind_expandable) {
    throw error(std::string(refuse_prefix) + "unknown kind '" + std::string(1, out.kind) +
                "' (known: 'c', one cudaMalloc; 'e', pages of an expandable segment)");
  }
  share_header header{};
  if (body.size() < sizeof(header)) {
    throw error(std::string(refuse_prefix) + "an expandable-segment handle of " + std::to_string(body.size()) +
                " bytes is shorter than its header (" + std::to_string(sizeof(header)) + ")");
  }
  std::memcpy(&header, body.data(), sizeof(header));
  const std::size_t fds_bytes = body.size() - sizeof(header);
  if (header.num_handles == 0 || header.segment_size == 0 || fds_bytes / sizeof(int) != header.num_handles ||
      fds_bytes % sizeof(int) != 0) {
    throw error(std::string(refuse_prefix) + "an expandable-segment handle whose header says " +
                std::to_string(header.num_handles) + " pages of " + std::to_string(header.segment_size) +
                " bytes but which carries " + std::to_string(fds_bytes) +
                " bytes after the header (one 4-byte POSIX file descriptor per page was expected). The sender "
                "uses a layout this side does not read (fabric handles, or a newer PyTorch's header): share the "
                "tensor from memory outside expandable segments (expandable_segments:False in the sender)");
  }
  out.pages.pid = header.pid;
  out.pages.page_size = header.segment_size;
  out.pages.fds.resize(header.num_handles);
  std::memcpy(out.pages.fds.data(), body.data() + sizeof(header), fds_bytes);
  return out;
}

}  // namespace streampool::torch_ext::ipc
