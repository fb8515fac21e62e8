// blockctl: the node admin's troubleshooting CLI. Thin: the verbs do the work,
// on the machine's files and processes.
#include <iostream>

#include "cli/verb.h"
#include "common/host.h"

int main(int argc, char** argv) {
  return blockcsi::cli::RunBlockctl(argc, argv, std::cout, std::cerr, blockcsi::MachineHost());
}
