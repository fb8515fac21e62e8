#!/usr/bin/env bash
# Runs the benchmarks and writes docs/performance.md (or --out) with the
# run's record beside it (docs/performance.tsv: every figure the report
# shows, as the programs printed it). Every figure is a ratio to a baseline
# measured in the same run; nothing is asserted (CI does not run this).
# Needs root, tgt, FUSE and loop devices; fio is used when installed
# (hack/install-deps.sh installs it).
#
#   hack/bench.sh [--out FILE] [--build-dir DIR] [--no-build] [--quick]
#                 [--memory-compare LABEL=BLOCKCSI_BINARY]... [--only qd|memory]
#
# --only runs one section alone: qd, queue depth 1..32 and RBD sequential
# writes (hack/bench-qd.sh), or memory, the plugin against hostpathplugin.
# Its lines replace that section's in the record of a previous whole run,
# and the report (and datapath-qd.svg) is made again; the section says when
# and how it ran. hostpathplugin comes from $BLOCKCSI_PEERS_DIR/bin
# (default ../shared/peers, beside the clone).
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
  ""|qd|memory) ;;
  *) echo "bench.sh: unknown section for --only: $only (known: qd, memory)" >&2; exit 2 ;;
esac
# want <section>: whether this run measures it.
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }

if [ "$(id -u)" -ne 0 ]; then
  echo "bench.sh: needs root (tgtd, FUSE, loop devices, mount)" >&2
  exit 2
fi
for tool in tgtd tgtadm losetup mkfs.ext4; do
  command -v "$tool" >/dev/null 2>&1 || { echo "bench.sh: $tool is missing (hack/install-deps.sh)" >&2; exit 2; }
done

# --quick is smaller, never different: every program still runs a warm-up
# round and whole turns of measured rounds (each side goes first equally
# often: a multiple of two for two sides, of three for the storm's three;
# the programs refuse other counts).
if [ "$quick" -eq 1 ]; then
  lifecycle_args=(--runs 4 --storm 8 --storm-rounds 3 --size-mib 64 --spans 2)
  attach_args=(64 2)
  datapath_args=(--size-mib 64 --ops 300 --rounds 2 --fio-seconds 3)
  scale_args=(--volumes 100 --page 50 --samples 4)
  control_args=(--rounds 20 --warmup 2)
  memory_args=(--staged 8)
  bridge_volumes=8
else
  lifecycle_args=(--runs 20 --storm "32,64" --storm-rounds 3 --size-mib 64 --spans 5)
  attach_args=(256 4)
  datapath_args=(--size-mib 256 --ops 2000 --rounds 4 --fio-seconds 5)
  scale_args=(--volumes 1000 --page 100 --samples 40)
  control_args=(--rounds 200 --warmup 10)
  memory_args=(--staged 64)
  bridge_volumes=64
fi

if [ "$do_build" -eq 1 ]; then
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" >/dev/null
  fi
  # Only what the benchmarks run; the machine may be shared.
  if [ -z "$only" ]; then
    cmake --build "$build_dir" -j "${BENCH_JOBS:-2}" --target blockcsi attach_tool attach_bench lifecycle_bench \
      datapath_bench controller_scale_bench tgtd_control_bench
  fi
  if want memory; then cmake --build "$build_dir" -j "${BENCH_JOBS:-2}" --target blockcsi memory_bench; fi
  if want qd; then
    cmake --build "$build_dir" -j "${BENCH_JOBS:-2}" --target blockcsi-bridge iscsi_qd_bench datapath_qd_bench
    # Configured only where librbd/librados headers were found.
    cmake --build "$build_dir" -j "${BENCH_JOBS:-2}" --target rbd_seq_bench 2>/dev/null ||
      echo "bench.sh: rbd_seq_bench not built; its section will say so" >&2
  fi
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

  # ---- issue #17: each userspace bridge's memory with many volumes staged ----
  # bridge_memory_bench stages N volumes (ext4, mounted, 4 MiB written and
  # fsynced) through blockcsi-bridge and reads each bridge's smaps_rollup.
  bench_bridge_memory() {
    if [ "$do_build" -eq 1 ]; then
      cmake --build "$build_dir" -j "${BENCH_JOBS:-2}" --target bridge_memory_bench >/dev/null
    fi
    run B "$bin/bench/bridge_memory_bench" --volumes "$bridge_volumes" --smaps-dir "$workdir/smaps"
  }
  bench_bridge_memory
