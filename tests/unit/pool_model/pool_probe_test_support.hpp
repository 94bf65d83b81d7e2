// pool_probe_test_support.hpp — the pool probe's data (tests/data/driver/pool/README.md) for tests:
// reading an op file (gzip or plain) and the probe's growth lines, and replaying the ops through
// any driver's stream-ordered pool while recording what the probe prints, so the sim (unit test)
// and the real device (GPU test) are checked against the same measurement.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "streampool/driver.hpp"

namespace streampool::testing::pool_probe {

struct op {
  char kind = 'm';          ///< m(alloc) f(free) s(synchronize)
  std::uint64_t value = 0;  ///< bytes for m, allocation id for f
  int stream = 0;
};

/// One line the probe printed: the pool's reserved bytes changed at operation `index`.
struct growth {
  long index = 0;
  std::uint64_t reserved = 0;
  std::uint64_t used = 0;
  std::int64_t offset = 0;  ///< of the allocation made at `index` from the first one (0 for frees)
  bool operator==(const growth&) const = default;
};

struct measured {
  std::vector<growth> lines;
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_used = 0;
};

inline const std::string& data_dir() {
  static const std::string dir = STREAMPOOL_POOL_DATA_DIR;
  return dir;
}

/// Reads an op file: "m BYTES STREAM", "f ID STREAM" or "s" per line.
/// @throws std::runtime_error naming the file and the line when it cannot be read
inline std::vector<op> read_ops(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error("cannot open " + path);
  std::vector<op> ops;
  char line[128];
  while (gzgets(file, line, sizeof line) != nullptr) {
    std::istringstream in(line);
    op o;
    in >> o.kind;
    if (o.kind == 'm' || o.kind == 'f') in >> o.value >> o.stream;
    if (!in || (o.kind != 'm' && o.kind != 'f' && o.kind != 's')) {
      gzclose(file);
      throw std::runtime_error(path + ": bad line '" + line + "'");
    }
    ops.push_back(o);
  }
  gzclose(file);
  return ops;
}

/// Reads what the probe printed. @throws std::runtime_error when the file cannot be opened
inline measured read_growth(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  measured m;
  std::string word;
  while (in >> word) {
    if (word == "peak_reserved") {
      std::string key;
      long ops = 0;
      in >> m.peak_reserved >> key >> m.peak_used >> key >> ops;
    } else {
      growth g;
      g.index = std::stol(word);
      in >> g.reserved >> g.used >> g.offset;
      m.lines.push_back(g);
    }
  }
  return m;
}

/// Replays `ops` on `pool` of device 0 with `streams` (eight: an op's stream is taken & 7), as
/// the probe does, and returns what it would print. Frees what is still live at the end.
/// @throws std::runtime_error when a call fails (naming the operation)
inline measured replay(driver& drv, mempool_t pool, const std::vector<stream_t>& streams, const std::vector<op>& ops) {
  auto attr = [&](pool_attr which) {
    std::uint64_t value = 0;
    if (!drv.pool_get_attr(pool, which, &value).ok()) throw std::runtime_error("pool_get_attr failed");
    return value;
  };
  std::vector<void*> ptrs;
  measured m;
  std::uint64_t last = attr(pool_attr::reserved_mem_current);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const op& o = ops[i];
    const stream_t stream = streams[static_cast<std::size_t>(o.stream & 7)];
    if (o.kind == 'm') {
      void* ptr = nullptr;
      const drv_result r = drv.malloc_async(pool, o.value, stream, &ptr);
      if (!r.ok()) throw std::runtime_error("malloc_async failed at op " + std::to_string(i) + ": " + drv.describe(r));
      ptrs.push_back(ptr);
    } else if (o.kind == 'f') {
      if (o.value >= ptrs.size() || ptrs[o.value] == nullptr) {
        throw std::runtime_error("bad free id at op " + std::to_string(i));
      }
      const drv_result r = drv.free_async(ptrs[o.value], stream);
      if (!r.ok()) throw std::runtime_error("free_async failed at op " + std::to_string(i) + ": " + drv.describe(r));
      ptrs[o.value] = nullptr;
    } else if (!drv.device_synchronize(0).ok()) {
      throw std::runtime_error("device_synchronize failed at op " + std::to_string(i));
    }
    const std::uint64_t reserved = attr(pool_attr::reserved_mem_current);
    if (reserved != last) {
      const auto offset = o.kind == 'm' ? static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(ptrs.back()) -
                                                                      reinterpret_cast<std::uintptr_t>(ptrs.front()))
                                        : 0;
      m.lines.push_back({static_cast<long>(i), reserved, attr(pool_attr::used_mem_current), offset});
      last = reserved;
    }
  }
  (void)drv.device_synchronize(0);
  m.peak_reserved = attr(pool_attr::reserved_mem_high);
  m.peak_used = attr(pool_attr::used_mem_high);
  for (void* ptr : ptrs) {
    if (ptr != nullptr) (void)drv.free_async(ptr, streams[0]);
  }
  return m;
}

/// How many growth lines agree from the first.
inline std::size_t agreeing_prefix(const measured& a, const measured& b) {
  std::size_t n = 0;
  while (n < a.lines.size() && n < b.lines.size() && a.lines[n] == b.lines[n]) ++n;
  return n;
}

/// The probed training traces (tests/data/driver/pool/NAME.ops.gz and NAME.growth.txt).
inline const std::vector<std::string>& probed_traces() {
  static const std::vector<std::string> names = {"encoder_varlen", "gpt2_varlen", "resnet50_varres",
                                                 "threestream_enc", "twostream_cnn"};
  return names;
}

}  // namespace streampool::testing::pool_probe
