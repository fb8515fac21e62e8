#!/usr/bin/env python3
"""Sums a /proc/PID/smaps file per mapping (issue #18: where the RSS goes).

    hack/smaps_by_mapping.py FILE [FILE2]     (or /proc/PID/smaps)
    hack/smaps_by_mapping.py --tsv FILE       name, Rss, Pss, private: tab-separated


Prints Rss, Pss and private (clean + dirty) in KiB per mapped file, [heap],
[stack] and anonymous memory, largest RSS first; a program's own file is
split into text (r-x), read-only data (r--) and writable data (rw-). With a
second file, its figures are printed beside the first's (e.g. idle and after
a lifecycle). memory_bench --smaps-dir writes such files. --tsv prints one
file's sums for a program to read (hack/bench.sh keeps them in the run's
record), the total last.
"""
import collections
import re
import sys

HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+ (\S{4}) \S+ \S+ \S+\s*(.*)$")


def by_mapping(path):
    totals = collections.defaultdict(lambda: [0, 0, 0])
    name = None
    with open(path) as f:
        for line in f:
            m = HEADER.match(line)
            if m:
                perms, target = m.group(1), m.group(2).strip()
                base = target.rsplit("/", 1)[-1] if target else "[anon]"
                if target.startswith("/"):
                    kind = {"r-xp": "text", "r--p": "ro", "rw-p": "rw"}.get(perms, perms)
                    base = f"{base} {kind}"
                name = base
                continue
            field, _, value = line.partition(":")
            if field == "Rss":
                totals[name][0] += int(value.split()[0])
            elif field == "Pss":
                totals[name][1] += int(value.split()[0])
            elif field in ("Private_Clean", "Private_Dirty"):
                totals[name][2] += int(value.split()[0])
    return totals


def tsv(path):
    sums = by_mapping(path)
    for n in sorted(sums, key=lambda n: (-sums[n][0], n)):
        if sums[n][0] > 0:
            print("\t".join([n] + [str(v) for v in sums[n]]))
    print("\t".join(["total (KiB)"] + [str(sum(v[i] for v in sums.values())) for i in range(3)]))
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--tsv":
        return tsv(argv[2])
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    first = by_mapping(argv[1])
    second = by_mapping(argv[2]) if len(argv) == 3 else None
    names = sorted(set(first) | set(second or {}), key=lambda n: -max(first[n][0], (second or first)[n][0]))
    head = f"{'mapping':40} {'Rss':>7} {'Pss':>7} {'Priv':>7}"
    print(head + (f" | {'Rss':>7} {'Pss':>7} {'Priv':>7}" if second else ""))
    for n in names:
        row = f"{n[:40]:40} {first[n][0]:7} {first[n][1]:7} {first[n][2]:7}"
        if second:
            row += f" | {second[n][0]:7} {second[n][1]:7} {second[n][2]:7}"
        if max(first[n][0], (second or first)[n][0]) > 0:
            print(row)
    total = [sum(v[i] for v in first.values()) for i in range(3)]
    row = f"{'total (KiB)':40} {total[0]:7} {total[1]:7} {total[2]:7}"
    if second:
        t2 = [sum(v[i] for v in second.values()) for i in range(3)]
        row += f" | {t2[0]:7} {t2[1]:7} {t2[2]:7}"
    print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
