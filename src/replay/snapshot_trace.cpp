// snapshot_trace.cpp — read_snapshot(): the `device_traces` of a PyTorch memory snapshot as trace
// events, and the config PyTorch ran with (`allocator_settings`), read with the streaming pickle
// reader: the chosen device's events are converted one by one as the reader hands them over;
// segments, stack frames and the other devices' events are skipped or dropped on the way.
//
// Snapshot layout (PyTorch 2.x, torch.cuda.memory._snapshot()): a dict with `segments` (the live
// memory), `device_traces` (one list per device of dicts: action, addr — device_free for an oom —,
// size, stream, time_us, frames, and in newer versions compile_context and user_metadata),
// `allocator_settings` (newer versions: PYTORCH_CUDA_ALLOC_CONF, the last config string given,
// and the parsed values) and, in newer versions, `external_annotations`.
#include <algorithm>
#include <unordered_set>

#include "replay/snapshot_trace.hpp"
#include "streampool/errors.hpp"

namespace streampool::replay_impl {
namespace {

// Tags of the places the reader is asked about (value_role::tag).
constexpr int tag_root = 1;
constexpr int tag_device_traces = 2;
constexpr int tag_entry = 3;
constexpr int tag_settings = 4;
constexpr int tag_settings_value = 5;
constexpr int tag_device_base = 1000;  // + device index: one device's trace
constexpr std::size_t max_devices = 1 << 16;

constexpr std::string_view entry_keys[] = {"action", "addr", "size", "stream", "time_us", "device_free"};
constexpr std::string_view ignored_actions[] = {"user_defined"};  // annotations: no memory changes hands

value_role role_of(const value_place& place) {
  using p = value_policy;
  switch (place.parent_tag) {
    case value_place::root_tag: return {p::keep, tag_root};
    case tag_root:
      if (place.key == "device_traces") return {p::keep, tag_device_traces};
      if (place.key == "allocator_settings") return {p::keep, tag_settings};
      return {p::skip, 0};
    case tag_device_traces:
      if (place.index >= max_devices) return {p::skip, 0};
      return {p::stream, tag_device_base + static_cast<int>(place.index)};
    case tag_entry:
      for (const std::string_view key : entry_keys) {
        if (place.key == key) return {p::keep, 0};
      }
      return {p::skip, 0};  // frames, compile_context, user_metadata, ...
    case tag_settings: return {p::keep, tag_settings_value};
    case tag_settings_value: return {p::keep, tag_settings_value};
    default:
      if (place.parent_tag >= tag_device_base) return {p::keep, tag_entry};
      return {p::skip, 0};
  }
}

std::string kind_name(pickle_kind kind) {
  switch (kind) {
    case pickle_kind::none: return "None";
    case pickle_kind::boolean: return "a bool";
    case pickle_kind::integer: return "an int";
    case pickle_kind::big_integer: return "an int beyond 64 bits";
    case pickle_kind::real: return "a float";
    case pickle_kind::string: return "a string";
    case pickle_kind::bytes: return "bytes";
    case pickle_kind::list: return "a list";
    case pickle_kind::tuple: return "a tuple";
    case pickle_kind::dict: return "a dict";
    case pickle_kind::set: return "a set";
    case pickle_kind::skipped: return "a value shared with a skipped part";
    case pickle_kind::repeat: return "a second reference to an event";
  }
  return "?";
}

const std::string& known_actions_text() {
  static const std::string text = [] {
    std::string all;
    for (int i = 0; i <= static_cast<int>(trace_action::snapshot); ++i) {
      all += std::string(to_string(static_cast<trace_action>(i))) + ", ";
    }
    return all + "user_defined";
  }();
  return text;
}

/// Converts the chosen device's entries as the reader hands them over.
class entry_converter {
 public:
  entry_converter(std::string source, int device) : source_(std::move(source)), device_(device) {}

  void take(const pickle_document& doc, int tag, std::size_t index, const pickle_value& item) {
    const std::size_t device = static_cast<std::size_t>(tag - tag_device_base);
    if (device >= counts_.size()) counts_.resize(device + 1, 0);
    ++counts_[device];
    if (static_cast<int>(device) != device_) return;
    const std::string where = "device_traces[" + std::to_string(device) + "] event " + std::to_string(index + 1);
    if (item.kind == pickle_kind::repeat) {
      repeat(item, tag, index, where);
      return;
    }
    if (item.kind != pickle_kind::dict) fail(where + " is " + kind_name(item.kind) + ", not a dict");
    const pickle_value* action = doc.find(item, "action");
    if (action == nullptr || action->kind != pickle_kind::string) fail(where + " has no 'action' string");
    const std::string_view name = doc.text(*action);
    if (std::find(std::begin(ignored_actions), std::end(ignored_actions), name) != std::end(ignored_actions)) {
      ++ignored_;
      return;
    }
    trace_event event;
    event.line = index + 1;
    if (!parse_action(name, &event.action)) {
      fail(where + " has action '" + std::string(name) + "', which this streampool does not know (it knows " +
           known_actions_text() + "): the snapshot comes from a newer PyTorch; please report it with the PyTorch version");
    }
    const bool oom = event.action == trace_action::oom;
    event.address = number(doc, item, oom ? "device_free" : "addr", where, !oom);
    event.size = number(doc, item, "size", where, true);
    event.stream = number(doc, item, "stream", where, false);
    event.time_us = number(doc, item, "time_us", where, false);
    events_.push_back(event);
  }

