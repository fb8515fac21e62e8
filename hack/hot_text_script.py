#!/usr/bin/env python3
"""The plugin's profiled text layout: the profile, the linker script, the check.

  hot_text_script.py profile --binary FILE --out FILE CALLGRIND_OUT...
      writes the sorted names of the functions of FILE that a callgrind run
      executed (valgrind --tool=callgrind --demangle=no, one output file per
      process): hack/profile-text-layout.sh runs it to write
      hack/profiles/hot_text.symbols.
  hot_text_script.py script --symbols FILE --out FILE ARCHIVE...
      writes the GNU ld script (INSERT BEFORE .text) that gathers, in one
      output section .text.profiled, the input sections holding the functions
      listed in FILE (hack/profiles/hot_text.symbols: one mangled name a line).
      A function compiled in a section of its own (our code, built with
      -ffunction-sections, and libstdc++.a) is selected by its section's name;
      one in an archive member compiled without (Debian's gRPC, protobuf,
      abseil, yaml-cpp) by the member, which then moves whole. The archives
      the program links are read (objdump -t) to tell the two apart.
  hot_text_script.py check --symbols FILE --min PERCENT BINARY
      prints how many of the listed functions BINARY holds inside
      .text.profiled, and fails below PERCENT: a list that no longer matches
      the code (renamed or removed functions) saves less memory without
      anyone noticing. Regenerate it with hack/profile-text-layout.sh.

Why the layout: the kernel maps program text 64 KiB around each page fault;
the functions a volume's lifecycle runs, spread over the whole text, kept
most of it resident (src/cmd/lean_link.cmake item 5 has the figures).
"""

import argparse
import re
import subprocess
import sys

# An input section named after its one function: ".text.<name>", or the
# start-up, cold and hot parts gcc splits off into sections of their own.
FUNCTION_SECTION_PREFIXES = (".text.", ".text.startup.", ".text.unlikely.", ".text.hot.")
SHARED_SECTIONS = (".text", ".text.startup", ".text.unlikely", ".text.hot")

SYMBOL_LINE = re.compile(r"^[0-9a-f]+ (.{7}) (\S+)\t[0-9a-f]+ +(?:\.hidden )?(\S+)$")


def read_symbols(path):
    names = []
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line)
    return names


def executed_functions(callgrind_out, binary):
    """Mangled names of the functions of `binary` the profiled run executed."""
    annotated = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", callgrind_out],
                               check=True, capture_output=True, text=True).stdout
    suffix = " [" + binary + "]"
    names = set()
    for line in annotated.splitlines():
        if not line.endswith(suffix):
            continue
        # "  1,234 ( 0.01%)  file:function [object]"; recursion cycles end in 'N.
        entry = re.sub(r"^\s*[\d,]+\s+\([\s\d.]+%\)\s+", "", line[:-len(suffix)])
        names.add(re.sub(r"'\d+$", "", entry.rsplit(":", 1)[-1]))
    return names


PROFILE_HEADER = """\
# Functions whose code the plugin's link gathers first (src/cmd/lean_link.cmake
# item 5), one mangled name a line, sorted. Written by hack/profile-text-layout.sh
# from a callgrind run of the plugin: start-up, then one volume's whole lifecycle
# (hack/demo.sh). A function in an archive member built without a section per
# function brings its whole member.
"""


def write_profile(args):
    listing = subprocess.run(["nm", "--defined-only", args.binary], capture_output=True, text=True,
                             check=True).stdout
    functions = {f[2] for f in (line.split() for line in listing.splitlines()) if len(f) == 3 and f[1] in "tTwW"}
    executed = set().union(*(executed_functions(f, args.binary) for f in args.callgrind)) & functions
    if not executed:
        sys.exit("hot_text_script: no function of %s in the profile; wrong binary?" % args.binary)
    with open(args.out, "w") as out:
        out.write(PROFILE_HEADER)
        for name in sorted(executed):
            out.write(name + "\n")
    print("hot_text_script: %d functions executed -> %s" % (len(executed), args.out))
    return 0


def archive_functions(archives):
    """name -> [(archive file name, member, section)] for functions in shared text sections.

    Listed in link order (archives as given, members as archived), which
    write_script keeps: code that calls each other stays near."""
    where = {}
    for archive in archives:
        listing = subprocess.run(["objdump", "-t", archive], capture_output=True, text=True, check=True).stdout
        short = archive.rsplit("/", 1)[-1]
        member = None
        for line in listing.splitlines():
            header = re.match(r"^(\S+):\s+file format ", line)
            if header:
                member = header.group(1)
                continue
            entry = SYMBOL_LINE.match(line)
            if entry and member and "F" in entry.group(1) and entry.group(2) in SHARED_SECTIONS:
                where.setdefault(entry.group(3), []).append((short, member, entry.group(2)))
    return where


def write_script(args):
    names = read_symbols(args.symbols)
    in_archives = archive_functions(args.archives)
    # Functions in sections of their own first (a name an archive member
    # defines too may come from our code instead, as BuildCoreConfiguration
    # does), then whole archive members in the order the link would place them.
    patterns = ["*(%s)" % " ".join(prefix + name for prefix in FUNCTION_SECTION_PREFIXES) for name in names]
    rank = {}
    for places in in_archives.values():
        for found in places:
            rank.setdefault(found, len(rank))
    members = {found for name in names for found in in_archives.get(name, [])}
    patterns += ["*%s:%s(%s)" % found for found in sorted(members, key=rank.get)]
    with open(args.out, "w") as out:
        out.write("/* Generated from %s by hack/hot_text_script.py at configure time. */\n" % args.symbols)
        out.write("SECTIONS\n{\n  .text.profiled :\n  {\n")
        for pattern in patterns:
            out.write("    %s\n" % pattern)
        out.write("  }\n}\nINSERT BEFORE .text;\n")
    return 0


def profiled_range(binary):
    sections = subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True, check=True).stdout
    for line in sections.splitlines():
        fields = line[line.find("]") + 1:].split()
        if len(fields) >= 5 and fields[0] == ".text.profiled":
            return int(fields[2], 16), int(fields[4], 16)
    return 0, 0


def check(args):
    names = read_symbols(args.symbols)
    start, size = profiled_range(args.binary)
    listing = subprocess.run(["nm", "--defined-only", args.binary], capture_output=True, text=True,
                             check=True).stdout
    inside = set()
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) == 3 and start <= int(fields[0], 16) < start + size:
            inside.add(fields[2])
    matched = sum(1 for name in names if name in inside)
    share = 100.0 * matched / len(names) if names else 0.0
    print("hot text: %d of %d profiled functions (%.1f%%) gathered in .text.profiled (%.2f MiB) of %s"
          % (matched, len(names), share, size / 2**20, args.binary))
    if share < args.min:
        print("hot text: below %g%%: %s no longer matches the code; regenerate it (hack/profile-text-layout.sh) "
              "or configure with -DBLOCKCSI_HOT_TEXT=OFF" % (args.min, args.symbols), file=sys.stderr)
        return 1
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    profile = commands.add_parser("profile")
    profile.add_argument("--binary", required=True)
    profile.add_argument("--out", required=True)
    profile.add_argument("callgrind", nargs="+")
    script = commands.add_parser("script")
    script.add_argument("--symbols", required=True)
    script.add_argument("--out", required=True)
    script.add_argument("archives", nargs="*")
    verify = commands.add_parser("check")
    verify.add_argument("--symbols", required=True)
    verify.add_argument("--min", type=float, required=True)
    verify.add_argument("binary")
    args = parser.parse_args()
    return {"profile": write_profile, "script": write_script, "check": check}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
