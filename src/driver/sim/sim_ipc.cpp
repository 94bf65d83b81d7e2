// sim_ipc.cpp — shared memory objects and the descriptors that name them (sim_ipc.hpp): what the
// sim's vmm_export_fd / vmm_import_fd (vmm_space, sim_vmm.cpp) stand on.
#include "driver/sim/sim_ipc.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>

namespace streampool::sim {

// Note [Sim IPC]
// The sim models CUDA's sharing of cuMem allocations (Note [Sharing VMM handles] in
// src/driver/driver_ipc_ops.cpp) between sim_driver instances, each standing for a process.
// Exporting a handle makes its memory a shared_memory object (once; later exports name the same
// one) and hands out a fresh memfd naming it: a real descriptor, so that callers close it, pass it
// and see EBADF as with CUDA's; the registry finds the object by the descriptor's inode. Every
// handle of the memory, the exporter's and each import's, holds the object; it goes when the last
// of them is released and unmapped, in whichever sim_driver that happens, or when the sim_drivers
// holding them are destroyed (a process that exits). Two simplifications, both stricter than
// CUDA: a descriptor does not by itself keep the memory alive (import it while a handle still
// exists), and the memory is charged to the exporting sim_driver's device only while that
// sim_driver holds a handle of it (an importer's handle charges nothing; the sims do not share a
// capacity, as processes on one GPU do).

namespace {

std::atomic<std::size_t> live{0};

struct registry {
  std::mutex mutex;
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<shared_memory>> by_inode;
};

registry& the_registry() {
  static registry* r = new registry();  // never destroyed: sim_drivers may outlive static destruction
  return *r;
}

bool inode_of(int fd, std::pair<dev_t, ino_t>* out) noexcept {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) return false;
  *out = {st.st_dev, st.st_ino};
  return true;
}

}  // namespace

shared_memory::shared_memory(int device, std::size_t size) noexcept : device_(device), size_(size) {
  live.fetch_add(1, std::memory_order_relaxed);
}

shared_memory::~shared_memory() { live.fetch_sub(1, std::memory_order_relaxed); }

int publish_shared_memory(const std::shared_ptr<shared_memory>& memory) noexcept {
  const int fd = ::memfd_create("streampool-sim-ipc", MFD_CLOEXEC);
  if (fd < 0) return -1;
  std::pair<dev_t, ino_t> key;
  if (!inode_of(fd, &key)) {
    ::close(fd);
    return -1;
  }
  try {
    registry& r = the_registry();
    std::lock_guard lock(r.mutex);
    for (auto it = r.by_inode.begin(); it != r.by_inode.end();) {  // forget memory that is gone
      it = it->second.expired() ? r.by_inode.erase(it) : std::next(it);
    }
    r.by_inode[key] = memory;
  } catch (...) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::shared_ptr<shared_memory> find_shared_memory(int fd) noexcept {
  std::pair<dev_t, ino_t> key;
  if (!inode_of(fd, &key)) return nullptr;
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  const auto found = r.by_inode.find(key);
  return found == r.by_inode.end() ? nullptr : found->second.lock();
}

std::size_t live_shared_memory() noexcept { return live.load(std::memory_order_relaxed); }

}  // namespace streampool::sim
