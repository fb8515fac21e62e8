#!/usr/bin/env python3
"""Fails on a direct filesystem, process or sleep call in src/ outside the seams.

Every filesystem, sysfs, configfs, mount, exec and sleep goes through one
host seam, so that a test can point it at a temp tree (HostRootedAt) or a
fake. And the seam is handed in: only the programs' wiring (src/cmd, and
the bridge, which is its own program) names the machine itself,
MachineHost() or a host rooted at "/" -- any other code that did could not
be pointed anywhere else. The seams are common/host.h (files, paths,
detached processes, process exits), Executor (programs run to completion),
Mounter (mount/umount), BlockProbe (signatures), Clock (time and sleeps) and
atomic_file.h (the crash-safe write the seams themselves use). Only their
implementation files, listed in SEAMS, call the OS for these things.

src/bridge/ is exempt: the bridge is a separate tiny program (one per
attached volume) whose memory footprint matters, so it calls the OS directly
instead of linking the seam and its dependencies.

Usage: hack/check_host_seam.py [src-dir]. Prints file:line and what went
around the seam; exit status 1 when anything did.
"""
import pathlib
import re
import sys

# The seam implementations, relative to src/: the only files that call the
# OS for what the seams stand for.
SEAMS = {
    "common/host.cc": "Host: files, paths, sysfs/configfs, detached processes, process exits",
    "common/atomic_file.cc": "the crash-safe write (temp, fsync, rename, fsync dir) under Host::ReplaceFile",
    "common/executor.cc": "Executor: fork/exec of programs run to completion",
    "common/mounter.cc": "Mounter: mount(2)/umount2(2) through libmount",
    "common/block_probe.cc": "BlockProbe: opens a device read-only for libblkid",
    "common/clock.cc": "Clock: the one real sleep",
    "common/fault_points.cc": "the fault seam itself: its marker file and its wait for the test",
    "backend/local/image_files.cc": "ImageFiles: the local pool's lock, sparse image files and their fsyncs",
    # Not a seam, but no host state either: it finds its dlopen module
    # beside the running program (/proc/self/exe), which a test never fakes.
    "common/lazy_http.cc": "the http module's location beside the program",
}
EXEMPT_DIRS = ("bridge/",)
# Where MachineHost() is defined and declared.
MACHINE_SEAM = {"common/host.cc", "common/host.h"}
# Files allowed to name the machine's host outside the wiring, each with why.
MACHINE_ALLOWED = {}

# System calls (and libc wrappers) that touch files, processes or time.
# A call is the bare or ::-qualified name followed by "(", not a member
# (".mount()", "->open(") nor part of a longer name.
CALLS = sorted(
    """
    open openat creat fopen fdopen close_range
    stat lstat fstat fstatat statx statvfs fstatvfs statfs fstatfs access faccessat
    mkdir mkdirat mkdtemp mkstemp rmdir unlink unlinkat rename renameat renameat2
    link linkat symlink symlinkat readlink readlinkat realpath
    chmod fchmod fchmodat chown fchown lchown truncate ftruncate fallocate utimensat
    opendir fdopendir readdir scandir nftw
    fsync fdatasync sync_file_range syncfs flock
    mount umount umount2
    fork vfork execv execve execvp execvpe posix_spawn posix_spawnp waitpid waitid kill pidfd_open
    sleep usleep nanosleep clock_nanosleep
    """.split())
CALL = re.compile(r"(?<![\w.>])(?:::\s*)?(" + "|".join(CALLS) + r")\s*\(")
# Whole facilities that bypass the seam however they are spelled.
FACILITIES = [
    (re.compile(r"\bstd::filesystem\b"), "std::filesystem"),
    (re.compile(r"\bstd::(?:i|o)?fstream\b"), "a file stream"),
    (re.compile(r"\bstd::this_thread::sleep_(?:for|until)\b"), "a sleep (use Clock::Sleep)"),
    (re.compile(r"\bSYS_pidfd_open\b"), "pidfd_open"),
]

# The machine itself, named outside the wiring. The literal root is matched
# before literals are blanked.
MACHINE = re.compile(r'(?<![\w.>])(?:::\s*)?(MachineHost\s*\(|(?:HostRootedAt|RootedHost)\s*[({<]?[^;]*?\(\s*"/?"\s*\))')
WIRING_DIRS = ("cmd/", "bridge/")

# Comments and literals say what they like: blank them, keeping line numbers.
TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|R"([^(]*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def comments_blanked(text: str) -> str:
    return TOKENS.sub(lambda m: blank(m) if m.group(0).startswith("/") else m.group(0), text)


def machine_uses(path: pathlib.Path, relative: str) -> list:
    code = comments_blanked(path.read_text())
    found = []
    for number, line in enumerate(code.split("\n"), start=1):
        if line.lstrip().startswith("#"):
            continue
        if MACHINE.search(line):
            found.append(f"src/{relative}:{number}: names the machine's host; take a Host from the caller "
                         "(only src/cmd wires MachineHost())")
    return found


def problems_in(path: pathlib.Path, relative: str) -> list:
    code = TOKENS.sub(blank, path.read_text())
    found = []
    for number, line in enumerate(code.split("\n"), start=1):
        if line.lstrip().startswith("#"):
            continue  # includes and macros' names
        for match in CALL.finditer(line):
            found.append(f"src/{relative}:{number}: calls {match.group(1)}() directly")
        for pattern, what in FACILITIES:
            if pattern.search(line):
                found.append(f"src/{relative}:{number}: uses {what} directly")
    return found


def main() -> int:
    default = pathlib.Path(__file__).resolve().parent.parent / "src"
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else default
    problems = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".h", ".cc") or not path.is_file():
            continue
        relative = path.relative_to(root).as_posix()
        if not relative.startswith(WIRING_DIRS) and relative not in MACHINE_SEAM and relative not in MACHINE_ALLOWED:
            problems += machine_uses(path, relative)
        if relative in SEAMS or relative.startswith(EXEMPT_DIRS):
            continue
        problems += problems_in(path, relative)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print("go through the host seam (common/host.h: Host, or Executor, Mounter, BlockProbe, Clock); "
              "a new seam implementation belongs in SEAMS in hack/check_host_seam.py", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
