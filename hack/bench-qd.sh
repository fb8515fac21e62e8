# shellcheck shell=bash disable=SC2154  # quick, bin, rows, workdir, invocation: set by bench.sh
# Issue #17 item 5, sourced by hack/bench.sh (not run on its own): the data
# path at queue depth 1..32 and the RBD bridge's sequential writes, each
# against its baseline on the same LUN / pool in the same run, as a table
# and an IOPS-against-queue-depth chart (gnuplot, SVG) in docs/.
#
# Uses bench.sh's run(), kv(), commit_now(), $bin, $workdir, $quick, $rows
# and $invocation.
#   bench_qd              runs datapath_qd_bench and rbd_seq_bench
#   draw_qd_chart         writes the chart to $workdir/datapath-qd.svg
#   qd_record             prints the section's lines of the run's record

qd_chart_name="datapath-qd.svg"

bench_qd() {
  local qd_args rbd_args
  # --quick is smaller, never different: every depth, a warm-up round and
  # an even number of measured rounds (each side goes first equally often).
  if [ "$quick" -eq 1 ]; then
    qd_args=(--size-mib 128 --rounds 2 --seconds 2 --depths "1,4,16,32" --seq-depths 1 --fuse-paths "dev_fuse,io_uring")
    rbd_args=(--size-mib 256 --rounds 2 --depths "1,16")
  else
    qd_args=(--size-mib 256 --rounds 4 --seconds 5 --depths "1,4,16,32" --seq-depths 1 --fuse-paths "dev_fuse,io_uring")
    rbd_args=(--size-mib 1024 --rounds 4 --depths "1,16")
  fi
  # The LUN's backing file on a tmpfs when there is one: the ratio is about
  # what the bridge adds, and a shared machine's disk (writes end with a
  # flush) would otherwise set the pace and the noise of both sides.
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    local shm
    shm=$(mktemp -d /dev/shm/blockcsi-bench-XXXXXX)
    extra_dirs+=("$shm")
    qd_args+=(--image-dir "$shm")
  fi
  run Q "$bin/bench/datapath_qd_bench" "${qd_args[@]}"
  if [ -x "$bin/bench/rbd_seq_bench" ]; then
    run R "$bin/bench/rbd_seq_bench" "${rbd_args[@]}"
  else
    echo "SKIP	rbd_seq_bench not built (no librbd/librados headers at configure time)" >"$workdir/rbd_seq_bench.log"
  fi
}

draw_qd_chart() {
  local log="$workdir/datapath_qd_bench.log" data="$workdir/qd-chart.tsv"
  rm -f "$workdir/$qd_chart_name"
  command -v gnuplot >/dev/null 2>&1 || return 0
  # depth, then the medians: read loop, read raw, write loop, write raw
  # (the /dev/fuse path's run), read and write loop over io_uring.
  awk -F'\t' '$1 == "QD" && $2 ~ /KiB random/ {
      col = ($2 ~ /read/ ? 0 : 2)
      if ($12 == "io_uring") { v[$3, ($2 ~ /read/ ? 5 : 6)] = $8 }
      else { v[$3, col + 1] = $8; v[$3, col + 2] = $9 }
      depth[$3] = 1
    }
    END { for (d in depth) printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d, v[d, 1], v[d, 2], v[d, 3], v[d, 4], v[d, 5], v[d, 6] }' "$log" 2>/dev/null |
    sort -n >"$data"
  [ -s "$data" ] || return 0
  gnuplot <<GNUPLOT >/dev/null 2>&1 || rm -f "$workdir/$qd_chart_name"
set terminal svg size 820,520 dynamic font "sans,11" noenhanced
set output "$workdir/$qd_chart_name"
set datafile separator "\t"
set title "4 KiB random I/O on one LUN: userspace attach (fio on the loop device) and raw libiscsi"
set logscale x 2
set xtics 2
set xlabel "queue depth (commands in flight)"
set ylabel "IOPS (median of the rounds)"
set yrange [0:*]
set grid
set key below
plot "$data" using 1:2 with linespoints lw 2 pt 7 lc rgb "#0072b2" title "read, loop device (fio libaio)", \
     "$data" using 1:3 with linespoints lw 2 pt 6 dt 2 lc rgb "#0072b2" title "read, raw libiscsi (iscsi_qd_bench)", \
     "$data" using 1:4 with linespoints lw 2 pt 5 lc rgb "#d55e00" title "write, loop device (fio libaio)", \
     "$data" using 1:5 with linespoints lw 2 pt 4 dt 2 lc rgb "#d55e00" title "write, raw libiscsi (iscsi_qd_bench)", \
     "$data" using 1:6 with linespoints lw 2 pt 9 dt 3 lc rgb "#009e73" title "read, loop device, FUSE over io_uring", \
     "$data" using 1:7 with linespoints lw 2 pt 11 dt 3 lc rgb "#cc79a7" title "write, loop device, FUSE over io_uring"
GNUPLOT
}

# The section's lines of the run's record (hack/bench.sh): when and how it
# ran, the loop device's direct I/O setting, the QD lines of
# datapath_qd_bench, its and rbd_seq_bench's RESULT rows, and why RBD was
# skipped when it was. hack/performance_doc.py makes the report's section.
qd_record() {
  local qlog="$workdir/datapath_qd_bench.log" rlog="$workdir/rbd_seq_bench.log" skip
  kv qd_meta produced_by "$invocation"
  kv qd_meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
  kv qd_meta commit "$(commit_now)"
  kv qd_meta load "$(cut -d' ' -f1-3 /proc/loadavg)"
  kv qd_meta dio "$(awk '/^loop device direct I\/O:/ { print $NF; exit }' "$qlog" 2>/dev/null)"
  if [ -s "$workdir/$qd_chart_name" ]; then kv qd_meta chart "$qd_chart_name"; fi
  skip=$(awk -F'\t' '$1 == "SKIP" { print $2; exit }' "$rlog" 2>/dev/null)
  if [ -n "$skip" ]; then kv qd_meta rbd_skip "$skip"; fi
  grep $'^QD\t' "$qlog" 2>/dev/null | sed 's/^QD\t/qd\t/' || true
  awk -F'\t' '$1 ~ /^[QR]$/ { print "row\t" $0 }' "$rows"
}
