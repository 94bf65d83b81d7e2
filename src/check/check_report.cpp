// check_report.cpp — the text of checking mode's reports: an overrun found at free time, and a
// check that could not run. Each names the allocation as the trace does (address, size, stream,
// time) plus its number, so it can be found in a trace or a snapshot.
#include <cstdio>
#include <string>

#include "check/check_layout.hpp"
#include "check/checking_allocator.hpp"
#include "core/format.hpp"

namespace streampool::check_impl {
namespace {

std::string byte_text(unsigned value) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", value & 0xffu);
  return text;
}

std::string stream_text(stream_t stream) {
  if (stream == nullptr) return "0 (the legacy default stream)";
  return core::format_pointer(stream);
}

/// "allocation #17 (1000 bytes at 0x..., device 0, stream 0x..., allocated at t = 17... us)".
std::string allocation_text(const void* ptr, const checked_allocation& allocation) {
  return "allocation #" + std::to_string(allocation.serial) + " (" + std::to_string(allocation.requested) +
         " bytes requested at " + core::format_pointer(ptr) + ", device " + std::to_string(allocation.device) +
         ", stream " + stream_text(allocation.stream) + ", allocated at time_us " +
         std::to_string(allocation.time_us) + ", the trace's 'alloc' entry of this address)";
}

}  // namespace

std::string overrun_message(const void* ptr, const checked_allocation& allocation, const byte_check& found) {
  const std::size_t canary = allocation.padded - allocation.requested;
  return "checking mode: buffer overrun: " + allocation_text(ptr, allocation) + " was written past its end: " +
         std::to_string(found.mismatches) + " of the " + std::to_string(canary) +
         " canary bytes after it changed; the first at byte " +
         std::to_string(allocation.requested + found.first_offset) + " (" + std::to_string(found.first_offset) +
         " past the end) holds " + byte_text(found.first_value) + " instead of " + byte_text(canary_byte) +
         ". Found when it was freed; the block was freed and poisoned as usual.";
}

std::string check_failure_message(const void* ptr, const checked_allocation& allocation, std::string_view what,
                                  const std::string& reason) {
  return "checking mode: " + std::string(what) + " of " + allocation_text(ptr, allocation) + " failed (" +
         reason + "); the block was freed anyway";
}

}  // namespace streampool::check_impl