fi

# ---- the plugin's memory against the CSI reference driver -----------------
# hostpathplugin (csi-driver-host-path, a peer program) is unpacked into the
# build tree and run beside blockcsi in each --mode by memory_bench; where
# it is absent the section is skipped, and the report says why.
memory_skip=""
bench_memory() {
  local peers="${BLOCKCSI_PEERS_DIR:-$repo/../shared/peers}/bin" hostpath="$bin/peers/hostpathplugin"
  if [ ! -x "$hostpath" ]; then
    if [ ! -f "$peers/hostpathplugin.xz" ]; then
      memory_skip="no $peers/hostpathplugin.xz (set BLOCKCSI_PEERS_DIR)"
      echo "bench.sh: memory section skipped: $memory_skip" >&2
      return 0
    fi
    mkdir -p "$bin/peers"
    xz -dc "$peers/hostpathplugin.xz" >"$hostpath.tmp" && chmod +x "$hostpath.tmp" && mv "$hostpath.tmp" "$hostpath"
  fi
  run M "$bin/bench/memory_bench" --hostpath "$hostpath" --smaps-dir "$workdir/smaps" \
    "${memory_args[@]}" "${memory_compare[@]}"
}
if want memory; then bench_memory; fi

# ---- issue #17 item 5: queue depth 1..32 and RBD sequential writes --------
# shellcheck source=hack/bench-qd.sh
. "$repo/hack/bench-qd.sh"
if want qd; then
  bench_qd
  draw_qd_chart
fi

load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- per-step breakdown from the plugin's debug spans ----------------------
# lifecycle_bench prints SPAN<TAB>step<TAB>span<TAB>ms<TAB>count lines (the
# mean per call of each kind of span inside each CSI step, and "other": the
# wall time no span covers): a table in the report and, where gnuplot is
# installed, a stacked bar chart beside $out.
spans="$workdir/spans.tsv"
grep '^SPAN' "$workdir/lifecycle_bench.log" 2>/dev/null | cut -f2- >"$spans" || true
spans_chart="$(dirname "$out")/lifecycle-spans.svg"
spans_tmp="$workdir/lifecycle-spans.svg"
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

