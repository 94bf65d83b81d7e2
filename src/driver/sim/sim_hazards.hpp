// sim_hazards.hpp (internal) — the simulated device's stream-ordering hazard checker: which stream
// last used each byte range of device memory and at which of its work items, checked against the
// completion model whenever another stream uses the range or the range is unmapped. See
// Note [Sim hazard checker] in sim_hazards.cpp; sim_driver::use() is its entry point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace streampool::sim {

struct stream_rec;

class hazard_tracker {
 public:
  /// How many reports descriptions() keeps (the count goes on).
  static constexpr std::size_t kept_reports = 16;

  explicit hazard_tracker(bool abort_on_violation) noexcept : abort_(abort_on_violation) {}

  /// `stream`'s work item `item` touches [addr, addr + bytes): checks it is ordered after every
  /// earlier use of those bytes by another stream, then records it as their last use. Returns
  /// false (and counts one violation) when some earlier use is not ordered before it.
  /// `via` (physical tracking only, Note [Sim aliased mappings]): the mapping the use went
  /// through; an earlier use through the same mapping is the address tracker's to judge.
  bool use(const std::vector<stream_rec>& streams, std::uint32_t stream, std::uint64_t item, std::uintptr_t addr,
           std::size_t bytes, std::uintptr_t via = 0);
  /// [addr, addr + bytes) stops being memory (`what`: "vmm_unmap", "free"): every use recorded in
  /// it must have completed, else one violation ("unmap while in use"). Forgets the range's uses.
  void retire(const std::vector<stream_rec>& streams, std::uintptr_t addr, std::size_t bytes, const char* what);

  [[nodiscard]] std::uint64_t violations() const noexcept { return violations_; }
  [[nodiscard]] const std::vector<std::string>& descriptions() const noexcept { return reports_; }
  /// Forgets the violations (not the recorded uses).
  void clear_violations() noexcept;
  /// Byte ranges with a recorded last use (tests of the tracker's own bookkeeping).
  [[nodiscard]] std::size_t tracked_ranges() const noexcept { return ranges_.size(); }

 private:
  /// [key, end) was last used by `stream` at its item `item`.
  struct range_rec {
    std::uintptr_t end = 0;
    std::uint32_t stream = 0;
    std::uint64_t item = 0;
    std::uintptr_t via = 0;
  };
  using range_map = std::map<std::uintptr_t, range_rec>;

  /// Splits the range holding `at` (if any starts before and ends after it) so one starts at `at`.
  void split_at(std::uintptr_t at);
  void report(std::string text);

  range_map ranges_;
  std::uint64_t violations_ = 0;
  std::vector<std::string> reports_;
  bool abort_ = false;
};

}  // namespace streampool::sim
