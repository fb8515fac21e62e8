// The process's Prometheus metrics: counters, gauges and histograms with
// fixed buckets, each a family of series keyed by a bounded set of label
// values, rendered in the Prometheus text exposition format (0.0.4).
// Thread-safe: every family guards its series with its own mutex, so an
// update on the hot path is one short lock and a map lookup. Families are
// created once (at first use, by name) and live as long as the process.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace blockcsi {

using LabelValues = std::vector<std::string>;

enum class MetricType { kCounter, kGauge, kHistogram };

// One metric name with its HELP, TYPE and label names. A family takes at
// most kMaxSeries label combinations: past that, updates of new ones are
// dropped (and counted in blockcsi_metrics_series_dropped_total) rather than
// letting a runaway label grow the process without bound.
class MetricFamily {
 public:
  static constexpr size_t kMaxSeries = 2000;

  MetricFamily(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
               std::vector<double> buckets);
  MetricFamily(const MetricFamily&) = delete;
  MetricFamily& operator=(const MetricFamily&) = delete;

  // Counter: adds `v` (must be >= 0). Gauge: adds `v` (may be negative).
  void Add(const LabelValues& labels, double v = 1);
  // Gauge: sets the value. Counter: sets the total read from a source that
  // counts itself (a collector; the source must only ever go up).
  void Set(const LabelValues& labels, double v);
  // Histogram: sets a whole series read from a source that keeps its own
  // buckets (per bucket, not cumulative, same bounds as this family's).
  void SetHistogram(const LabelValues& labels, const std::vector<uint64_t>& bucket_counts, double sum, uint64_t count);
  // Forgets every series (a collector rebuilding its figures, so that a
  // volume no longer there leaves no stale series).
  void Clear();
  // Forgets the series whose first label is `value` (one pool's series, when
  // several pools in one process share the family).
  void ClearWhereFirstLabelIs(const std::string& value);
  // Histogram only: records one observation.
  void Observe(const LabelValues& labels, double v);

  const std::string& name() const { return name_; }
  void Render(std::string& out) const;

 private:
  struct Series {
    double value = 0;               // counter / gauge
    std::vector<uint64_t> buckets;  // histogram: per-bucket (non-cumulative) counts
    double sum = 0;
    uint64_t count = 0;
  };
  Series* Find(const LabelValues& labels) REQUIRES(mu_);  // null when full or labels mismatch

  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
  const std::vector<double> buckets_;
  mutable Mutex mu_;
  std::map<LabelValues, Series> series_ GUARDED_BY(mu_);
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Get-or-create by name; the first call's help, labels and buckets win.
  MetricFamily& Counter(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  MetricFamily& Gauge(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  MetricFamily& Histogram(const std::string& name, const std::string& help, std::vector<std::string> labels,
                          std::vector<double> buckets);

  // Runs at every Render() before the families are written: for figures
  // that are read from their source (pool capacity, staged volumes, the
  // bridges' I/O) rather than counted as they happen. The collector lives as
  // long as `owner` (the object whose figures it reads) and is dropped, with
  // what it holds, at the next AddCollector or Render after the owner is
  // gone: a process that opens and closes backends keeps no dead collectors.
  void AddCollector(std::weak_ptr<const void> owner, std::function<void(MetricsRegistry&)> collector);

  // The text exposition of every family, sorted by name.
  std::string Render();

 private:
  MetricFamily& GetOrCreate(const std::string& name, const std::string& help, MetricType type,
                            std::vector<std::string> labels, std::vector<double> buckets);
  // One scrape at a time runs the collectors; taken before mu_, which the
  // collectors take again to reach their families.
  Mutex render_mu_ ACQUIRED_BEFORE(mu_);
  Mutex mu_;
  std::map<std::string, std::unique_ptr<MetricFamily>> families_ GUARDED_BY(mu_);
  struct Collector {
    std::weak_ptr<const void> owner;
    std::function<void(MetricsRegistry&)> collect;
  };
  void DropCollectorsOfGoneOwners() REQUIRES(mu_);
  std::vector<Collector> collectors_ GUARDED_BY(mu_);
};

// The process-wide registry the driver's code records into.
MetricsRegistry& Metrics();

// Buckets for durations of calls that range from a millisecond (a cached
// answer) to minutes (mkfs of a large volume, a slow attach).
const std::vector<double>& CallDurationBuckets();
// Buckets for single I/Os: 100 µs to 10 s.
const std::vector<double>& IoDurationBuckets();

// Records the outcome of one node step (attach, detach, format, fsck, mount,
// bind_mount, unmount) as blockcsi_node_operations_total{operation,result},
// where result is the status code's name ("OK", "NOT_FOUND", ...: a
// bounded set, never the message, which may name anything).
void RecordOperation(std::string_view operation, const Status& status);

// The same for the storage side: export, grant, revoke (agent or local
// backend), blocklist and unblocklist (RBD fencing) as
// blockcsi_target_operations_total{operation,result}.
void RecordTargetOperation(std::string_view operation, const Status& status);

// Escapes a label value for the text format (\\, \", \n).
std::string EscapeLabelValue(std::string_view value);

}  // namespace blockcsi
