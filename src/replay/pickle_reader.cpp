// pickle_reader.cpp — parse_pickle(): the pickle virtual machine restricted to data opcodes, with the
// placement logic that lets the caller skip or stream subtrees while they are being read.
//
// Note [Streaming a pickle]
// A pickle builds its result bottom-up: a dict is created empty, its items are pushed, then one
// SETITEMS adds them; the root dict of a PyTorch snapshot receives its values only at the very
// end. To avoid building what is not wanted (stack frames, the segment list), the role of a value
// is decided when it is created, from where it will go: the container being filled since the last
// MARK (and, for a dict, the key just pushed), or, for the single-item forms APPEND / SETITEM that
// have no MARK, the fresh container just below it. Two places remain ambiguous while reading
// forward: after an empty, unfilled list a new value may be its single item or the next sibling.
// A scalar is told apart by peeking at the next opcode (APPEND or not); a container in that spot
// is built as `undecided` and its role applied when it is attached (APPEND/SETITEMS...), which is
// where a pickle says where a value goes. Skipped containers are never filled; streamed
// containers hand each item to the caller and free it; containers live in a slot arena with
// generations, so a memo reference to a freed one reads as `skipped` and nothing is destroyed
// recursively. The memo keeps one small entry per memoized value, so indices stay right.
// Limits, all on the side of keeping too much rather than too little, except the last: a key
// pushed onto a fresh one-item dict (SETITEM form) is undecided, so a long string after it is
// kept; and the items of a TUPLE1..3 tuple are placed before the tuple exists, as if each took the
// tuple's place, so a list nested in such a tuple under a streamed key would be streamed.
// Snapshots have tuples only in the skipped segment list. What the reader may hold is bounded:
// Note [Bounded by what it holds] in pickle_budget.cpp.
//
// Note [Values referenced twice]
// Python's memo makes a second reference to a value the same object: a snapshot whose trace lists
// one event dict twice (BINGET of its memo index) has the event twice for Python. A streamed item
// is released once handed over, so such a reference used to read as `skipped` and the event was
// dropped. Now, when a container is handed over, its memo entry (the last index it was stored at)
// is rewritten to a `repeat` value naming the item it was handed over as, and the released slot
// remembers the same until it is reused (for a second occurrence within the same APPENDS batch);
// the stream callback receives the repeat and copies what it made of the first one. Keeping the
// container alive instead would keep every event dict, since Python's pickler memoizes them all.
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "replay/pickle_arena.hpp"
#include "replay/pickle_budget.hpp"
#include "replay/pickle_input.hpp"
#include "replay/pickle_reader.hpp"

namespace streampool::replay_impl {
namespace {

constexpr std::size_t short_string_limit = 32;  // interned, and kept even where skipped
constexpr int max_resolve_depth = 1000;

enum class hashability : std::uint8_t { hashable, unhashable, unknown };

}  // namespace

class pickle_parser {
 public:
  pickle_parser(byte_source& in, std::string_view source, const role_function& role, const stream_function& stream,
                const pickle_limits& limits)
      : in_(in, source), role_(role), stream_(stream), budget_(in_, limits) {}

  pickle_document run();

 private:
  using container = pickle_document::container;

  /// Where a value on the stack sits (Note [Streaming a pickle]).
  struct place {
    enum class kind : std::uint8_t { root, inside, undecided } k = kind::root;
    value_policy parent_policy = value_policy::keep;
    int parent_tag = value_place::root_tag;
    bool dict = false;    ///< the parent is a dict: items alternate key, value
    bool is_key = false;
    std::size_t index = 0;
  };
  struct entry {
    pickle_value value;
    place where;
  };
  struct mark {
    std::size_t position;  ///< stack size when the MARK was pushed
    place first;           ///< where the first item after it goes
  };

  // ---- input (pickle_input) ----
  std::uint8_t byte() { return in_.byte(); }
  void read(char* out, std::size_t n) { in_.read(out, n); }
  std::uint64_t little(std::size_t n) { return in_.little(n); }
  std::string line() { return in_.line(); }
  [[noreturn]] void fail(const std::string& what) const { in_.fail(what); }

