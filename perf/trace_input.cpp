// trace_input.cpp — load_trace_input(): read_trace_file() with the harness's bad-input handling.
#include "trace_input.hpp"

#include "streampool/errors.hpp"

namespace streampool::bench {

trace_file load_trace_input(const std::string& path, int device, const common_options& opts) {
  if (path.empty()) throw usage_error("--trace FILE is required");
  info(opts, "reading " + path);
  trace_file file;
  try {
    file = read_trace_file(path, {device});
  } catch (const error& e) {
    throw usage_error(std::string("--trace: ") + e.what());
  }
  if (file.events.empty()) throw usage_error("--trace: '" + path + "' holds no events");
  if (file.format == "csv" && device != 0) {
    throw usage_error("--device " + std::to_string(device) + ": '" + path +
                      "' is a CSV trace, which holds one device; --device applies to PyTorch snapshots");
  }
  for (const std::string& warning : file.warnings) info(opts, "warning: " + warning);
  return file;
}

}  // namespace streampool::bench
