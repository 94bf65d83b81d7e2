// tune_long_settings_test.cpp — issue 31: a snapshot whose allocator_settings string is huge took
// `tune` 57 s. Two costs grew with the string: the parser's did-you-mean measured the edit distance
// from the whole unknown "key" to every key (Note [Did you mean], src/config/diagnostics.cpp:
// 29 s for 4 MB), and tune copied the text into every table row's width and every line that names
// the current config (Note [Long config texts], cmd_tune.cpp: 70 MB of output for a 4.4 MB string
// that parses). Both snapshots here are answered in well under the old times, in a page of output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

/// A PyTorch memory snapshot (pickle protocol 4, the layout of torch.cuda.memory._snapshot()):
/// one 1 MiB block allocated and freed on device 0, and `settings` as PYTORCH_CUDA_ALLOC_CONF.
std::string snapshot_pickle(const std::string& settings) {
  std::string p("\x80\x04", 2);
  const auto text = [&p](const std::string& s) {
    if (s.size() < 256) {
      p += static_cast<char>(0x8c);  // SHORT_BINUNICODE
      p += static_cast<char>(s.size());
    } else {
      p += 'X';  // BINUNICODE, 4-byte length
      for (int i = 0; i < 4; ++i) p += static_cast<char>((s.size() >> (8 * i)) & 0xff);
    }
    p += s;
  };
  const auto integer = [&p](std::uint32_t v) {
    p += 'J';  // BININT
    for (int i = 0; i < 4; ++i) p += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  const auto event = [&](const char* action, std::uint32_t time) {
    p += "}(";
    text("action");
    text(action);
    text("addr");
    integer(1u << 21);
    text("size");
    integer(1u << 20);
    text("stream");
    integer(0);
    text("time_us");
    integer(time);
    p += 'u';
  };
  p += "}(";
  text("device_traces");
  p += "](](";
  event("alloc", 1);
  event("free_requested", 2);
  event("free_completed", 3);
  p += "ee";
  text("allocator_settings");
  p += "}(";
  text("PYTORCH_CUDA_ALLOC_CONF");
  text(settings);
  p += "uu.";
  return p;
}

struct tune_run {
  int status = -1;
  std::string output;
  double seconds = 0;
};

tune_run tune(const std::string& settings, const std::string& name) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / ("streampool_" + name + ".pickle");
  std::ofstream(path, std::ios::binary) << snapshot_pickle(settings);
  tune_run r;
  const auto start = std::chrono::steady_clock::now();
  const std::string command = std::string("'") + STREAMPOOL_BENCH_BINARY + "' tune --quiet --trace '" + path.string() + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) r.output += buffer;
  const int status = ::pclose(pipe);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::filesystem::remove(path);
  return r;
}

// 4 MB of one unknown "key": the parser refuses it, tune compares with PyTorch's defaults.
TEST(tune_long_settings, AnUnknownKeyOfMegabytesIsAnsweredAtOnce) {
  const tune_run r = tune(std::string(4000000, 'x'), "long_unknown");
  EXPECT_EQ(r.status, 0) << r.output.substr(0, 2000);
  EXPECT_LT(r.seconds, 10.0) << "29 s before (an edit distance per key over the whole word)";
  EXPECT_LT(r.output.size(), 16384u) << "8 MB before: the text and the parser's message quoting it";
  EXPECT_NE(r.output.find("(4000000 characters)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not parse here"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("unknown key"), std::string::npos) << "the message's head is kept" << r.output;
  EXPECT_NE(r.output.find("compared with PyTorch's defaults instead"), std::string::npos) << r.output;
}

// 4.4 MB that parse (one key given 200,000 times, the last one wins, as in PyTorch).
TEST(tune_long_settings, ALongConfigThatParsesIsShownShortened) {
  std::string settings;
  for (int i = 0; i < 200000; ++i) settings += "max_split_size_mb:256,";
  settings += "expandable_segments:True";
  const tune_run r = tune(settings, "long_parsing");
  EXPECT_EQ(r.status, 0) << r.output.substr(0, 2000);
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_LT(r.output.size(), 16384u) << "70 MB before: every row padded to the current config's width";
  EXPECT_NE(r.output.find("(" + std::to_string(settings.size()) + " characters) (current)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("recorded in the snapshot"), std::string::npos) << r.output;
}

}  // namespace
