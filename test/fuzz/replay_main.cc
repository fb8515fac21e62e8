// A driver for our fuzz targets in ordinary (gcc) builds: runs every file of
// the seed corpus — which holds each crash ever found, as a regression test —
// then a bounded number of cheap random mutations of those seeds. The real,
// coverage-guided runs use libFuzzer through hack/fuzz.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [MUTATIONS]\n", argv[0]);
    return 2;
  }
  std::vector<std::string> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1])) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    seeds.push_back(ss.str());
  }
  for (const auto& s : seeds) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  long mutations = argc > 2 ? std::stol(argv[2]) : 20000;
  const char* last_input = std::getenv("FUZZ_LAST_INPUT");
  std::mt19937_64 rng(12345);  // fixed: a failure here reproduces exactly
  for (long i = 0; i < mutations && !seeds.empty(); ++i) {
    std::string input = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 4) {
        case 0:
          if (!input.empty()) input[rng() % input.size()] = static_cast<char>(rng());
          break;
        case 1:
          input.insert(input.begin() + static_cast<long>(input.empty() ? 0 : rng() % input.size()),
                       static_cast<char>(rng()));
          break;
        case 2:
          if (!input.empty()) input.erase(rng() % input.size(), 1 + rng() % 16);
          break;
        default:
          if (!input.empty()) input.append(input.substr(rng() % input.size(), 1 + rng() % 32));
          break;
      }
    }
    if (last_input != nullptr) {
      // Kept on disk before each run, so a crash leaves its input behind.
      std::ofstream(last_input, std::ios::binary | std::ios::trunc) << input;
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  std::printf("%zu seeds and %ld mutations ran clean\n", seeds.size(), mutations);
  return 0;
}
