// replay_main.cpp — with STREAMPOOL_FUZZ_REPLAY defined, a main() that runs a fuzz target's
// LLVMFuzzerTestOneInput on every file of the directories (or files) given on the command line,
// without libFuzzer. tests/stress/CMakeLists.txt builds each target this way and registers it as
// a `sim` ctest over tests/fuzz/corpus/<target>, so CI replays the corpus on every run.
#ifdef STREAMPOOL_FUZZ_REPLAY

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

int replay_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  (void)LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t replayed = 0;
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(arg);
    }
    for (const auto& file : files) {
      failures += replay_file(file);
      ++replayed;
    }
  }
  std::printf("replayed %zu input(s)\n", replayed);
  if (replayed == 0) {
    std::fprintf(stderr, "no inputs: pass corpus directories or files\n");
    return 1;
  }
  return failures == 0 ? 0 : 1;
}

#endif  // STREAMPOOL_FUZZ_REPLAY
