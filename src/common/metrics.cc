#include "common/metrics.h"

#include <cmath>
#include <cstdio>

namespace blockcsi {
namespace {

// Prometheus floats: integers print without a fraction, +Inf as "+Inf".
std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  return buf;
}

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// `{a="x",b="y"` without the closing brace, so a histogram can append `le`.
std::string LabelText(const std::vector<std::string>& names, const LabelValues& values) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += i == 0 ? "{" : ",";
    out += names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  return out;
}

MetricFamily& DroppedSeries() {
  static MetricFamily& family = Metrics().Counter(
      "blockcsi_metrics_series_dropped_total",
      "Updates dropped because their metric already had the most label combinations it may hold", {"metric"});
  return family;
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

MetricFamily::MetricFamily(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
                           std::vector<double> buckets)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      buckets_(std::move(buckets)) {}

MetricFamily::Series* MetricFamily::Find(const LabelValues& labels) {
  if (labels.size() != label_names_.size()) return nullptr;  // a caller's bug: never a malformed line
  auto it = series_.find(labels);
  if (it != series_.end()) return &it->second;
  if (series_.size() >= kMaxSeries) return nullptr;
  Series& s = series_[labels];
  if (type_ == MetricType::kHistogram) s.buckets.assign(buckets_.size(), 0);
  return &s;
}

void MetricFamily::Add(const LabelValues& labels, double v) {
  if (type_ == MetricType::kHistogram || (type_ == MetricType::kCounter && v < 0)) return;
  Series* s = nullptr;
  {
    MutexLock lock(mu_);
    s = Find(labels);
    if (s != nullptr) s->value += v;
  }
  if (s == nullptr && this != &DroppedSeries()) DroppedSeries().Add({name_});
}

void MetricFamily::Set(const LabelValues& labels, double v) {
  if (type_ == MetricType::kHistogram) return;
  Series* s = nullptr;
  {
    MutexLock lock(mu_);
    s = Find(labels);
    if (s != nullptr) s->value = v;
  }
  if (s == nullptr) DroppedSeries().Add({name_});
}

void MetricFamily::SetHistogram(const LabelValues& labels, const std::vector<uint64_t>& bucket_counts, double sum,
                                uint64_t count) {
  if (type_ != MetricType::kHistogram || bucket_counts.size() != buckets_.size()) return;
  Series* s = nullptr;
  {
    MutexLock lock(mu_);
    s = Find(labels);
    if (s != nullptr) {
      s->buckets = bucket_counts;
      s->sum = sum;
      s->count = count;
    }
  }
  if (s == nullptr) DroppedSeries().Add({name_});
}

void MetricFamily::Clear() {
  MutexLock lock(mu_);
  series_.clear();
}

void MetricFamily::ClearWhereFirstLabelIs(const std::string& value) {
  MutexLock lock(mu_);
  std::erase_if(series_, [&](const auto& entry) { return !entry.first.empty() && entry.first.front() == value; });
}

void MetricFamily::Observe(const LabelValues& labels, double v) {
  if (type_ != MetricType::kHistogram) return;
  Series* s = nullptr;
  {
    MutexLock lock(mu_);
    s = Find(labels);
    if (s != nullptr) {
      for (size_t i = 0; i < buckets_.size(); ++i) {
        if (v <= buckets_[i]) {
          ++s->buckets[i];
          break;
        }
      }
      s->sum += v;
      ++s->count;
    }
  }
  if (s == nullptr) DroppedSeries().Add({name_});
}

void MetricFamily::Render(std::string& out) const {
  MutexLock lock(mu_);
  out += "# HELP " + name_ + " " + help_ + "\n";
  out += "# TYPE " + name_ + " " + TypeName(type_) + "\n";
  for (const auto& [labels, s] : series_) {
    std::string text = LabelText(label_names_, labels);
    if (type_ != MetricType::kHistogram) {
      out += name_ + text + (text.empty() ? "" : "}") + " " + FormatValue(s.value) + "\n";
      continue;
    }
    std::string prefix = text.empty() ? "{" : text + ",";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      cumulative += s.buckets[i];
      out +=
          name_ + "_bucket" + prefix + "le=\"" + FormatValue(buckets_[i]) + "\"} " + std::to_string(cumulative) + "\n";
    }
    out += name_ + "_bucket" + prefix + "le=\"+Inf\"} " + std::to_string(s.count) + "\n";
    std::string closed = text.empty() ? "" : text + "}";
    out += name_ + "_sum" + closed + " " + FormatValue(s.sum) + "\n";
    out += name_ + "_count" + closed + " " + std::to_string(s.count) + "\n";
  }
}