  // ---- values ----
  pickle_value new_container(pickle_kind kind, const value_role& role) { return arena_.make(kind, role); }
  container& slot(const pickle_value& v) { return doc_.containers_[v.index]; }
  [[nodiscard]] bool alive(const pickle_value& v) const { return doc_.alive(v); }
  void release(const pickle_value& v, bool only_unowned) { arena_.release(v, only_unowned); }
  void drop(const pickle_value& v);
  void resolve(pickle_value& v, const value_role& role, int depth);
  void add_items(const pickle_value& target, std::vector<entry>& items, bool pairs, const char* op);
  void hand_over(int tag, std::size_t index, const pickle_value& value);
  [[nodiscard]] pickle_value dead_as(const pickle_value& v) const { return arena_.dead_as(v); }

  // ---- placement ----
  [[nodiscard]] std::size_t floor() const { return marks_.empty() ? 0 : marks_.back().position; }
  [[nodiscard]] place inside_of(const container& c) const;
  [[nodiscard]] static place successor(const place& p);
  place next_place(hashability h, bool scalar, std::size_t payload_left = 0);
  value_role role_for(const place& p, std::string_view key) const;
  std::string_view key_before() const;
  void push(const pickle_value& v, const place& p) {
    budget_.push(stack_.size());
    stack_.push_back({v, p});
  }
  void push_scalar(pickle_value v);
  void push_text(pickle_kind kind, std::uint64_t length);
  void push_new_container(pickle_kind kind);
  std::vector<entry> pop_to_mark(const char* op);
  entry pop(const char* op);
  void build_from(pickle_kind kind, std::vector<entry> items, const char* op);

  // ---- memo ----
  void memo_put(std::uint64_t index);
  void memo_get(std::uint64_t index);
  std::uint64_t memo_index(const std::string& text) const;

  void step(std::uint8_t op);

