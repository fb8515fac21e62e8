#!/usr/bin/env bash
# Runs the benchmarks of issue #7 and writes docs/performance.md (or --out).
# Every figure is a ratio to a baseline measured in the same run; nothing is
# asserted (CI does not run this). Needs root, tgt, FUSE and loop devices;
# fio is used when installed (hack/install-deps.sh installs it).
#
#   hack/bench.sh [--out FILE] [--build-dir DIR] [--no-build] [--quick]
#                 [--memory-compare LABEL=BLOCKCSI_BINARY]... [--only qd]
#
# --only qd runs one section alone: queue depth 1..32 and RBD sequential
# writes (issue #17, hack/bench-qd.sh); it rewrites only that section of
# --out (between its markers) and datapath-qd.svg beside it, leaving the rest.
#
# Each benchmark program starts its own tgtd on free private ports and stops
# it by pid. Everything they make lives under one private directory
# ($TMPDIR for them); on exit, also after Ctrl-C or a crash, this script
# kills the program it started and that program's children by pid, then
# removes whatever is left under that directory: mounts, loop devices,
# processes naming it, files.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
invocation="hack/bench.sh${*:+ $*}"

out="docs/performance.md"
build_dir="${BUILD_DIR:-build}"
do_build=1
quick=0
memory_compare=()
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --quick) quick=1; shift ;;
    --memory-compare) memory_compare+=(--binary "$2"); shift 2 ;;
    --only) only="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

case "$only" in
  ""|qd) ;;
  *) echo "bench.sh: unknown section for --only: $only (known: qd)" >&2; exit 2 ;;
esac

if [ "$(id -u)" -ne 0 ]; then
  echo "bench.sh: needs root (tgtd, FUSE, loop devices, mount)" >&2
  exit 2
fi
for tool in tgtd tgtadm losetup mkfs.ext4; do
  command -v "$tool" >/dev/null 2>&1 || { echo "bench.sh: $tool is missing (hack/install-deps.sh)" >&2; exit 2; }
done

# --quick is smaller, never different: every program still runs a warm-up
# round and at least two measured rounds (so each side goes first once).
if [ "$quick" -eq 1 ]; then
  lifecycle_args=(--runs 3 --storm 8 --storm-rounds 2 --size-mib 64 --spans 2)
  attach_args=(64 2)
  datapath_args=(--size-mib 64 --ops 300 --rounds 2 --fio-seconds 3)
  scale_args=(--volumes 100 --page 50 --samples 5)
  control_args=(--rounds 20 --warmup 2)
  memory_args=(--staged 8)
else
  lifecycle_args=(--runs 20 --storm "32,64" --storm-rounds 3 --size-mib 64 --spans 5)
  attach_args=(256 3)
  datapath_args=(--size-mib 256 --ops 2000 --rounds 5 --fio-seconds 5)
  scale_args=(--volumes 1000 --page 100 --samples 40)
  control_args=(--rounds 200 --warmup 10)
  memory_args=(--staged 64)
fi

if [ "$do_build" -eq 1 ]; then
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" >/dev/null
  fi
  # Only what the benchmarks run; the machine may be shared.
  if [ -z "$only" ]; then
    cmake --build "$build_dir" -j "${BENCH_JOBS:-2}" --target blockcsi attach_tool attach_bench lifecycle_bench \
      datapath_bench controller_scale_bench tgtd_control_bench memory_bench
  fi
  cmake --build "$build_dir" -j "${BENCH_JOBS:-2}" --target blockcsi-bridge iscsi_qd_bench datapath_qd_bench
  # Configured only where librbd/librados headers were found.
  cmake --build "$build_dir" -j "${BENCH_JOBS:-2}" --target rbd_seq_bench 2>/dev/null ||
    echo "bench.sh: rbd_seq_bench not built; its section will say so" >&2
fi

workdir=$(mktemp -d /tmp/blockcsi-bench-XXXXXX)
bench_pid=""
# Directories a section made outside $workdir (a tmpfs for LUN images),
# removed by cleanup after the processes using them are gone.
extra_dirs=()

