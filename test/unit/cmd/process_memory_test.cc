// ReleaseStartupPages (issue #18) drops the never-written file pages of the
// program and its libraries from the page tables: the RSS falls, and code,
// constants, relocated data (vtables, pointer tables), exception unwinding
// and libraries' code all still work, read back from the file. Were a
// written segment (RELRO, .data) dropped too, a virtual call or a pointer
// table read here would crash or read the unrelocated file contents.
#include "cmd/process_memory.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace blockcsi {
namespace {

// The file-backed resident pages of this process in KiB (RssFile).
long RssFileKib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
  }
  return -1;
}

struct Shape {
  virtual ~Shape() = default;
  virtual int Sides() const = 0;
};
struct Triangle final : Shape {
  int Sides() const override { return 3; }
};
struct Square final : Shape {
  int Sides() const override { return 4; }
};

// Chosen at run time so that the calls below go through the vtables.
__attribute__((noinline)) std::unique_ptr<Shape> MakeShape(int sides) {
  if (sides == 3) return std::make_unique<Triangle>();
  return std::make_unique<Square>();
}

// Pointers the loader relocated at start (RELRO in a position-independent program).
const char* const kNames[] = {"alpha", "beta", "gamma"};

TEST(ReleaseStartupPages, DropsCodePagesAndEverythingStillRuns) {
  volatile int sides = 4;
  ASSERT_EQ(MakeShape(sides)->Sides(), 4);
  long before = RssFileKib();
  ASSERT_GT(before, 0);

  ReleaseStartupPages();

  long after = RssFileKib();
  EXPECT_LT(after, before) << "no file page was dropped";
  EXPECT_EQ(MakeShape(sides)->Sides(), 4);
  EXPECT_EQ(MakeShape(3)->Sides(), 3);
  volatile int index = 1;
  EXPECT_STREQ(kNames[index], "beta");
  EXPECT_THROW(throw std::runtime_error("unwinds"), std::runtime_error);
  std::ostringstream text;  // libstdc++'s own virtual calls and locale tables
  text << 42 << ' ' << 2.5;
  EXPECT_EQ(text.str(), "42 2.5");
  int ran = 0;
  std::thread([&ran] { ran = 1; }).join();
  EXPECT_EQ(ran, 1);
}

TEST(ReleaseStartupPages, CanRunAgain) {
  ReleaseStartupPages();
  ReleaseStartupPages();
  EXPECT_EQ(MakeShape(3)->Sides(), 3);
}

}  // namespace
}  // namespace blockcsi
