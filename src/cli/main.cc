// blockctl: the node admin's troubleshooting CLI. Thin: the verbs do the work.
#include <iostream>

#include "cli/verb.h"

int main(int argc, char** argv) { return blockcsi::cli::RunBlockctl(argc, argv, std::cout, std::cerr); }