  /// A memo reference to an event handed over before (Note [Values referenced twice] in
  /// pickle_reader.cpp): Python's unpickler gives the same dict again, so the event is there twice.
  void repeat(const pickle_value& item, int tag, std::size_t index, const std::string& where) {
    const int from_tag = static_cast<int>(item.generation);
    if (from_tag != tag) {
      fail(where + " is a memo reference to event " + std::to_string(item.index + 1) + " of another list (" +
           (from_tag >= tag_device_base ? "device_traces[" + std::to_string(from_tag - tag_device_base) + "]" : "?") +
           "), which is not read for this device; write the snapshot without shared events");
    }
    const auto it = std::lower_bound(events_.begin(), events_.end(), item.index + 1,
                                     [](const trace_event& e, std::size_t line) { return e.line < line; });
    if (it == events_.end() || it->line != item.index + 1) {
      ++ignored_;  // the first occurrence was an annotation (user_defined), ignored as this one is
      return;
    }
    trace_event event = *it;
    event.line = index + 1;
    events_.push_back(event);
  }

  [[nodiscard]] std::vector<trace_event>& events() { return events_; }
  [[nodiscard]] const std::vector<std::size_t>& counts() const { return counts_; }
  [[nodiscard]] std::size_t ignored() const { return ignored_; }

 private:
  static bool parse_action(std::string_view text, trace_action* out) {
    for (int i = 0; i <= static_cast<int>(trace_action::snapshot); ++i) {
      if (to_string(static_cast<trace_action>(i)) == text) {
        *out = static_cast<trace_action>(i);
        return true;
      }
    }
    return false;
  }

  std::uint64_t number(const pickle_document& doc, const pickle_value& item, std::string_view key,
                       const std::string& where, bool required) const {
    const pickle_value* value = doc.find(item, key);
    if (value == nullptr) {
      if (required) fail(where + " has no '" + std::string(key) + "'");
      return 0;
    }
    if (value->kind == pickle_kind::integer && key == "stream") return static_cast<std::uint64_t>(value->integer);
    if (value->kind != pickle_kind::integer || value->integer < 0) {
      fail(where + ": '" + std::string(key) + "' is " + kind_name(value->kind) +
           (value->kind == pickle_kind::integer ? " below 0" : "") + "; expected a non-negative int");
    }
    return static_cast<std::uint64_t>(value->integer);
  }

  [[noreturn]] void fail(const std::string& what) const { throw error(source_ + ": " + what); }

  std::string source_;
  int device_;
  std::vector<trace_event> events_;
  std::vector<std::size_t> counts_;
  std::size_t ignored_ = 0;
};

/// The config string PyTorch ran with: the recorded PYTORCH_CUDA_ALLOC_CONF text when the
/// snapshot has it, else rebuilt from the parsed values older versions list.
bool settings_of(const pickle_document& doc, const pickle_value& settings, std::string* out) {
  if (settings.kind != pickle_kind::dict) return false;
  if (const pickle_value* text = doc.find(settings, "PYTORCH_CUDA_ALLOC_CONF");
      text != nullptr && text->kind == pickle_kind::string) {
    *out = std::string(doc.text(*text));
    return true;
  }
  std::string config;
  const auto add = [&](const std::string& item) { config += (config.empty() ? "" : ",") + item; };
  if (const pickle_value* v = doc.find(settings, "expandable_segments"); v != nullptr && v->kind == pickle_kind::boolean && v->integer != 0) {
    add("expandable_segments:True");
  }
  if (const pickle_value* v = doc.find(settings, "max_split_size");
      v != nullptr && v->kind == pickle_kind::integer && v->integer > 0 && v->integer < (std::int64_t{1} << 50)) {
    add("max_split_size_mb:" + std::to_string(v->integer >> 20));
  }
  if (const pickle_value* v = doc.find(settings, "garbage_collection_threshold");
      v != nullptr && v->kind == pickle_kind::real && v->real > 0.0) {
    add("garbage_collection_threshold:" + std::to_string(v->real));
  }
  if (const pickle_value* v = doc.find(settings, "roundup_power2_divisions"); v != nullptr && v->kind == pickle_kind::dict) {
    std::string list;
    bool any = false;
    const auto items = doc.items(*v);
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
      if (items[i].kind != pickle_kind::string || items[i + 1].kind != pickle_kind::integer) continue;
      list += (list.empty() ? "" : ",") + std::string(doc.text(items[i])) + ":" + std::to_string(items[i + 1].integer);
      any = any || items[i + 1].integer != 0;
    }
    if (any) add("roundup_power2_divisions:[" + list + "]");
  }
  *out = config;
  return true;
}

/// Frees of addresses the trace never allocated: the recording starts mid-run.
std::string missing_start_warning(const std::vector<trace_event>& events, const std::string& source) {
  std::unordered_set<std::uint64_t> seen;
  std::size_t unknown = 0, frees = 0;
  for (const trace_event& e : events) {
    if (e.action == trace_action::alloc) seen.insert(e.address);
    if (e.action == trace_action::free_requested) {
      ++frees;
      if (seen.find(e.address) == seen.end()) ++unknown;
    }
  }
  if (unknown == 0) return {};
  return source + ": " + std::to_string(unknown) + " of its " + std::to_string(frees) +
         " frees name blocks allocated before its first event: the recording starts mid-run (history was turned "
         "on after those allocations, or its ring buffer of max_entries events wrapped and dropped the oldest; "
         "this trace holds " + std::to_string(events.size()) +
         " events). The replay skips those frees, so the memory they held is missing from every peak. To record "
         "a run whole, call torch.cuda.memory._record_memory_history(max_entries=N) with N above the run's event "
         "count before the model is built (or use streampool.record(path) around the whole run)";
}

}  // namespace