  pickle_input in_;
  const role_function& role_;
  const stream_function& stream_;
  pickle_budget budget_;
  pickle_document doc_;
  pickle_arena arena_{doc_, budget_};
  std::vector<entry> stack_;
  std::vector<mark> marks_;
  pickle_memo memo_;
  std::unordered_map<std::string, std::uint64_t> interned_[2];  ///< short strings, short bytes -> strings_ index
  bool stopped_ = false;
};

// ---- values ------------------------------------------------------------------------------------

/// A value that lands in a skipped place: freed if it was built only for that place.
void pickle_parser::drop(const pickle_value& v) {
  if (!v.is_container() || !alive(v)) return;
  const value_policy policy = slot(v).policy;
  if (policy == value_policy::undecided || policy == value_policy::skip) release(v, true);
}

/// Applies the role of its place to an `undecided` container and, below it, to its items.
void pickle_parser::resolve(pickle_value& v, const value_role& role, int depth) {
  if (!v.is_container() || !alive(v) || slot(v).policy != value_policy::undecided) return;
  if (depth > max_resolve_depth) fail("values nested more than " + std::to_string(max_resolve_depth) + " deep");
  if (role.policy == value_policy::undecided) return;
  if (role.policy == value_policy::skip) {
    release(v, true);
    v.kind = pickle_kind::skipped;
    return;
  }
  container& c = slot(v);
  const bool stream = role.policy == value_policy::stream && (c.kind == pickle_kind::list || c.kind == pickle_kind::set);
  c.policy = stream ? value_policy::stream : value_policy::keep;
  c.tag = role.tag;
  std::vector<pickle_value> items;
  items.swap(c.items);
  const bool dict = c.kind == pickle_kind::dict;
  const value_policy parent_policy = c.policy;
  const int parent_tag = c.tag;
  for (std::size_t i = dict ? 1 : 0; i < items.size(); i += dict ? 2 : 1) {
    place p{place::kind::inside, parent_policy, parent_tag, dict, false, dict ? i / 2 : i};
    const std::string_view key = dict && items[i - 1].kind == pickle_kind::string ? doc_.text(items[i - 1]) : "";
    resolve(items[i], role_for(p, key), depth + 1);
  }
  if (stream) {
    for (std::size_t i = 0; i < items.size(); ++i) {
      hand_over(parent_tag, i, items[i].is_container() && !alive(items[i]) ? dead_as(items[i]) : items[i]);
    }
    budget_.unkeep(items.size());
    items.clear();
  }
  slot(v).items.swap(items);  // slot(v) again: the arena may not move, but stay explicit
}

void pickle_parser::add_items(const pickle_value& target, std::vector<entry>& items, bool pairs, const char* op) {
  if (target.kind == pickle_kind::skipped || (target.is_container() && !alive(target))) {
    for (entry& e : items) drop(e.value);
    return;
  }
  const bool dict_target = target.kind == pickle_kind::dict;
  // Tuples take items only while TUPLE/TUPLE1..3 build them (op "TUPLE").
  const bool list_target = target.kind == pickle_kind::list || target.kind == pickle_kind::set ||
                           (target.kind == pickle_kind::tuple && std::strcmp(op, "TUPLE") == 0);
  if ((pairs && !dict_target) || (!pairs && !list_target)) fail(std::string(op) + " applied to a value that cannot take it");
  if (pairs && items.size() % 2 != 0) fail(std::string(op) + " with an odd number of keys and values");
  container& c = slot(target);
  c.filled = true;
  const std::size_t step = pairs ? 2 : 1;
  for (std::size_t i = 0; i < items.size(); i += step) {
    const std::size_t index = c.count++;
    pickle_value& value = items[i + step - 1].value;
    switch (c.policy) {
      case value_policy::skip:
        drop(value);
        if (pairs) drop(items[i].value);
        continue;
      case value_policy::undecided:
        break;
      case value_policy::keep:
      case value_policy::stream: {
        place p{place::kind::inside, c.policy, c.tag, pairs, false, index};
        const std::string_view key = pairs && items[i].value.kind == pickle_kind::string ? doc_.text(items[i].value) : "";
        resolve(value, role_for(p, key), 0);
        if (value.is_container() && alive(value) && slot(value).policy == value_policy::skip) {
          drop(value);  // built for a place the caller skips (e.g. stack frames): not kept
          value.kind = pickle_kind::skipped;
        }
        break;
      }
    }
    if (value.is_container() && !alive(value)) value = dead_as(value);  // released on the way, or handed over
    container& target_slot = slot(target);
    if (target_slot.policy == value_policy::stream) {
      if (value.kind != pickle_kind::skipped) hand_over(target_slot.tag, index, value);
      continue;
    }
    budget_.keep(pairs ? 2 : 1);
    container& kept = slot(target);
    if (pairs) kept.items.push_back(items[i].value);
    kept.items.push_back(value);
  }
}

/// Gives a streamed container's item to the caller, then frees it (Note [Values referenced twice]).
void pickle_parser::hand_over(int tag, std::size_t index, const pickle_value& value) {
  budget_.handed_over();
  if (stream_) stream_(doc_, tag, index, value);
  if (!value.is_container() || !alive(value)) return;
  pickle_value repeat;
  repeat.kind = pickle_kind::repeat;
  repeat.index = index;
  repeat.generation = static_cast<std::uint32_t>(tag);
  if (slot(value).memo_index != pickle_document::no_memo) memo_.replace(slot(value).memo_index, repeat);
  arena_.hand_over(value, tag, index);
}

// ---- placement ---------------------------------------------------------------------------------

pickle_parser::place pickle_parser::inside_of(const container& c) const {
  const bool dict = c.kind == pickle_kind::dict;
  return {place::kind::inside, c.policy, c.tag, dict, dict, c.count};
}

pickle_parser::place pickle_parser::successor(const place& p) {
  place next = p;
  if (p.k == place::kind::inside && p.dict) {
    next.is_key = true;  // after a value comes the next key (a key is followed by its value: see next_place)
  }
  ++next.index;
  return next;
}

/// Where a value pushed now goes (Note [Streaming a pickle]). `scalar`: the value is one opcode,
/// so an APPEND right after it (past `payload_left` unread bytes of it) says it is the single
/// item of the list below it.
pickle_parser::place pickle_parser::next_place(hashability h, bool scalar, std::size_t payload_left) {
  if (stack_.size() == floor()) {
    if (marks_.empty()) return {place::kind::root, value_policy::keep, value_place::root_tag, false, false, stack_.size()};
    place first = marks_.back().first;
    return first;
  }
  const entry& top = stack_.back();
  if (top.where.k == place::kind::undecided) return top.where;
  if (top.where.k == place::kind::inside && top.where.dict && top.where.is_key) {
    place value = top.where;
    value.is_key = false;
    return value;
  }
  const place after = successor(top.where);
  const bool fresh = top.value.is_container() && top.value.kind != pickle_kind::tuple && alive(top.value) &&
                     !doc_.containers_[top.value.index].filled;
  if (!fresh) return after;
  const container& c = doc_.containers_[top.value.index];
  const place in = inside_of(c);
  const bool in_possible = !(in.dict && h != hashability::hashable);
  const bool after_possible = !(after.k == place::kind::inside && after.dict && after.is_key && h == hashability::unhashable);
  if (in_possible && !after_possible) return in;
  if (!in_possible && h == hashability::unhashable) return after;
  if (scalar && !in.dict) {
    const std::optional<std::uint8_t> next = in_.peek_past_memo(payload_left);
    if (next.has_value()) return *next == 'a' ? in : after;
  }
  place unknown;
  unknown.k = place::kind::undecided;
  unknown.parent_policy = value_policy::undecided;
  return unknown;
}

value_role pickle_parser::role_for(const place& p, std::string_view key) const {
  if (p.k == place::kind::undecided || p.parent_policy == value_policy::undecided) return {value_policy::undecided, 0};
  if (p.parent_policy == value_policy::skip) return {value_policy::skip, 0};
  if (p.k == place::kind::inside && p.dict && p.is_key) return {value_policy::keep, 0};
  value_place where;
  if (p.k == place::kind::inside) {
    where.parent_tag = p.parent_tag;
    where.has_key = p.dict;
    where.key = key;
  }
  where.index = p.index;
  return role_ ? role_(where) : value_role{};
}

/// The text of the key just below the top when the top is a dict key ("" otherwise).
std::string_view pickle_parser::key_before() const {
  if (stack_.size() == floor()) return "";
  const entry& top = stack_.back();
  if (top.where.k == place::kind::inside && top.where.dict && top.where.is_key && top.value.kind == pickle_kind::string) {
    return doc_.text(top.value);
  }
  return "";
}

void pickle_parser::push_scalar(pickle_value v) {
  budget_.built();
  push(v, next_place(hashability::hashable, true));
}

void pickle_parser::push_text(pickle_kind kind, std::uint64_t length) {
  const place p = next_place(hashability::hashable, true,
                             static_cast<std::size_t>(std::min<std::uint64_t>(length, pickle_input::buffer_size)));
  const value_role role = role_for(p, key_before());
  pickle_value v;
  v.kind = kind;
  budget_.built();
  if (length <= short_string_limit) {
    // Short strings are interned, kept even in skipped places: a memo reference may reuse one
    // in a kept place later (Python shares '' and repeated keys), and they cost little.
    char text[short_string_limit];
    read(text, length);
    const auto [it, added] = interned_[kind == pickle_kind::bytes].try_emplace(std::string(text, length), 0);
    if (added) {
      it->second = doc_.strings_.size();
      doc_.strings_.push_back(it->first);
    }
    v.index = it->second;
  } else if (role.policy == value_policy::skip) {
    read(nullptr, length);
    v.kind = pickle_kind::skipped;
  } else {
    budget_.keep_text(length);
    std::string text;
    text.reserve(std::min<std::uint64_t>(length, pickle_input::buffer_size));
    while (text.size() < length) {
      const std::size_t piece = std::min<std::uint64_t>(length - text.size(), pickle_input::buffer_size);
      const std::size_t at = text.size();
      text.resize(at + piece);
      read(text.data() + at, piece);
    }
    v.index = doc_.strings_.size();
    doc_.strings_.push_back(std::move(text));
  }
  push(v, p);
}

void pickle_parser::push_new_container(pickle_kind kind) {
  const bool hashable = kind == pickle_kind::tuple;
  const place p = next_place(hashable ? hashability::hashable : hashability::unhashable, false);
  push(new_container(kind, role_for(p, key_before())), p);
}

std::vector<pickle_parser::entry> pickle_parser::pop_to_mark(const char* op) {
  if (marks_.empty()) fail(std::string(op) + " without a MARK");
  const std::size_t at = marks_.back().position;
  marks_.pop_back();
  std::vector<entry> items(stack_.begin() + static_cast<std::ptrdiff_t>(at), stack_.end());
  stack_.resize(at);
  return items;
}

pickle_parser::entry pickle_parser::pop(const char* op) {
  if (stack_.size() == floor()) fail(std::string(op) + " needs a value on the stack and finds none");
  entry e = stack_.back();
  stack_.pop_back();
  return e;
}

void pickle_parser::build_from(pickle_kind kind, std::vector<entry> items, const char* op) {
  const place p = next_place(kind == pickle_kind::tuple ? hashability::hashable : hashability::unhashable, false);
  const pickle_value v = new_container(kind, role_for(p, key_before()));
  add_items(v, items, kind == pickle_kind::dict, op);
  push(v, p);
}

// ---- memo --------------------------------------------------------------------------------------

void pickle_parser::memo_put(std::uint64_t index) {
  if (stack_.size() == floor()) fail("a memo store with no value on the stack");
  const pickle_value& v = stack_.back().value;
  if (!memo_.has(index)) budget_.memo(memo_.size());
  memo_.put(index, v);
  if (v.is_container() && alive(v)) slot(v).memo_index = index;  // Note [Values referenced twice]
}

/// The argument of a text PUT/GET: decimal digits below 2^64 (std::stoull once failed on more).
std::uint64_t pickle_parser::memo_index(const std::string& text) const {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    fail("memo index '" + text + "' of a text PUT/GET is not a decimal integer below 2^64 (a damaged pickle)");
  }
  return value;
}

