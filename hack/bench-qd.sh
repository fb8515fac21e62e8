# shellcheck shell=bash disable=SC2154  # quick, bin, rows, out, workdir, invocation: set by bench.sh
# Issue #17 item 5, sourced by hack/bench.sh (not run on its own): the data
# path at queue depth 1..32 and the RBD bridge's sequential writes, each
# against its baseline on the same LUN / pool in the same run, as a table
# and an IOPS-against-queue-depth chart (gnuplot, SVG) in docs/.
#
# Uses bench.sh's run(), $bin, $workdir, $quick, $out and $invocation.
#   bench_qd              runs datapath_qd_bench and rbd_seq_bench
#   qd_section            prints the report section (markdown, between markers)
#   draw_qd_chart         writes the chart to $workdir/datapath-qd.svg
#   splice_qd_section F   replaces the section in F (appends it when absent)

qd_chart_name="datapath-qd.svg"
qd_begin="<!-- bench.sh section qd: begin -->"
qd_end="<!-- bench.sh section qd: end -->"

bench_qd() {
  local qd_args rbd_args
  # --quick is smaller, never different: every depth, a warm-up round and
  # two measured rounds (each side goes first once).
  if [ "$quick" -eq 1 ]; then
    qd_args=(--size-mib 128 --rounds 2 --seconds 2 --depths "1,4,16,32" --seq-depths 1)
    rbd_args=(--size-mib 256 --rounds 2 --depths "1,16")
  else
    qd_args=(--size-mib 256 --rounds 3 --seconds 5 --depths "1,4,16,32" --seq-depths 1)
    rbd_args=(--size-mib 1024 --rounds 3 --depths "1,16")
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

# The target the issue sets for a row, and whether this run met it.
# qd_target <pattern> <depth> <ratio>
qd_target() {
  awk -v p="$1" -v d="$2" -v r="$3" 'BEGIN {
    t = 0
    if (p ~ /KiB random/ && d == 1) t = 0.85
    if (p ~ /KiB random/ && d == 16) t = 0.9
    if (p ~ /MiB sequential/ && p !~ /RBD/) t = 0.95
    if (p ~ /RBD/ && d == 16) t = 0.8
    if (t == 0) { print "-"; exit }
    printf "≥ %.2f: %s\n", t, (r >= t ? "met" : "**not met**")
  }'
}

draw_qd_chart() {
  local log="$workdir/datapath_qd_bench.log" data="$workdir/qd-chart.tsv"
  rm -f "$workdir/$qd_chart_name"
  command -v gnuplot >/dev/null 2>&1 || return 0
  # depth, then the medians: read loop, read raw, write loop, write raw.
  awk -F'\t' '$1 == "QD" && $2 ~ /KiB random/ {
      col = ($2 ~ /read/ ? 0 : 2)
      v[$3, col + 1] = $8; v[$3, col + 2] = $9; depth[$3] = 1
    }
    END { for (d in depth) printf "%s\t%s\t%s\t%s\t%s\n", d, v[d, 1], v[d, 2], v[d, 3], v[d, 4] }' "$log" 2>/dev/null |
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
     "$data" using 1:5 with linespoints lw 2 pt 4 dt 2 lc rgb "#d55e00" title "write, raw libiscsi (iscsi_qd_bench)"
GNUPLOT
}

