// bench_args.h: the two things every bench program's flag parsing needs on
// top of CLI11 (the tree's one argv parser, as in src/cmd and src/cli): the
// exit codes these tools have always used (0 after --help, 2 for a bad flag
// or value; hack/bench.sh records a non-zero exit as a failed step), the
// comma list of counts several of them take (--depths 1,4,16,32) and the
// round counts that let each side of a comparison go first equally often.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace blockcsi::bench {

// Parses argv into app's options. nullopt: go on; else the program's exit
// code, with the help or the error (and a pointer to --help) already printed.
inline std::optional<int> ParseFlags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

// --flag N,M,...: positive counts; given, the list replaces the default.
inline CLI::Option* AddCountList(CLI::App& app, const std::string& flag, std::vector<int>* list,
                                 const std::string& help) {
  return app.add_option(flag, *list, help)->delimiter(',')->check(CLI::Range(1, 1 << 20))->capture_default_str();
}

// --flag N: measured rounds in which `sides` sides take turns going first
// (the side that starts moves on by one each round); N must be a positive
// multiple of `sides`, so that each side goes first equally often.
inline CLI::Option* AddRounds(CLI::App& app, const std::string& flag, int* rounds, int sides, const std::string& help) {
  CLI::Validator turns(
      [sides](std::string& text) -> std::string {
        int n = 0;
        try {
          n = std::stoi(text);
        } catch (const std::exception&) {
          return "not a number: " + text;
        }
        if (n <= 0 || n % sides != 0) {
          return "must be a positive multiple of " + std::to_string(sides) + " (the sides taking turns to go first)";
        }
        return "";
      },
      "MULTIPLE OF " + std::to_string(sides));
  return app.add_option(flag, *rounds, help)->check(turns)->capture_default_str();
}

// Prints a check CLI11 cannot express as a validator (it spans two flags or
// a multiple) the way CLI11 prints its own errors; returns the usage code.
inline int UsageError(const CLI::App& app, const std::string& what) {
  std::fprintf(stderr, "%s: %s\nRun with --help for more information.\n", app.get_name().c_str(), what.c_str());
  return 2;
}

}  // namespace blockcsi::bench
