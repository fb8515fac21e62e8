// One fio job on a block device and the figures the benchmarks read from
// its JSON report: the one way test/bench runs fio (Debian's fio: no
// libiscsi or librbd engine, so fio only ever runs on the loop device).
// Offsets are reproducible (`randrepeat`, a fixed seed) and drawn with
// replacement (`norandommap`), as the raw libiscsi tool draws them.
// Not thread-safe (it prints); each call runs one fio process.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "common/executor.h"

namespace blockcsi::bench {

struct FioJob {
  std::string device;
  std::string rw;        // randread, randwrite, read, write
  std::string bs;        // "4k", "1m", "4m"
  std::string ioengine;  // "libaio" (queue depth > 1 possible) or "psync"
  int iodepth = 1;
  int seconds = 0;  // > 0: time based; otherwise `size` once
  std::string size;
  unsigned seed = 7;
  // Write jobs end with an fsync of the device, timed (fio's end_fsync):
  // the loop device must not get credit for writes still in a page cache.
};

struct FioFigures {
  double iops = 0;
  double mibps = 0;
  double median_lat_us = 0;  // submission to completion (fio's lat, 50th percentile)
};

// False (with the reason printed) when fio failed or its report was unreadable.
inline bool RunFio(const FioJob& job, FioFigures* out) {
  auto exec = MakeProcessExecutor();
  Command c("fio");
  c.Args({"--name=bench", "--filename=" + job.device, "--direct=1", "--ioengine=" + job.ioengine,
          "--iodepth=" + std::to_string(job.iodepth), "--rw=" + job.rw, "--bs=" + job.bs, "--randrepeat=1",
          "--randseed=" + std::to_string(job.seed), "--norandommap", "--lat_percentiles=1", "--output-format=json"});
  if (job.rw.find("write") != std::string::npos) c.Arg("--end_fsync=1");
  if (job.seconds > 0) {
    c.Args({"--runtime=" + std::to_string(job.seconds), "--time_based"});
  } else {
    c.Arg("--size=" + job.size);
  }
  c.Timeout(std::chrono::seconds(job.seconds + 300));
  auto r = RunChecked(*exec, c);
  if (!r.ok()) {
    std::fprintf(stderr, "fio: %s\n", r.status().ToString().c_str());
    return false;
  }
  auto doc = nlohmann::json::parse(r->stdout_text, nullptr, false);
  if (doc.is_discarded() || !doc.contains("jobs") || doc["jobs"].empty()) {
    std::fprintf(stderr, "fio: unreadable JSON report\n");
    return false;
  }
  const auto& side = doc["jobs"][0][job.rw.find("write") != std::string::npos ? "write" : "read"];
  out->iops = side.value("iops", 0.0);
  out->mibps = side.value("bw_bytes", 0.0) / (1024.0 * 1024.0);
  out->median_lat_us = 0;
  if (side.contains("lat_ns") && side["lat_ns"].contains("percentile")) {
    out->median_lat_us = side["lat_ns"]["percentile"].value("50.000000", 0.0) / 1000.0;
  }
  return out->iops > 0;
}

}  // namespace blockcsi::bench
