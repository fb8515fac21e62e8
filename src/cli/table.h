// Listings printed as an aligned table or as a JSON array of objects, from
// the same rows, so `-o json` never drifts from what the table shows.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "cli/verb.h"

namespace blockcsi::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> columns) : columns_(std::move(columns)) {}
  void AddRow(std::vector<std::string> cells);
  bool empty() const { return rows_.empty(); }
  // Table: upper-case headers, columns padded; JSON: keys are the column
  // names in lower case with spaces as underscores.
  void Print(std::ostream& out, OutputFormat format) const;

 private:
  std::vector<std::string> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// "512Mi", "1.5Gi": sizes for the table.
std::string HumanBytes(uint64_t bytes);

}  // namespace blockcsi::cli
