// sim_common.hpp (internal) — what every part of the simulated device shares: its fixed sizes,
// the layout of each device's fake address space, fake handles, and how a failure is encoded in
// drv_result (Note [Sim native codes]).
#pragma once

#include <cstddef>
#include <cstdint>

#include "streampool/config.hpp"
#include "streampool/driver.hpp"

namespace streampool::sim {

inline constexpr std::size_t malloc_alignment = 512;         ///< cudaMalloc's small alignment
inline constexpr std::size_t large_malloc_threshold = 2 * mib;  ///< from here on, 2 MiB aligned
inline constexpr std::size_t pool_block_unit = 512;          ///< pool allocations round to this
inline constexpr std::size_t pool_chunk_unit = 32 * mib;     ///< pools reserve in these (H200)
/// Requests below this take the rest of the block the previous request split, when it fits
/// (Note [Sim pool model] in sim_pool.cpp).
inline constexpr std::size_t pool_small_request = 1 * mib;
inline constexpr int max_devices = 64;
inline constexpr std::uint32_t no_stream = UINT32_MAX;  ///< also "no such handle"

// Note [Sim address spaces]
// Device d owns [(d + 1) << 52, (d + 2) << 52): 1 PiB for cudaMalloc, 1 PiB for pool chunks,
// 2 PiB for VMM reservations, so the three kinds never overlap. Pool chunks and VMM
// reservations are bump ranges whose addresses are never reused, so a stale pointer can never
// alias a newer allocation and free_async or vmm_free of it fails. cudaMalloc addresses follow
// the real driver (Note [Sim address assignment], sim_malloc_space.cpp): freed ranges are
// reused, so a stale malloc pointer may name a newer allocation, as on a GPU, unless
// sim_options::malloc_addresses is bump. Real addresses are below 2^47; these are not, on
// purpose, but stay below 2^59 (top bits clear). A churning benchmark would need a million
// 1 GiB mallocs (bump) or pool chunks to exhaust a part; then the call fails with
// status::other ("simulated address space exhausted").
inline constexpr int device_space_shift = 52;
inline constexpr std::uintptr_t part_size = std::uintptr_t{1} << 50;

// Note [Sim native codes]
// The sim's drv_result::native is int(status) plus a reason in bits 8..15 and, for a genuine
// out_of_memory, (device + 1) << 16, so describe() can name the device with no shared state.
inline constexpr int reason_injected = 1 << 8;
inline constexpr int reason_address_space = 2 << 8;
inline constexpr int reason_host_exception = 3 << 8;
inline constexpr int reason_host_capacity = 4 << 8;  ///< pinned host memory beyond host_capacity
inline constexpr int reason_destroyed_stream = 5 << 8;  ///< Note [Sim destroyed streams]
inline constexpr int reason_mask = 0xff00;

/// Fake handles: base + (index + 1) * 16, indices never reused (a stale handle stays invalid).
inline constexpr std::uintptr_t stream_handle_base = 0x5700000000;
inline constexpr std::uintptr_t event_handle_base = 0xe700000000;
inline constexpr std::uintptr_t pool_handle_base = 0x9000000000;
inline constexpr std::uintptr_t graph_handle_base = 0x6700000000;
inline constexpr std::uintptr_t exec_handle_base = 0x6800000000;
/// Ids of captures begun with stream_begin_capture start here, far from the small ids tests
/// script with set_capture.
inline constexpr std::uint64_t first_capture_id = std::uint64_t{1} << 32;
[[nodiscard]] inline void* make_handle(std::uintptr_t base, std::uint32_t index) noexcept {
  return reinterpret_cast<void*>(base + (std::uintptr_t{index} + 1) * 16);
}
/// The index `handle` encodes, or no_stream when it is not one of `base`'s handles below `count`.
[[nodiscard]] inline std::uint32_t handle_index(const void* handle, std::uintptr_t base, std::size_t count) noexcept {
  const auto value = reinterpret_cast<std::uintptr_t>(handle);
  if (value <= base || (value - base) % 16 != 0 || (value - base) / 16 > count) {
    return UINT32_MAX;
  }
  return static_cast<std::uint32_t>((value - base) / 16 - 1);
}

[[nodiscard]] inline drv_result fail(status code, int reason = 0) noexcept {
  return {code, static_cast<int>(code) | reason};
}
[[nodiscard]] constexpr std::size_t round_up(std::size_t value, std::size_t unit) noexcept {
  return (value + unit - 1) / unit * unit;
}

/// A genuine out_of_memory of `device` (describe() names the device: Note [Sim native codes]).
[[nodiscard]] inline drv_result out_of_memory(int device) noexcept {
  return fail(status::out_of_memory, (device + 1) << 16);
}

/// Takes `bytes` aligned to `alignment` from [next, end); 0 when the range is exhausted.
[[nodiscard]] inline std::uintptr_t bump(std::uintptr_t& next, std::uintptr_t end, std::size_t bytes,
                                         std::size_t alignment) noexcept {
  const std::uintptr_t start = (next + alignment - 1) / alignment * alignment;
  if (start > end || end - start < bytes) {
    return 0;
  }
  next = start + bytes;
  return start;
}

}  // namespace streampool::sim