# ---- the run's record, and the report made from it -------------------------
# Every figure of the report is a line of the record (docs/performance.tsv
# beside docs/performance.md): what the programs printed, the smaps sums of
# hack/smaps_by_mapping.py and what this script read from the machine.
# hack/performance_doc.py fills hack/performance.md.in from it; the template
# holds words only, and ctest performance_doc_figures re-renders the report
# from the record and the template and fails when they differ.
record="$workdir/record.tsv"
record_out="${out%.md}.tsv"
commit_now() {
  local commit
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit + uncommitted changes"; fi
  echo "$commit"
}
# kv <kind> <key> <value>: one line of the record (tabs and newlines in the value become spaces).
kv() { printf '%s\t%s\t%s\n' "$1" "$2" "$(printf '%s' "$3" | tr '\t\n' '  ')"; }
# section_of <step>: the --only section a failed step belongs to.
section_of() {
  case "$1" in
    *datapath_qd_bench* | *rbd_seq_bench*) echo qd ;;
    *memory_bench* | *hostpathplugin*) echo memory ;;
    *) echo main ;;
  esac
}
# The lines of section $1 in a record (read on stdin) are left out.
without_section() {
  case "$1" in
    qd) awk -F'\t' '!($1 == "qd" || $1 == "qd_meta" || ($1 == "row" && $2 ~ /^[QR]$/) || ($1 == "failed" && $2 == "qd"))' ;;
    memory) awk -F'\t' '!($1 == "memory_meta" || ($1 == "row" && $2 == "M") || ($1 == "mapping" && $2 ~ /^plugin-/) ||
      ($1 == "value" && $2 == "hostpath_version") || ($1 == "failed" && $2 == "memory"))' ;;
  esac
}
# The memory section's lines: when and how it ran, its rows, and the
# per-mapping sums of `--mode all` idle and after one lifecycle.
memory_record() {
  kv memory_meta produced_by "$invocation"
  kv memory_meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
  kv memory_meta commit "$(commit_now)"
  kv memory_meta load "$(cut -d' ' -f1-3 /proc/loadavg)"
  if [ -n "$memory_skip" ]; then kv memory_meta skip "$memory_skip"; fi
  if [ -x "$bin/peers/hostpathplugin" ]; then
    kv value hostpath_version "$("$bin/peers/hostpathplugin" --version 2>/dev/null | awk '{ print $NF; exit }')"
  fi
  awk -F'\t' '$1 == "M" { print "row\t" $0 }' "$rows"
  local set file
  for set in plugin-idle:blockcsi-all-idle plugin-lifecycle:blockcsi-all-lifecycle; do
    file="$workdir/smaps/${set#*:}.smaps"
    if [ -s "$file" ]; then python3 "$repo/hack/smaps_by_mapping.py" --tsv "$file" | sed "s/^/mapping\t${set%%:*}\t/"; fi
  done
}
# The figures of every other section (machine, lifecycle, data path,
# controller, bridges).
record_main() {
  kv machine produced_by "$invocation"
  kv machine cpu "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  kv machine cores "$(nproc)"
  kv machine ram "$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
  kv machine kernel "$(uname -sr)"
  kv machine date "$(date -u '+%Y-%m-%d %H:%M UTC')"
  kv machine commit "$(commit_now)"
  kv machine tgt "$(dpkg-query -W -f='${Version}' tgt 2>/dev/null || echo unknown)"
  kv machine fio "$(fio --version 2>/dev/null || echo "not installed")"
  kv machine load_before "$load_before"
  kv machine load_after "$load_after"
  kv value pid_max "$(cat /proc/sys/kernel/pid_max)"
  kv value tgt_io_threads "$(sed -n 's/^TGT_IO_THREADS=//p' deploy/target-host/target.env)"
  if [ -s "$spans_tmp" ]; then kv value spans_chart "$(basename "$spans_chart")"; fi
  awk -F'\t' '$1 !~ /^[QRM]$/ { print "row\t" $0 }' "$rows"
  sed 's/^/span\t/' "$spans"
  local set file
  if [ -s "$workdir/smaps/bridge.smaps" ]; then
    python3 "$repo/hack/smaps_by_mapping.py" --tsv "$workdir/smaps/bridge.smaps" | sed "s/^/mapping\tbridge\t/"
  fi
}

draw_spans_chart
mkdir -p "$(dirname "$out")"
if [ -n "$only" ]; then
  # --only: this run's lines of the section replace the previous record's,
  # the rest of the record stays; the whole report is made again from it.
  if [ ! -s "$record_out" ]; then
    echo "bench.sh: --only $only wants the record of a whole run ($record_out)" >&2
    exit 2
  fi
  without_section "$only" <"$record_out" >"$record"
else
  record_main >"$record"
fi
if want memory; then memory_record >>"$record"; fi
if want qd; then qd_record >>"$record"; fi
for s in "${failed_steps[@]}"; do kv failed "$(section_of "$s")" "$s" >>"$record"; done
python3 "$repo/hack/performance_doc.py" render --template "$repo/hack/performance.md.in" --record "$record" \
  >"$workdir/performance.md"
cp "$record" "$record_out"
cp "$workdir/performance.md" "$out"
if [ -s "$spans_tmp" ]; then mv "$spans_tmp" "$spans_chart"; fi
if [ -s "$workdir/$qd_chart_name" ]; then cp "$workdir/$qd_chart_name" "$(dirname "$out")/$qd_chart_name"; fi
echo >&2
column -t -s $'\t' "$rows" >&2 || cat "$rows" >&2
echo "bench.sh: wrote $out and its record $record_out" >&2
if [ "${#failed_steps[@]}" -gt 0 ]; then
  exit 1
fi