trace_file read_snapshot(byte_source& in, std::string_view source, const trace_read_options& options) {
  const std::string name(source);
  if (options.device < 0) throw error(name + ": device " + std::to_string(options.device) + " is negative");
  entry_converter converter(name, options.device);
  const pickle_document doc = parse_pickle(
      in, name, role_of,
      [&converter](const pickle_document& d, int tag, std::size_t index, const pickle_value& item) {
        converter.take(d, tag, index, item);
      });
  const pickle_value& root = doc.root();
  if (root.kind != pickle_kind::dict) {
    throw error(name + ": the pickle holds " + kind_name(root.kind) +
                ", not a memory snapshot (a dict written by torch.cuda.memory._dump_snapshot())");
  }
  const std::string how_to_record =
      "record with torch.cuda.memory._record_memory_history(max_entries=1000000) before the model is built, run, "
      "then torch.cuda.memory._dump_snapshot(path) (or use streampool.record(path))";
  const pickle_value* traces = doc.find(root, "device_traces");
  if (traces == nullptr || traces->kind != pickle_kind::list) {
    throw error(name + ": the snapshot has no allocation trace ('device_traces'): memory history recording was off; " +
                how_to_record);
  }
  trace_file file;
  file.format = "pytorch-snapshot";
  file.devices = static_cast<int>(doc.items(*traces).size());
  std::vector<std::size_t> counts = converter.counts();
  counts.resize(static_cast<std::size_t>(file.devices), 0);
  std::size_t total = 0;
  std::string with_events;
  for (std::size_t d = 0; d < counts.size(); ++d) {
    total += counts[d];
    if (counts[d] > 0) with_events += (with_events.empty() ? "" : ", ") + std::to_string(d) + " (" + std::to_string(counts[d]) + " events)";
  }
  if (total == 0) {
    std::string settings_text;
    const pickle_value* settings = doc.find(root, "allocator_settings");
    const bool async = settings != nullptr && settings_of(doc, *settings, &settings_text) &&
                       settings_text.find("cudaMallocAsync") != std::string::npos;
    throw error(name + ": the snapshot's allocation trace is empty on every device: memory history recording was off " +
                (async ? "(PyTorch ran with backend:cudaMallocAsync, which records no history: record the run with "
                         "PyTorch's native backend, the trace is the same program's allocations)"
                       : "(or was turned on with enabled='state')") +
                "; " + how_to_record);
  }
  if (options.device >= file.devices) {
    throw error(name + ": --device " + std::to_string(options.device) + " is not in the snapshot, which has " +
                std::to_string(file.devices) + " device(s), numbered from 0; devices with events: " + with_events);
  }
  if (counts[static_cast<std::size_t>(options.device)] == 0) {
    throw error(name + ": device " + std::to_string(options.device) + " recorded no events; pick one with --device: " +
                with_events);
  }
  file.events = std::move(converter.events());
  if (const pickle_value* settings = doc.find(root, "allocator_settings"); settings != nullptr) {
    file.has_allocator_settings = settings_of(doc, *settings, &file.allocator_settings);
  }
  if (std::string warning = missing_start_warning(file.events, name); !warning.empty()) {
    file.warnings.push_back(std::move(warning));
  }
  return file;
}

}  // namespace streampool::replay_impl
