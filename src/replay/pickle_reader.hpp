// src/replay/pickle_reader.hpp — a reader of the data subset of Python's pickle format (protocols
// 2–5): None, bools, ints (any width; those beyond 64 bits are kept as "too large"), floats,
// strings, bytes, lists, tuples, dicts, sets, the memo and frames. Anything that would import or
// call (GLOBAL, REDUCE, BUILD, NEWOBJ, ...) is refused: a file is never executed.
// It streams: the caller says, for each value from where it sits, whether to keep, skip or hand
// it over item by item, so memory follows what is kept, not the file (Note [Streaming a pickle]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <new>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace streampool::replay_impl {

/// Where the reader takes its bytes from (a file, a gzip file, memory).
class byte_source {
 public:
  virtual ~byte_source() = default;
  /// Reads up to `size` bytes; returns how many (0 = end of input). @throws error when unreadable
  virtual std::size_t read(char* out, std::size_t size) = 0;
};

/// A byte_source over memory (the caller keeps `bytes` alive).
[[nodiscard]] std::unique_ptr<byte_source> memory_source(std::string_view bytes);
/// A byte_source over a file, gzip-decompressed when `gzip`. @throws error naming the file
[[nodiscard]] std::unique_ptr<byte_source> file_source(const std::string& path, bool gzip);

/// A trace path opened once (a pipe reads right: Note [Reading a pipe] in byte_source.cpp).
struct trace_input {
  std::unique_ptr<byte_source> bytes;  ///< decompressed when the file starts with gzip's magic
  bool gzip = false;
};
/// Opens `path` once and detects gzip from its first two bytes. @throws error naming the file
[[nodiscard]] trace_input open_trace_input(const std::string& path);
/// `prefix` (bytes already read from `rest`), then the rest of `rest`.
[[nodiscard]] std::unique_ptr<byte_source> prefixed_source(std::string prefix, std::unique_ptr<byte_source> rest);

enum class pickle_kind : std::uint8_t {
  none, boolean, integer, big_integer, real, string, bytes, list, tuple, dict, set,
  skipped,  ///< not built: the caller asked to skip it, or it was handed over and released
  /// A memo reference (or a second occurrence) of a container already handed over to the stream
  /// callback and released (Note [Values referenced twice]): `index` is the item index it was
  /// handed over at, `generation` the tag of the streamed container it was handed over from.
  repeat,
};

/// One value. Containers and strings live in the document; the value holds their index.
struct pickle_value {
  pickle_kind kind = pickle_kind::none;
  std::uint32_t generation = 0;  ///< containers: the slot's generation when the value was made
  union {
    std::int64_t integer;
    double real;
    std::uint64_t index;  ///< string, bytes or container slot
  };
  pickle_value() : integer(0) {}
  [[nodiscard]] bool is_container() const noexcept {
    return kind == pickle_kind::list || kind == pickle_kind::tuple || kind == pickle_kind::dict ||
           kind == pickle_kind::set;
  }
};

/// What to do with a value, decided from where it goes (Note [Streaming a pickle]).
enum class value_policy : std::uint8_t {
  keep,       ///< build it
  skip,       ///< do not build it (nor anything inside it)
  stream,     ///< a list or set whose items are handed to the stream callback, then dropped
  undecided,  ///< (internal) its place is not known yet
};

/// Where a value goes: into the container tagged `parent_tag` (`root_tag` for the top level),
/// under `key` (a dict value with a string key) or at `index` (a list, tuple or set item).
struct value_place {
  static constexpr int root_tag = -1;
  int parent_tag = root_tag;
  bool has_key = false;
  std::string_view key;
  std::size_t index = 0;
};

struct value_role {
  value_policy policy = value_policy::keep;
  int tag = 0;  ///< the caller's name for the place, passed back as parent_tag of its items
};

class pickle_document;
/// Decides the role of a value from its place. Only called for places inside kept containers.
using role_function = std::function<value_role(const value_place&)>;
/// Receives each item of a streamed container (`tag` = the container's), in order.
using stream_function = std::function<void(const pickle_document&, int tag, std::size_t index, const pickle_value&)>;

/// What a parse built: the root value and the kept strings and containers it refers to.
class pickle_document {
 public:
  [[nodiscard]] const pickle_value& root() const noexcept { return root_; }
  /// The text of a string or bytes value.
  [[nodiscard]] std::string_view text(const pickle_value& value) const;
  /// Items of a list, tuple or set; a dict's keys and values alternate. Empty for a released container.
  [[nodiscard]] std::span<const pickle_value> items(const pickle_value& value) const;
  /// The value under string key `key` of a dict, or nullptr. A key given twice: the last value,
  /// as Python's dict keeps it.
  [[nodiscard]] const pickle_value* find(const pickle_value& dict, std::string_view key) const;
  /// False when `value` is a container whose slot was released (its items handed over or skipped).
  [[nodiscard]] bool alive(const pickle_value& value) const noexcept;
  /// Containers built and not released (for tests of the reader's memory).
  [[nodiscard]] std::size_t containers_in_use() const noexcept;
  /// Strings and bytes kept.
  [[nodiscard]] std::size_t strings_kept() const noexcept { return strings_.size(); }

 private:
  friend class pickle_parser;
  friend class pickle_arena;
  struct container {
    pickle_kind kind = pickle_kind::list;
    value_policy policy = value_policy::keep;
    int tag = 0;
    std::uint32_t generation = 0;
    bool filled = false;        ///< an item was added (APPEND, SETITEMS, ...)
    bool live = false;
    std::size_t count = 0;      ///< items added so far, also those handed over
    std::vector<pickle_value> items;
    /// The memo index it was stored at (the last one), or no_memo (Note [Values referenced twice]).
    std::uint64_t memo_index = no_memo;
    /// Set when the container was handed over and released: until the slot is reused, a value of
    /// generation `repeat_generation` reads as a repeat of (repeat_tag, repeat_item).
    bool handed_over = false;
    std::uint32_t repeat_generation = 0;
    int repeat_tag = 0;
    std::size_t repeat_item = 0;
  };
  static constexpr std::uint64_t no_memo = ~std::uint64_t{0};
  pickle_value root_;
  std::deque<std::string> strings_;
  std::deque<container> containers_;
  std::vector<std::size_t> free_slots_;
};

/// Bounds of the reader's memory (Note [Bounded by what it holds] in pickle_reader.cpp). The
/// defaults hold any real snapshot; tests lower them to refuse small bombs early.
struct pickle_limits {
  std::size_t max_stack = std::size_t{1} << 18;  ///< values (and marks) on the stack at once
  std::size_t base_items = std::size_t{1} << 20;  ///< items kept in built containers, whatever was handed over
  std::size_t items_per_event = 64;               ///< ... plus this many per item handed to the stream
  std::size_t base_text = std::size_t{1} << 26;   ///< bytes of long strings kept (64 MiB) ...
  std::size_t text_per_event = 1024;              ///< ... plus this many per item handed to the stream
  std::size_t memo_slack = 1024;                  ///< memo entries beyond one per value built
};

/// Parses one pickle from `in`. `role` decides what is kept (nullptr = keep everything);
/// `stream` receives the items of streamed containers. `source` names the input in messages.
/// @throws error: "<source>: <what> at byte <offset>" for malformed, truncated or unsupported input,
///         and for any opcode that would import or call code
[[nodiscard]] pickle_document parse_pickle(byte_source& in, std::string_view source, const role_function& role = {},
                                           const stream_function& stream = {}, const pickle_limits& limits = {});

}  // namespace streampool::replay_impl