qd_section() {
  local qlog="$workdir/datapath_qd_bench.log" rlog="$workdir/rbd_seq_bench.log"
  local qcmd rcmd dio skip
  qcmd=$(awk -F'\t' '$1 == "Q" { print $6; exit }' "$rows")
  rcmd=$(awk -F'\t' '$1 == "R" { print $6; exit }' "$rows")
  dio=$(awk '/^loop device direct I\/O:/ { print $NF; exit }' "$qlog" 2>/dev/null)
  echo "$qd_begin"
  echo
  echo "### 8. Queue depth: the userspace data path against raw libiscsi (issue #17)"
  echo
  local commit
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit + uncommitted changes"; fi
  echo "Produced by \`$invocation\` on $(date -u '+%Y-%m-%d %H:%M UTC'), commit"
  echo "$commit, load average (1/5/15 min) $(cut -d' ' -f1-3 /proc/loadavg) at the end."
  echo
  cat <<'QD_DOC'
One throw-away tgtd and one fully written LUN (its backing file on a tmpfs,
/dev/shm, so that the shared disk sets neither side's pace), attached through the
userspace connector (bridge → FUSE file → loop device). For each pattern
and queue depth, fio (Debian's, `--ioengine=libaio --direct=1
--iodepth=N`) runs on the loop device and `iscsi_qd_bench` (our raw
libiscsi tool: one session, async READ(16)/WRITE(16) with N in flight,
poll loop) runs on the same LUN, each for the same time, offsets from the
same seed (uniform, with replacement: fio `--randrepeat=1 --norandommap`).
Write jobs end with a timed flush on both sides (fio `--end_fsync=1`;
SYNCHRONIZE CACHE), so no side gets credit for writes a cache still holds.
A warm-up round is dropped and the side that goes first alternates per
round; each cell is min / median / max over the rounds, the ratio (and the
target's verdict) is of the medians: where a side's min-max range is wider
than the gap to the target (a loaded machine: see the load average above),
the verdict is within the noise of this run. Sources: `test/bench/datapath_qd_bench.cc`,
`test/bench/iscsi_qd_bench.cc`, `test/bench/rbd_seq_bench.cc`; run only
this section with `sudo hack/bench.sh --only qd` (`--quick` for a smoke run).
QD_DOC
  echo
  echo "Loop device direct I/O (\`/sys/block/loopN/loop/dio\`): ${dio:-unknown}"
  echo "(0: the loop device goes through the page cache of the FUSE file)."
  if [ -s "$workdir/$qd_chart_name" ] || [ -s "$(dirname "$out")/$qd_chart_name" ]; then
    echo
    echo "![4 KiB random IOPS against queue depth]($qd_chart_name)"
  fi
  echo
  echo "| Pattern | QD | Loop device (fio) | Raw libiscsi (iscsi_qd_bench) | Ratio | Target (issue #17) | Median latency µs, loop / raw |"
  echo "|---|---|---|---|---|---|---|"
  local pattern depth loop raw ratio lat_loop lat_raw
  while IFS=$'\t' read -r _ pattern depth _ loop raw ratio _ _ lat_loop lat_raw; do
    printf '| %s | %s | %s | %s | %s | %s | %s / %s |\n' "$pattern" "$depth" "$loop" "$raw" "$ratio" \
      "$(qd_target "$pattern" "$depth" "$ratio")" "$lat_loop" "$lat_raw"
  done < <(grep $'^QD\t' "$qlog" 2>/dev/null || true)
  [ -n "$qcmd" ] && echo && echo "Command: \`$qcmd\`"
  echo
  echo "RBD: 4 MiB sequential writes through the bridge's RBD transport (fio"
  echo "libaio direct on its loop device) against \`rbd bench --io-type write"
  echo "--io-size 4M --io-pattern seq --io-threads N\` on another image of the same"
  echo "size in the same pool (the bridge holds the exclusive lock on its own), the"
  echo "same bytes per run, both ending with a flush. rbd bench's default is 16"
  echo "threads, so the issue's target applies to the QD16 row. rbd bench's seq"
  echo "pattern starts each of its N streams at a random offset; fio writes one"
  echo "stream with N in flight."
  echo
  skip=$(awk -F'\t' '$1 == "SKIP" { print $2; exit }' "$rlog" 2>/dev/null)
  if [ -n "$skip" ]; then
    echo "**Skipped in this run:** $skip"
  else
    echo "| Pattern | QD | Bridge (fio on the loop device) | rbd bench | Ratio | Target (issue #17) |"
    echo "|---|---|---|---|---|---|"
    while IFS=$'\t' read -r _ depth loop raw ratio; do
      printf '| RBD 4 MiB sequential write | %s | %s | %s | %s | %s |\n' "$depth" "$loop" "$raw" "$ratio" \
        "$(qd_target "RBD" "$depth" "$ratio")"
    done < <(grep $'^RBD\t' "$rlog" 2>/dev/null || true)
    [ -n "$rcmd" ] && echo && echo "Command: \`$rcmd\`"
  fi
  echo
  echo "$qd_end"
}

# Replaces the section between the markers in $1 with qd_section's output,
# or appends it when the file has no such section (or does not exist).
splice_qd_section() {
  local file="$1" section="$workdir/qd-section.md" spliced="$workdir/qd-spliced.md"
  qd_section >"$section"
  if [ -f "$file" ] && grep -qF "$qd_begin" "$file"; then
    awk -v b="$qd_begin" -v e="$qd_end" -v s="$section" '
      $0 == b { while ((getline line < s) > 0) print line; skip = 1; next }
      $0 == e { skip = 0; next }
      !skip { print }' "$file" >"$spliced"
  else
    { [ -f "$file" ] && cat "$file" && echo; cat "$section"; } >"$spliced"
  fi
  cp "$spliced" "$file"
}
