// pointer_map.cpp — see pointer_map.hpp.
//
// Note [Sharded pointer map]
// Every deallocate() and record_stream() starts with a pointer lookup that does not know the
// device yet. One map under one mutex would make all threads' frees contend there even when they
// use different devices and streams. The map is split into 64 shards picked by a hash of the
// address (allocations are at least 512-byte aligned, so the low 9 bits carry no information and
// are dropped before mixing); each shard has its own lock (a core hybrid_mutex: two atomic
// operations when uncontended) and a flat address_table (Note [Address table]: no host allocation
// per entry), and a lookup holds the lock only for the table operation. Lock order: a device
// lock may be held while a shard lock is taken (allocate inserts under its device lock), never
// the reverse.
#include "async/pointer_map.hpp"

#include <algorithm>

namespace streampool::async {

std::size_t pointer_map::shard_of(std::uintptr_t address) noexcept {
  // Fibonacci hashing of the 512-byte granule number; the top 6 bits pick one of 64 shards.
  static_assert(shard_count == 64);
  const std::uint64_t granule = static_cast<std::uint64_t>(address) >> 9;
  return static_cast<std::size_t>((granule * 0x9E3779B97F4A7C15ull) >> 58);
}

void pointer_map::insert(void* ptr, allocation_record&& record) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  shard& s = shards_[shard_of(address)];
  std::lock_guard lock(s.mutex);
  s.records.reserve_one();  // may throw: nothing inserted
  // A live address handed out again cannot happen with a sane driver; the newest record wins.
  s.records.insert_or_assign(address, std::move(record));
}

std::optional<allocation_record> pointer_map::take(void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  shard& s = shards_[shard_of(address)];
  std::lock_guard lock(s.mutex);
  return s.records.take(address);
}

stream_use_result pointer_map::add_stream_use(void* ptr, stream_t stream) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  shard& s = shards_[shard_of(address)];
  std::lock_guard lock(s.mutex);
  allocation_record* found = s.records.find(address);
  if (found == nullptr) return stream_use_result::unknown_pointer;
  allocation_record& record = *found;
  if (stream == record.stream) return stream_use_result::allocation_stream;
  if (std::find(record.stream_uses.begin(), record.stream_uses.end(), stream) != record.stream_uses.end()) {
    return stream_use_result::already_recorded;
  }
  record.stream_uses.push_back(stream);
  return stream_use_result::added;
}

std::optional<std::pair<int, stream_t>> pointer_map::owner_of(void* ptr) const {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  const shard& s = shards_[shard_of(address)];
  std::lock_guard lock(s.mutex);
  const allocation_record* found = s.records.find(address);
  if (found == nullptr) return std::nullopt;
  return std::make_pair(found->device, found->stream);
}

bool pointer_map::contains(void* ptr) const {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  const shard& s = shards_[shard_of(address)];
  std::lock_guard lock(s.mutex);
  return s.records.find(address) != nullptr;
}

std::optional<std::pair<std::uintptr_t, allocation_record>> pointer_map::find_containing(
    std::uintptr_t address) const {
  for (const shard& s : shards_) {
    std::lock_guard lock(s.mutex);
    std::optional<std::pair<std::uintptr_t, allocation_record>> hit;
    s.records.for_each([&](std::uintptr_t base, const allocation_record& record) {
      if (!hit && address >= base && address - base < record.size) hit.emplace(base, record);
    });
    if (hit) return hit;
  }
  return std::nullopt;
}

std::vector<std::pair<std::uintptr_t, allocation_record>> pointer_map::live_on(int device) const {
  std::vector<std::pair<std::uintptr_t, allocation_record>> out;
  for (const shard& s : shards_) {
    std::lock_guard lock(s.mutex);
    s.records.for_each([&](std::uintptr_t base, const allocation_record& record) {
      if (record.device == device) out.emplace_back(base, record);
    });
  }
  return out;
}

std::size_t pointer_map::size() const {
  std::size_t total = 0;
  for (const shard& s : shards_) {
    std::lock_guard lock(s.mutex);
    total += s.records.size();
  }
  return total;
}

}  // namespace streampool::async