MetricFamily& MetricsRegistry::GetOrCreate(const std::string& name, const std::string& help, MetricType type,
                                           std::vector<std::string> labels, std::vector<double> buckets) {
  MutexLock lock(mu_);
  auto& slot = families_[name];
  if (slot == nullptr) {
    slot = std::make_unique<MetricFamily>(name, help, type, std::move(labels), std::move(buckets));
  }
  return *slot;
}

MetricFamily& MetricsRegistry::Counter(const std::string& name, const std::string& help,
                                       std::vector<std::string> labels) {
  return GetOrCreate(name, help, MetricType::kCounter, std::move(labels), {});
}

MetricFamily& MetricsRegistry::Gauge(const std::string& name, const std::string& help,
                                     std::vector<std::string> labels) {
  return GetOrCreate(name, help, MetricType::kGauge, std::move(labels), {});
}

MetricFamily& MetricsRegistry::Histogram(const std::string& name, const std::string& help,
                                         std::vector<std::string> labels, std::vector<double> buckets) {
  return GetOrCreate(name, help, MetricType::kHistogram, std::move(labels), std::move(buckets));
}

void MetricsRegistry::AddCollector(std::weak_ptr<const void> owner, std::function<void(MetricsRegistry&)> collector) {
  MutexLock lock(mu_);
  DropCollectorsOfGoneOwners();
  collectors_.push_back({std::move(owner), std::move(collector)});
}

void MetricsRegistry::DropCollectorsOfGoneOwners() {
  std::erase_if(collectors_, [](const Collector& c) { return c.owner.expired(); });
}

std::string MetricsRegistry::Render() {
  MutexLock render_lock(render_mu_);
  std::vector<std::function<void(MetricsRegistry&)>> collectors;
  {
    MutexLock lock(mu_);
    DropCollectorsOfGoneOwners();
    for (const auto& c : collectors_) collectors.push_back(c.collect);
  }
  for (auto& collect : collectors) collect(*this);
  std::vector<const MetricFamily*> families;
  {
    MutexLock lock(mu_);
    for (const auto& [name, family] : families_) families.push_back(family.get());
  }
  std::string out;
  for (const auto* family : families) family->Render(out);
  return out;
}

MetricsRegistry& Metrics() {
  static MetricsRegistry* registry = new MetricsRegistry();  // never destroyed: threads may record at exit
  return *registry;
}

const std::vector<double>& CallDurationBuckets() {
  static const std::vector<double> buckets{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                           1,     2.5,   5,    10,    30,   60,  120,  300};
  return buckets;
}

const std::vector<double>& IoDurationBuckets() {
  static const std::vector<double> buckets{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                           0.05,   0.1,     0.25,   0.5,   1,      2.5,   10};
  return buckets;
}

void RecordOperation(std::string_view operation, const Status& status) {
  static MetricFamily& family = Metrics().Counter(
      "blockcsi_node_operations_total",
      "Node steps (attach, detach, format, fsck, mount, bind_mount, unmount) by outcome: OK or the status code",
      {"operation", "result"});
  family.Add({std::string(operation), std::string(StatusCodeName(status.code()))});
}

void RecordTargetOperation(std::string_view operation, const Status& status) {
  static MetricFamily& family = Metrics().Counter(
      "blockcsi_target_operations_total",
      "Storage-side steps (export, grant, revoke; RBD: blocklist, unblocklist) by outcome: OK or the status code",
      {"operation", "result"});
  family.Add({std::string(operation), std::string(StatusCodeName(status.code()))});
}

}  // namespace blockcsi