void pickle_parser::memo_get(std::uint64_t index) {
  const std::optional<pickle_value> stored = memo_.get(index);
  if (!stored) fail("memo entry " + std::to_string(index) + " is read before it is stored");
  pickle_value v = *stored;
  if (v.is_container() && !alive(v)) v = dead_as(v);
  const bool is_container = v.is_container();
  push(v, next_place(is_container && v.kind != pickle_kind::tuple ? hashability::unhashable : hashability::hashable,
                     !is_container));
}

// ---- the opcode loop ---------------------------------------------------------------------------

void pickle_parser::step(std::uint8_t op) {
  in_.refuse_code(op);
  pickle_value v;
  switch (op) {
    case 0x80: {  // PROTO
      const unsigned version = byte();
      if (version > 5) fail("pickle protocol " + std::to_string(version) + " is newer than the newest known (5)");
      return;
    }
    case 0x95: read(nullptr, 8); return;  // FRAME: a size hint only
    case '.': stopped_ = true; return;    // STOP
    case '(': {                           // MARK
      place first;
      if (stack_.size() > floor() && stack_.back().value.is_container() && stack_.back().value.kind != pickle_kind::tuple &&
          alive(stack_.back().value)) {
        first = inside_of(doc_.containers_[stack_.back().value.index]);
      } else {
        const place literal = next_place(hashability::unknown, false);
        const value_role role = role_for(literal, key_before());
        first = {role.policy == value_policy::undecided ? place::kind::undecided : place::kind::inside, role.policy,
                 role.tag, false, false, 0};
      }
      budget_.mark(marks_.size());
      marks_.push_back({stack_.size(), first});
      return;
    }
    case '0':  // POP
      if (stack_.size() == floor() && !marks_.empty()) marks_.pop_back();
      else (void)pop("POP");
      return;
    case '1': (void)pop_to_mark("POP_MARK"); return;
    case '2': {  // DUP
      const entry top = pop("DUP");
      push(top.value, top.where);
      push(top.value, successor(top.where));
      return;
    }
    case 'N': push_scalar(v); return;
    case 0x88: case 0x89:  // NEWTRUE, NEWFALSE
      v.kind = pickle_kind::boolean;
      v.integer = op == 0x88 ? 1 : 0;
      push_scalar(v);
      return;
    case 'J': v.kind = pickle_kind::integer; v.integer = static_cast<std::int32_t>(little(4)); push_scalar(v); return;
    case 'K': v.kind = pickle_kind::integer; v.integer = static_cast<std::int64_t>(little(1)); push_scalar(v); return;
    case 'M': v.kind = pickle_kind::integer; v.integer = static_cast<std::int64_t>(little(2)); push_scalar(v); return;
    case 0x8a: push_scalar(in_.long_integer(little(1))); return;  // LONG1
    case 0x8b: {                                                    // LONG4
      const auto n = static_cast<std::int32_t>(little(4));
      if (n < 0) fail("LONG4 with a negative length");
      push_scalar(in_.long_integer(static_cast<std::uint64_t>(n)));
      return;
    }
    case 'I': push_scalar(in_.text_number(line(), 'I')); return;
    case 'L': push_scalar(in_.text_number(line(), 'L')); return;
    case 'F': push_scalar(in_.text_number(line(), 'F')); return;
    case 'G': push_scalar(in_.binary_float()); return;  // BINFLOAT
    case 'X': push_text(pickle_kind::string, little(4)); return;       // BINUNICODE
    case 0x8c: push_text(pickle_kind::string, little(1)); return;      // SHORT_BINUNICODE
    case 0x8d: push_text(pickle_kind::string, little(8)); return;      // BINUNICODE8
    case 'T': {                                                         // BINSTRING (Python 2 str)
      const auto n = static_cast<std::int32_t>(little(4));
      if (n < 0) fail("BINSTRING with a negative length");
      push_text(pickle_kind::bytes, static_cast<std::uint64_t>(n));
      return;
    }
    case 'U': push_text(pickle_kind::bytes, little(1)); return;  // SHORT_BINSTRING
    case 'B': push_text(pickle_kind::bytes, little(4)); return;  // BINBYTES
    case 'C': push_text(pickle_kind::bytes, little(1)); return;  // SHORT_BINBYTES
    case 0x8e: case 0x96: push_text(pickle_kind::bytes, little(8)); return;  // BINBYTES8, BYTEARRAY8
    case 'S': case 'V':
      fail("protocol-0 text strings (STRING/UNICODE opcodes) are not supported; write the pickle with protocol 2 or newer");
    case 0x97: case 0x98:
      fail("out-of-band buffers (NEXT_BUFFER/READONLY_BUFFER) are not supported");
    case ']': push_new_container(pickle_kind::list); return;
    case '}': push_new_container(pickle_kind::dict); return;
    case ')': push_new_container(pickle_kind::tuple); return;
    case 0x8f: push_new_container(pickle_kind::set); return;
    case 'a': {  // APPEND
      std::vector<entry> items{pop("APPEND")};
      const entry target = pop("APPEND");
      add_items(target.value, items, false, "APPEND");
      push(target.value, target.where);
      return;
    }
    case 's': {  // SETITEM
      const entry value = pop("SETITEM");
      const entry key = pop("SETITEM");
      std::vector<entry> items{key, value};
      const entry target = pop("SETITEM");
      add_items(target.value, items, true, "SETITEM");
      push(target.value, target.where);
      return;
    }
    case 'e': case 'u': case 0x90: {  // APPENDS, SETITEMS, ADDITEMS
      const char* name = op == 'e' ? "APPENDS" : op == 'u' ? "SETITEMS" : "ADDITEMS";
      std::vector<entry> items = pop_to_mark(name);
      const entry target = pop(name);
      add_items(target.value, items, op == 'u', name);
      push(target.value, target.where);
      return;
    }
    case 't': build_from(pickle_kind::tuple, pop_to_mark("TUPLE"), "TUPLE"); return;
    case 'l': build_from(pickle_kind::list, pop_to_mark("LIST"), "LIST"); return;
    case 'd': build_from(pickle_kind::dict, pop_to_mark("DICT"), "DICT"); return;
    case 0x91: build_from(pickle_kind::set, pop_to_mark("FROZENSET"), "FROZENSET"); return;
    case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
      const std::size_t n = op - 0x84u;
      if (stack_.size() - floor() < n) fail("TUPLE" + std::to_string(n) + " needs " + std::to_string(n) + " values");
      std::vector<entry> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
      stack_.resize(stack_.size() - n);
      build_from(pickle_kind::tuple, std::move(items), "TUPLE");
      return;
    }
    case 'p': memo_put(memo_index(line())); return;          // PUT (text)
    case 'q': memo_put(little(1)); return;                   // BINPUT
    case 'r': memo_put(little(4)); return;                   // LONG_BINPUT
    case 0x94: memo_put(memo_.next()); return;               // MEMOIZE
    case 'g': memo_get(memo_index(line())); return;          // GET (text)
    case 'h': memo_get(little(1)); return;                   // BINGET
    case 'j': memo_get(little(4)); return;                   // LONG_BINGET
    default: {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", op);
      fail(std::string("unknown pickle opcode ") + hex + " (not a pickle of protocol 2-5, or a damaged file)");
    }
  }
}

pickle_document pickle_parser::run() {
  while (!stopped_) {
    in_.start_opcode();
    step(byte());
  }
  if (!marks_.empty() || stack_.size() != 1) fail("the pickle ends with " + std::to_string(stack_.size()) + " values and " +
                                                   std::to_string(marks_.size()) + " marks on its stack, not one value");
  doc_.root_ = stack_.back().value;
  if (doc_.root_.is_container() && alive(doc_.root_) && slot(doc_.root_).policy == value_policy::undecided) {
    resolve(doc_.root_, role_for(place{}, ""), 0);
  }
  return std::move(doc_);
}

pickle_document parse_pickle(byte_source& in, std::string_view source, const role_function& role,
                             const stream_function& stream, const pickle_limits& limits) {
  return pickle_parser(in, source, role, stream, limits).run();
}

}  // namespace streampool::replay_impl