cleanup() {
  local pid children p cmd m
  if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then
    children=$(pgrep -P "$bench_pid" || true)  # its tgtd and plugin, by parent pid
    kill -KILL "$bench_pid" 2>/dev/null || true
    for pid in $children; do kill -KILL "$pid" 2>/dev/null || true; done
  fi
  # Filesystems under the work dir, deepest first, then their loop devices.
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done < <(awk -v d="$workdir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  while read -r m; do
    losetup -d "$m" 2>/dev/null || true
  done < <(losetup -l -n -O NAME,BACK-FILE | awk -v d="$workdir/" 'index($2, d) == 1 { print $1 }')
  # Bridges or anything else started on a file under the work dir.
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = "$$" ] && continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline" || true)
    if [[ "$cmd" == *"$workdir/"* ]]; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done < <(awk -v d="$workdir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  rm -rf "$workdir"
  for m in "${extra_dirs[@]}"; do rm -rf "$m"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rows="$workdir/rows.tsv"
: >"$rows"
failed_steps=()

# run <item> <program> [args...]: runs one benchmark with its output shown
# and logged; its RESULT lines become rows of item <item>.
run() {
  local item="$1" status=0
  shift
  local log
  log="$workdir/$(basename "$1").log"
  : >"$log"  # before the program starts, so that tail below always finds it
  local shown="${*/#$repo\//}"
  echo "== $shown" >&2
  TMPDIR="$workdir" "$@" >"$log" 2>&1 &
  bench_pid=$!
  tail -n +1 --pid="$bench_pid" -f "$log" | grep -v '^RESULT' || true
  wait "$bench_pid" || status=$?
  bench_pid=""
  if [ "$status" -ne 0 ]; then
    failed_steps+=("$shown (exit $status)")
  fi
  grep '^RESULT' "$log" | while IFS=$'\t' read -r _ figure measured baseline ratio; do
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$item" "$figure" "$measured" "$baseline" "$ratio" "$shown"
  done >>"$rows" || true
}

bin="$repo/$build_dir"
# Everything but the queue-depth section (which --only qd runs alone).
if [ -z "$only" ]; then
  run 1-3 "$bin/bench/lifecycle_bench" "${lifecycle_args[@]}"

  # Sequential 1 MiB: attach_bench, the userspace connector's own measurement
  # (its bridge is attach_tool, which runs the same bridge code as blockcsi).
  attach_cmd=("$bin/tests/attach_bench" "${attach_args[@]}")
  run 4 "${attach_cmd[@]}"
  attach_log="$workdir/attach_bench.log"
  attach_shown="${attach_cmd[*]/#$repo\//}"
  awk -v cmd="$attach_shown" '
    /^raw libiscsi/ { rw = $(NF - 1); rr = $NF }
    /^loop device/ { lw = $(NF - 1); lr = $NF }
    /^spread / { k = $2; $1 = ""; $2 = ""; sp[k] = "min/median/max " substr($0, 3) " MiB/s" }
    /^attach latency ms/ { al = $5 " ms " $6 " " $7 }
    /^detach latency ms/ { dl = $5 " ms " $6 " " $7 }
    END {
      if (rw > 0 && rr > 0) {
        printf "4\t1 MiB sequential write, loop device (O_DIRECT)\t%s\t%s (raw libiscsi)\t%.2f\t%s\n", sp["loop-write"], sp["raw-write"], lw / rw, cmd
        printf "4\t1 MiB sequential read, loop device (O_DIRECT)\t%s\t%s (raw libiscsi)\t%.2f\t%s\n", sp["loop-read"], sp["raw-read"], lr / rr, cmd
        printf "4\tAttach (bridge + FUSE + loop), median\t%s\t-\t-\t%s\n", al, cmd
        printf "4\tDetach, median\t%s\t-\t-\t%s\n", dl, cmd
      }
    }' "$attach_log" >>"$rows"

  run 4 "$bin/bench/datapath_bench" "${datapath_args[@]}"
  run 5 "$bin/bench/controller_scale_bench" "${scale_args[@]}"
  # The same at tgt's own 16 I/O threads per LUN: what an operator's untuned
  # tgtd pays (the tgtd above runs as deploy/target-host ships it).
  run 5 "$bin/bench/controller_scale_bench" "${scale_args[@]}" --create-only --tgtd-io-threads 0
  run 5 "$bin/bench/tgtd_control_bench" "${control_args[@]}"

  # ---- issue #18: plugin memory against the CSI reference driver -------------
  # hostpathplugin (csi-driver-host-path, a peer program) is unpacked into the
  # build tree and run beside blockcsi in each --mode by memory_bench; a clone
  # without ../shared/peers skips this section with the reason.
  bench_memory() {
    local peers="$repo/../shared/peers/bin" hostpath="$bin/peers/hostpathplugin"
    if [ ! -x "$hostpath" ]; then
      if [ ! -f "$peers/hostpathplugin.xz" ]; then
        echo "bench.sh: memory section skipped: no $peers/hostpathplugin.xz" >&2
        return 0
      fi
      mkdir -p "$bin/peers"
      xz -dc "$peers/hostpathplugin.xz" >"$hostpath.tmp" && chmod +x "$hostpath.tmp" && mv "$hostpath.tmp" "$hostpath"
    fi
    run M "$bin/bench/memory_bench" --hostpath "$hostpath" --smaps-dir "$workdir/smaps" \
      "${memory_args[@]}" "${memory_compare[@]}"
  }
  bench_memory

  # ---- issue #17: each userspace bridge's memory with many volumes staged ----
  # bridge_memory_bench stages N volumes (ext4, mounted, 4 MiB written and
  # fsynced) through blockcsi-bridge and reads each bridge's smaps_rollup.
  bench_bridge_memory() {
    local volumes=64
    if [ "$quick" -eq 1 ]; then volumes=8; fi
    if [ "$do_build" -eq 1 ]; then
      cmake --build "$build_dir" -j "${BENCH_JOBS:-2}" --target bridge_memory_bench >/dev/null
    fi
    run B "$bin/bench/bridge_memory_bench" --volumes "$volumes"
  }
  bench_bridge_memory
fi

# ---- issue #17 item 5: queue depth 1..32 and RBD sequential writes --------
# shellcheck source=hack/bench-qd.sh
. "$repo/hack/bench-qd.sh"
bench_qd
draw_qd_chart

load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --only: that section alone, spliced into the existing report.
publish_qd_chart() {
  if [ -s "$workdir/$qd_chart_name" ]; then cp "$workdir/$qd_chart_name" "$(dirname "$out")/$qd_chart_name"; fi
}
if [ -n "$only" ]; then
  mkdir -p "$(dirname "$out")"
  publish_qd_chart
  splice_qd_section "$out"
  echo >&2
  column -t -s $'\t' "$rows" >&2 || cat "$rows" >&2
  echo "bench.sh: rewrote section $only of $out" >&2
  if [ "${#failed_steps[@]}" -gt 0 ]; then exit 1; fi
  exit 0
fi

# ---- issue #18: per-step breakdown from the plugin's debug spans ----------
# lifecycle_bench prints SPAN<TAB>step<TAB>span<TAB>ms<TAB>count lines (the
# mean per call of each kind of span inside each CSI step, and "other": the
# wall time no span covers). Written as a table and, where gnuplot is
# installed, a stacked bar chart beside $out.
spans="$workdir/spans.tsv"
grep '^SPAN' "$workdir/lifecycle_bench.log" 2>/dev/null | cut -f2- >"$spans" || true
spans_chart="$(dirname "$out")/lifecycle-spans.svg"
spans_tmp="$workdir/lifecycle-spans.svg"
spans_table() {
  [ -s "$spans" ] || return 0
  echo
  echo "### 1b. Where each step's time goes (plugin debug spans, mean per call)"
  echo
  echo "Each exec (by program), tgtd request, mount, fsync, mountinfo read, libblkid"
  echo "probe, bridge start, bridge control call, wait for a bridge's exit, /proc and"
  echo "loop-device scan and attach-record read, summed per CSI step; \"other\" is the"
  echo "step's wall time that no span covers (gRPC, locks, our own code). Measured on a"
  echo "plugin restarted with \`--log-level debug\` after the timed rounds above."
  if [ -s "$spans_tmp" ]; then
    echo
    echo "![per-step breakdown]($(basename "$spans_chart"))"
  fi
  echo
  echo "| Step | Span | ms per call | Count per call |"
  echo "|---|---|---|---|"
  awk -F'\t' '{ printf "| %s | %s | %.2f | %s |\n", $1, $2, $3, $4 }' "$spans"
}
draw_spans_chart() {
  [ -s "$spans" ] && command -v gnuplot >/dev/null 2>&1 || return 0
  local matrix="$workdir/spans-matrix.tsv"
  # Rows: steps in bench order; columns: span kinds; cells: ms per call.
  awk -F'\t' '
    !($1 in row) { row[$1] = ++rows; step[rows] = $1 }
    !($2 in col) { col[$2] = ++cols; kind[cols] = $2 }
    { ms[row[$1], col[$2]] = ($3 < 0 ? 0 : $3) }
    END {
      printf "step"; for (c = 1; c <= cols; ++c) printf "\t%s", kind[c]; printf "\n"
      for (r = 1; r <= rows; ++r) {
        printf "%s", step[r]
        for (c = 1; c <= cols; ++c) printf "\t%.3f", ((r, c) in ms) ? ms[r, c] : 0
        printf "\n"
      }
    }' "$spans" >"$matrix"
  local ncols
  ncols=$(head -1 "$matrix" | awk -F'\t' '{ print NF }')
  gnuplot <<GNUPLOT >/dev/null 2>&1 || rm -f "$spans_tmp"
set terminal svg size 960,520 dynamic font "sans,11" noenhanced
set output "$spans_tmp"
set datafile separator "\t"
set title "blockcsi lifecycle: where each CSI step's time goes (ms per call)"
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.7
set ylabel "ms per call (mean)"
set xtics rotate by -25 nomirror
set key outside right top
set grid ytics
plot for [i=2:$ncols] "$matrix" using i:xtic(1) title columnheader(i)
GNUPLOT
}
draw_spans_chart

# ---- the report ------------------------------------------------------------
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
cores=$(nproc)
ram=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
kernel=$(uname -sr)
when=$(date -u '+%Y-%m-%d %H:%M UTC')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit + uncommitted changes"
fi
fio_version=$(fio --version 2>/dev/null || echo "not installed")
tgt_version=$(dpkg-query -W -f='${Version}' tgt 2>/dev/null || echo unknown)

# ---- issue #17: where a bridge's memory goes (the table, then why) ---------
bridge_memory_doc() {
  table "7. Userspace bridge memory (issue #17)" "B"
  cat <<'BRIDGE_DOC'

Targets: private (Private_Clean + Private_Dirty) ≤ 2 MiB and PSS ≤ 3 MiB per
bridge with 64 volumes staged. Before issue #17 each bridge was the whole
plugin (`blockcsi bridge ...`): measured the same way with 16 staged
(`bridge_memory_bench --volumes 16 --bridge-dir DIR`, DIR holding a
`blockcsi-bridge` script that runs the previous plugin's `blockcsi bridge`)
RSS 36.1, PSS 11.0, private 9.5 MiB (medians). Where one bridge's private
memory goes now (`/proc/PID/smaps` by mapping, 2 staged):

| Where | Private KiB | How it is sized |
|---|---|---|
| FUSE receive buffer | 516 | 1 worker (one per iSCSI session: each runs one command at a time) × (max_write 1 MiB + 4 KiB), kept for the worker's life; resident is what the largest request touched (512 KiB through ext4 here, at most 1 MiB). Before: up to 10 workers × 1 MiB. 256 KiB requests with 2 workers (520 KiB) cut the 1 MiB sequential read ratio from 1.04 to 0.76 and bought nothing on writes |
| other anonymous (thread stacks, TLS, libiscsi context and PDUs) | 132 | FUSE worker stack 256 KiB (`FUSE_THREAD_STACK`), 12 KiB touched |
| heap | 64 | one malloc arena (`M_ARENA_MAX` 1); a fixed 64 KiB mmap threshold, so request-sized buffers are unmapped after use |
| shared libraries' relocated data | 268 | libstdc++, libc, libfuse3, libiscsi (with its libnl/librdmacm for iSER); no gRPC, protobuf, OpenSSL, spdlog or Ceph (before: 2 MiB here) |
| main thread's stack | 28 | |

RBD: the same program loads librbd/librados with dlopen when an RBD volume
opens (`common/ceph_lazy.h`, issue #18), so an iSCSI bridge maps no Ceph
library. A second program linked with them would map the same libraries in
an RBD bridge and none in an iSCSI one, so the same memory either way; one
program and one mechanism for Ceph decided it.
BRIDGE_DOC
}

# Section 6's per-mapping sums of blockcsi --mode all (KiB), idle and after
# one lifecycle, from the smaps files memory_bench kept in this run.
mapping_table() {
  local idle="$workdir/smaps/blockcsi-all-idle.smaps" used="$workdir/smaps/blockcsi-all-lifecycle.smaps"
  [ -s "$idle" ] && [ -s "$used" ] || return 0
  echo
  echo "Where \`blockcsi --mode all\` keeps its memory (KiB per mapping, idle / after one"
  echo "lifecycle; \`hack/smaps_by_mapping.py\` on the smaps of this run; mappings under 64 KiB RSS left out):"
  echo
  echo "| Mapping | RSS | PSS | Private |"
  echo "|---|---|---|---|"
  python3 "$repo/hack/smaps_by_mapping.py" "$idle" "$used" | awk '
    NR > 1 {
      n = split($0, halves, "|"); split(halves[1], a, " "); split(halves[2], b, " ")
      k = length(a); name = a[1]; for (i = 2; i <= k - 3; ++i) name = name " " a[i]
      if (a[k-2] + b[1] < 64 && name != "total (KiB)") next
      printf "| %s | %s / %s | %s / %s | %s / %s |\n", name, a[k-2], b[1], a[k-1], b[2], a[k], b[3]
    }'
}

table() {
  local title="$1" items="$2"
  echo
  echo "### $title"
  echo
  echo "| Figure | Measured | Baseline (same run) | Ratio | Command |"
  echo "|---|---|---|---|---|"
  awk -F'\t' -v items="$items" '
    BEGIN { n = split(items, want, ",") }
    { for (i = 1; i <= n; ++i) if ($1 == want[i]) printf "| %s | %s | %s | %s | `%s` |\n", $2, $3, $4, $5, $6 }' "$rows"
}

{
  cat <<'EOF'
# Performance

Figures from `hack/bench.sh` (issue #7). Each one is set against a baseline
measured **in the same run on the same machine**, so the ratio is the figure
to compare across machines; the absolute numbers depend on the host. CI does
not run this and nothing here is asserted. Re-run with `sudo hack/bench.sh`
(rewrites this file; `--out FILE` writes elsewhere, `--quick` is a smoke run).

What is measured (sources under `test/bench/` and `test/integration/attach/attach_bench_main.cc`):

1. **Lifecycle, per CSI step** — the real `blockcsi --mode all` (local backend,
   userspace connector) on a private tgtd, driven over its CSI socket, against
   the same work as bare commands on the same tgtd: `truncate` + `tgtadm`
   (create), `tgtadm bind` (publish), libiscsi login + `losetup` + `mkfs.ext4`
   + `mount` (stage), `mount --bind` (node publish), and their reverses. There
   is no kernel iSCSI initiator on this host, so the bare stage logs in with
   libiscsi but puts its loop device on the image file: the stage ratio
   includes everything the bridge (libiscsi session → FUSE file → loop
   device) adds. Both sides mount through libmount. A warm-up round is
   dropped, the side that goes first alternates per round, and each figure
   shows min / median / max of both sides. A bind mount takes less time than
   any gRPC call, so NodePublish/NodeUnpublish are also set against their
   mount call plus a no-op CSI call (`NodeGetCapabilities`) of the same round.
2. **Attach storm** — N volumes created and published first, then N
   `NodeStageVolume` calls at once (one thread each), wall time against N bare
   stages at once (concurrent against concurrent, issue #22) and against N
   bare stages one after the other, each on a fresh volume (issue #18: what
   concurrency should beat), in rounds like item 1, the three sides taking
   turns to go first. Failures are counted (expected 0).
3. **Plugin RSS** (`VmRSS` of the plugin process) idle after start-up, with
   the storm staged, and after everything was unstaged; the bridges (one
   process per staged volume) are reported apart.
4. **Data path** — through the loop device of a userspace-connector attach
   against raw libiscsi on the same LUN, one command in flight: 1 MiB
   sequential (`attach_bench`) and 4 KiB random (`datapath_bench`, same
   offsets both sides), each a warm-up round dropped, then rounds with the
   side that goes first alternating. Debian's fio has no libiscsi
   engine, so fio runs only on the loop device (psync, direct, QD1) as a
   cross-check of our own tool, set against our raw libiscsi figure for the
   same pattern measured just before and just after each fio job.
5. **Controller at 1,000 volumes** — in-process controller over gRPC on the
   real local backend: `CreateVolume` at 1,000 volumes against an empty
   pool; a `ListVolumes` page against one `tgtadm --op show` at that size
   (the floor for a page that checks each export), with the `tgtadm` runs
   counted. A page's health checks are made once per page
   (`VolumeBackend::CheckVolumes`, one tgtd read for the page); the
   pre-batching path, one `CheckVolume` and one `tgtadm --op show` per
   volume, is measured on the same ids for comparison. The baselines (an
   empty pool, then a pool of one page) come from a second pool with a
   tgtd of its own, run beside the large one: each figure and its baseline
   are sampled in turn, the side that goes first alternating, and a page
   of each pool follows each `tgtadm show` equally often (timed one size
   after the other, the disk's drifting flush latency set the CreateVolume
   ratio, and a page right after the exec of tgtadm, which only the large
   pool's pages followed, took 0.3 ms longer). `ControllerPublishVolume`
   and `ControllerUnpublishVolume` of one volume at 1,000 volumes against
   the same on the empty pool are a finding, not a target of issue #18:
   each ACL change is decided on a fresh read of tgtd and read back
   (`tgt_exporter.h`), tgtd has no read of one target's ACL, and its
   listing of all targets grows faster than the count (tgt 1.0.85 looks
   each target up again by id in a list scan while printing it). The
   grants and revokes that come while one is at tgtd are applied together
   (`TgtExporter::Apply`: one fresh read and one read-back per batch); the
   rows "x32 concurrent" publish, then unpublish, 32 volumes at once, as the
   external-attacher's workers do when a node's pods move, against the same
   on the empty pool and against the 32 calls one after the other. tgtd runs with the
   I/O threads per LUN that `deploy/target-host/target.env` ships
   (`TGT_IO_THREADS`, 4; `tgtd -t`): tgtd starts that many threads for
   every LUN, each a task of the host (at tgt's own default of 16, 16,000
   threads at 1,000 volumes). The rows "tgt's default I/O threads" are the
   same CreateVolume figure on tgtds left at 16 (`--tgtd-io-threads 0`),
   and the CreateVolume calls such a tgtd refused on the way (a finding,
   not an error of the benchmark: every thread takes a pid, and under the
   kernel's default pid_max of 32,768 a tgtd at 16 stops adding LUNs near
   2,020 volumes with "tgtadm: out of memory"; `controller_scale_bench
   --volumes 2100 --create-only --tgtd-io-threads 0`). Then one tgtd
   management call over its control socket against an exec of `tgtadm`
   (`tgtd_control_bench`).
6. **Plugin memory** (issue #18) — `blockcsi` in `--mode all`, `controller`
   and `node` beside the CSI reference driver (hostpathplugin v1.15.0, a Go
   program) doing the same CSI calls: idle, after one volume's lifecycle and
   with 64 volumes staged (controller: published). VmRSS, and PSS and private
   pages from `/proc/PID/smaps_rollup`, of the plugin process alone (the
   bridges are separate processes). RSS counts every shared-library page the
   process touched; hostpath is one static binary, so its RSS is all its
   own. PSS splits shared pages between the processes mapping them (the
   bridges map the same binary), so it falls as more volumes are staged.
   `--memory-compare LABEL=BINARY` adds another blockcsi build to the table.
   Where it goes: the table after section 6 sums `/proc/PID/smaps` per
   mapping for `--mode all` idle and after one lifecycle (`memory_bench
   --smaps-dir DIR` keeps one file per row and state,
   `hack/smaps_by_mapping.py FILE [FILE2]` sums it). librbd, librados and
   libceph-common are loaded with dlopen only by an RBD backend or bridge
   (`src/common/ceph_lazy.h`); gRPC, protobuf, abseil, OpenSSL, libstdc++,
   libgcc, yaml-cpp and inih are linked statically
   (`src/cmd/lean_link.cmake`), and gRPC registers only the components
   the plugin uses (`src/cmd/grpc_core_configuration.cc`: no xDS, RLS,
   grpclb, ring-hash, priority or outlier-detection policies, fault
   injection or RBAC; 1.6 MiB less text, ~1.4 MiB less RSS measured with
   `memory_bench --binary` side by side); the code a volume's lifecycle
   executes is gathered at the start of the text (the functions listed in
   `hack/profiles/hot_text.symbols`, written by `hack/profile-text-layout.sh`
   from a callgrind run of the demo; the build turns the list into a linker
   script and fails when it matches under 90% of the code; 2 MiB of
   executed functions had been spread over 130 of the kernel's 64 KiB
   fault-around windows, 8 MiB of text resident after one lifecycle;
   gathered, the 3.4 MiB of input sections that hold them, our
   code compiled with a section per function; 3.0-3.5 MiB less RSS in
   every mode, `memory_bench --binary` side by side); /metrics is served by a small plain-HTTP/1.1
   server of our own (`src/common/plain_http_server.h`: one thread, poll),
   so `--metrics-address` loads neither cpp-httplib nor OpenSSL (cpp-httplib
   is loaded only for the Kubernetes API, over TLS). Two tries measured
   no gain and were taken out: linking with lld in a profiled function
   order (lld 14 packs no relative relocations, and the larger relocation
   table cost more RSS than the denser code saved, `memory_bench
   --binary` side by side), and one malloc arena or a `malloc_trim` when
   the last call ends. What remains is the code the calls run, the RELRO pages of a
   position-independent program (`-no-pie` measured 0–0.3 MiB less, not
   worth giving up ASLR for) and libc. Start-up's code pages are not dropped from the page
   tables after start (an `MADV_DONTNEED` on them lowered RSS and PSS, but
   the pages stay in the page cache charged to the container's cgroup:
   the figure would fall, the memory would not).

7. **Userspace bridge memory** (issue #17) — see its section.
8. **Queue depth** (issue #17) — the userspace data path at 1 to 32 commands
   in flight against raw libiscsi at the same depth, and RBD sequential
   writes through the bridge against `rbd bench`; see its section.

On a shared or small machine the absolute figures move with the load from
other work (the load average is in the machine table); ratios of figures
taken close together in time move much less, which is why each baseline is
measured next to what it is compared with.
EOF
  echo
  echo "## Machine"
  echo
  echo "| | |"
  echo "|---|---|"
  echo "| Produced by | \`$invocation\` (each row names the program it came from) |"
  echo "| CPU | $cpu |"
  echo "| Cores | $cores |"
  echo "| RAM | $ram |"
  echo "| Kernel | $kernel |"
  echo "| Date | $when |"
  echo "| Commit | $commit |"
  echo "| tgt / fio | $tgt_version / $fio_version |"
  echo "| Load average (1/5/15 min) | before: $load_before; after: $load_after |"
  echo
  echo "## Results"
  table "1. Lifecycle latency per step" "1-3" | awk -F'|' 'NR <= 5 || $2 !~ /Storm|RSS/'
  spans_table
  table "2-3. Attach storm and plugin RSS" "1-3" | awk -F'|' 'NR <= 5 || $2 ~ /Storm|RSS/'
  table "4. Userspace data path" "4"
  table "5. Controller at scale" "5"
  table "6. Plugin memory against hostpathplugin (issue #18)" "M"
  mapping_table
  bridge_memory_doc
  echo
  qd_section
  if [ "${#failed_steps[@]}" -gt 0 ]; then
    echo
    echo "**Benchmarks that reported errors in this run:**"
    for s in "${failed_steps[@]}"; do echo "- \`$s\`"; done
  fi
} >"$workdir/performance.md"

mkdir -p "$(dirname "$out")"
cp "$workdir/performance.md" "$out"
if [ -s "$spans_tmp" ]; then mv "$spans_tmp" "$spans_chart"; fi
publish_qd_chart
echo >&2
column -t -s $'\t' "$rows" >&2 || cat "$rows" >&2
echo "bench.sh: wrote $out" >&2
if [ "${#failed_steps[@]}" -gt 0 ]; then
  exit 1
fi
