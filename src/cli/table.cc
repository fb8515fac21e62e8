#include "cli/table.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>

namespace blockcsi::cli {

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

void Table::Print(std::ostream& out, OutputFormat format) const {
  if (format == OutputFormat::kJson) {
    nlohmann::json array = nlohmann::json::array();
    for (const auto& row : rows_) {
      nlohmann::json object = nlohmann::json::object();
      for (size_t i = 0; i < columns_.size(); ++i) {
        std::string key = columns_[i];
        std::transform(key.begin(), key.end(), key.begin(), [](char c) { return c == ' ' ? '_' : std::tolower(c); });
        object[key] = row[i];
      }
      array.push_back(std::move(object));
    }
    out << array.dump(2) << "\n";
    return;
  }
  std::vector<size_t> widths(columns_.size());
  for (size_t i = 0; i < columns_.size(); ++i) {
    widths[i] = columns_[i].size();
    for (const auto& row : rows_) widths[i] = std::max(widths[i], row[i].size());
  }
  auto print_row = [&](const std::vector<std::string>& cells, bool upper) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      std::string cell = cells[i].empty() && !upper ? "-" : cells[i];
      if (upper) std::transform(cell.begin(), cell.end(), cell.begin(), ::toupper);
      line += cell;
      if (i + 1 < cells.size()) line += std::string(widths[i] - cell.size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  print_row(columns_, true);
  for (const auto& row : rows_) print_row(row, false);
}

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) value /= 1024, ++unit;
  char buf[32];
  if (unit == 0 || value >= 100 || value == static_cast<double>(static_cast<uint64_t>(value))) {
    std::snprintf(buf, sizeof buf, "%.0f%s", value, kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f%s", value, kUnits[unit]);
  }
  return buf;
}

}  // namespace blockcsi::cli
