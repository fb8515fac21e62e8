#!/usr/bin/env python3
"""clang-tidy over every translation unit of a build under a path, with a result cache.

  hack/clang_tidy_cached.py BUILD_DIR PATH_PREFIX [-j N]

Prints clang-tidy's output for each translation unit whose path starts with
PATH_PREFIX (the same set run-clang-tidy selects) and exits 1 when any of them
reports an error (.clang-tidy turns every warning into one).

Why a cache: clang-tidy re-parses every TU with all of gRPC's headers, ~4 minutes
on 2 cores, and a second clone of the same commit would repeat it word for word.
A TU's result is reused when nothing it can see has changed. The key holds:
clang-tidy's version, every .clang-tidy from the source's folder up to the root,
the compile command (with the clone's own paths replaced, so clones share
entries), and the contents of the source and of every header the compiler read
for it -- taken from Ninja's dependency log of this very build (`ninja -t deps`),
so the list is exact, not guessed. Beside each system header's contents, the
Debian package that owns it and that package's version (dpkg's own database,
read once per run); and clang-tidy's own packages: those of its binary, of the
libraries it loads and of its builtin headers, which a TU sees although the
compile command (gcc's) never named them. Nothing else of the package state is
in the key, so installing or upgrading a package no TU includes keeps every
entry. A TU without a dependency record (a Makefile build, or a TU Ninja has
not built) is always checked, never cached.

The cache lives outside the clone: $BLOCKCSI_TIDY_CACHE, default
/var/cache/blockcsi/clang-tidy for root, else ~/.cache/blockcsi-clang-tidy.
BLOCKCSI_TIDY_CACHE=off checks everything.
"""

import concurrent.futures
import glob
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading

# Compiler warnings clang-tidy turns on beyond the build's own flags (gcc's,
# which have no -Wthread-safety): the lock annotations of common/mutex.h are
# checked here. Part of every cache key.
EXTRA_ARGS = ["--extra-arg=-Wthread-safety"]


def cache_dir():
    configured = os.environ.get("BLOCKCSI_TIDY_CACHE", "")
    if configured == "off":
        return None
    if configured:
        return configured
    if os.geteuid() == 0:
        return "/var/cache/blockcsi/clang-tidy"
    return os.path.join(os.path.expanduser("~"), ".cache", "blockcsi-clang-tidy")


_file_hashes = {}


def file_digest(path):
    """sha256 of a file's bytes, memoized: thousands of TUs share the same headers."""
    digest = _file_hashes.get(path)
    if digest is None:
        try:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            digest = "missing"
        _file_hashes[path] = digest
    return digest


class DpkgDatabase:
    """Which installed Debian package owns a file, and that package's version.

    Read from dpkg's database (`admindir`: info/<package>.list, status) on the
    first question, once; a path no package lists has no owner (None).
    """

    def __init__(self, admindir="/var/lib/dpkg"):
        self.admindir = admindir
        self._lock = threading.Lock()
        self._owner = None
        self._version = None
        self._answers = {}

    def _load(self):
        versions = {}
        try:
            with open(os.path.join(self.admindir, "status"), errors="replace") as f:
                stanzas = f.read().split("\n\n")
        except OSError:
            stanzas = []
        for stanza in stanzas:
            fields = {}
            for line in stanza.splitlines():
                if line[:1] not in (" ", "\t") and ":" in line:
                    name, _, value = line.partition(":")
                    fields[name] = value.strip()
            name, version = fields.get("Package"), fields.get("Version")
            # A removed package whose configuration files stay has no files to own.
            if not name or not version or fields.get("Status", "").endswith(("not-installed", "config-files")):
                continue
            versions["%s:%s" % (name, fields.get("Architecture", ""))] = version
            versions.setdefault(name, version)
        owner = {}
        for listing in sorted(glob.glob(os.path.join(self.admindir, "info", "*.list"))):
            package = os.path.basename(listing)[: -len(".list")]
            try:
                with open(listing, errors="replace") as f:
                    for line in f:
                        owner.setdefault(line.rstrip("\n"), package)
            except OSError:
                continue
        self._version, self._owner = versions, owner

    def owner(self, path):
        """The package that installed `path` and its version ("name=version"), else None.

        Tried as given, then through the merged /usr (/lib is /usr/lib) and
        its real path, the way dpkg may list it."""
        with self._lock:
            if self._owner is None:
                self._load()
            if path in self._answers:
                return self._answers[path]
        answer = None
        for candidate in _spellings(path):
            package = self._owner.get(candidate)
            if package is not None:
                answer = "%s=%s" % (package, self._version.get(package, "unknown"))
                break
        with self._lock:
            self._answers[path] = answer
        return answer


_MERGED_USR = ("/lib/", "/lib64/", "/bin/", "/sbin/")


def _spellings(path):
    """`path`, then its other name through the merged /usr, then the same for its real path."""
    for p in (path, os.path.realpath(path)):
        yield p
        if p.startswith(_MERGED_USR):
            yield "/usr" + p
        elif p.startswith(tuple("/usr" + d for d in _MERGED_USR)):
            yield p[len("/usr"):]


def clang_tidy_files(binary):
    """The files whose contents make clang-tidy what it is: its binary, the
    shared libraries it loads (ldd) and its builtin headers (the resource
    directory next to it, used whatever the compile command says)."""
    real = os.path.realpath(binary)
    files = [real]
    ldd = subprocess.run(["ldd", real], capture_output=True, text=True, check=False).stdout
    for line in ldd.splitlines():
        words = line.split()
        if "=>" in words and words.index("=>") + 1 < len(words) and words[words.index("=>") + 1].startswith("/"):
            files.append(words[words.index("=>") + 1])
        elif words and words[0].startswith("/"):
            files.append(words[0])
    prefix = os.path.dirname(os.path.dirname(real))
    files.extend(sorted(glob.glob(os.path.join(prefix, "lib", "clang", "*", "include", "**", "*"), recursive=True)))
    return [f for f in files if os.path.isfile(f)]


def tool_identity(files, dpkg):
    """clang-tidy's packages, a part of every key: the package and version of
    each of `files` (clang_tidy_files), or the contents of a file no package
    owns."""
    parts = set()
    for path in files:
        parts.add(dpkg.owner(path) or "%s %s" % (path, file_digest(path)))
    return "\0".join(sorted(parts))


def unit_key(parts, read, build_dir, source_root, dpkg):
    """The cache key of one TU: `parts` (tool identity, .clang-tidy, command,
    source path and contents) and each file in `read` (Ninja's list of what the
    compiler read for it, relative to build_dir): its path with the clone's
    prefixes replaced, its contents and, for a system file, its package and
    that package's version."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    for path in sorted(set(read)):
        full = os.path.normpath(os.path.join(build_dir, path))
        shown = full.replace(build_dir, "<build>").replace(source_root, "<source>")
        package = "" if shown != full else (dpkg.owner(full) or "")
        h.update(shown.encode() + b"\0" + file_digest(full).encode() + b"\0" + package.encode() + b"\0")
    return h.hexdigest()


def ninja_deps(build_dir):
    """object path (relative to build_dir) -> the files the compiler read for it."""
    if not os.path.exists(os.path.join(build_dir, "build.ninja")):
        return {}
    out = subprocess.run(["ninja", "-C", build_dir, "-t", "deps"], capture_output=True, text=True, check=False).stdout
    deps = {}
    current = None
    for line in out.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith(" "):
            # "<object>: #deps N, deps mtime M (VALID|STALE)"
            target, _, status = line.partition(": #deps")
            current = [] if "(VALID)" in status else None
            if current is not None:
                deps[target] = current
        elif current is not None:
            current.append(line.strip())
    return deps


def compile_seconds(build_dir):
    """object path (relative to build_dir) -> how long its last compile took,
    from Ninja's log of this build: the longer a TU took gcc, the more headers
    clang-tidy parses for it, so the order in which to start them."""
    seconds = {}
    try:
        with open(os.path.join(build_dir, ".ninja_log")) as f:
            for line in f:
                words = line.rstrip("\n").split("\t")
                if len(words) == 5 and words[0].isdigit() and words[1].isdigit():
                    seconds[words[3]] = (int(words[1]) - int(words[0])) / 1000.0
    except OSError:
        pass
    return seconds


def object_of(entry):
    """The object file a compile database entry writes (relative to its build directory)."""
    obj = entry.get("output")
    if obj is None:
        command = entry.get("command") or shlex.join(entry.get("arguments", []))
        words = shlex.split(command)
        obj = words[words.index("-o") + 1] if "-o" in words else None
    return obj


def longest_first(units, seconds):
    """`units` in the order to start them: the longest compile first, so that
    the last TU to finish is a short one and no core idles at the end while
    the other checks one long TU (ties and unknown TUs keep their order)."""
    return sorted(units, key=lambda entry: -seconds.get(object_of(entry), 0.0))


def tidy_config_digest(source, source_root):
    """The .clang-tidy files that apply to `source`: its folder's and every parent's up to the root."""
    parts = []
    folder = os.path.dirname(source)
    while folder.startswith(source_root):
        config = os.path.join(folder, ".clang-tidy")
        if os.path.exists(config):
            parts.append(file_digest(config))
        folder = os.path.dirname(folder)
    return ",".join(parts)


def main():
    args = sys.argv[1:]
    jobs = os.cpu_count() or 2
    if "-j" in args:
        i = args.index("-j")
        jobs = int(args[i + 1])
        del args[i : i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    build_dir = os.path.abspath(args[0])
    prefix = os.path.abspath(args[1])
    source_root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        database = json.load(f)
    units = [e for e in database if os.path.abspath(os.path.join(e["directory"], e["file"])).startswith(prefix)]

    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, text=True, check=True).stdout
    dpkg = DpkgDatabase()
    packages = tool_identity(clang_tidy_files(shutil.which("clang-tidy")), dpkg)
    deps = ninja_deps(build_dir)
    store = cache_dir()
    if store:
        os.makedirs(store, exist_ok=True)

    def key_of(entry):
        source = os.path.abspath(os.path.join(entry["directory"], entry["file"]))
        obj = object_of(entry)
        read = deps.get(obj) if obj else None
        if read is None or store is None:
            return source, None
        command = entry.get("command") or shlex.join(entry.get("arguments", []))
        # Another clone's paths differ only in these two prefixes.
        command = command.replace(build_dir, "<build>").replace(source_root, "<source>")
        parts = (version, packages, " ".join(EXTRA_ARGS), tidy_config_digest(source, source_root), command,
                 os.path.relpath(source, source_root), file_digest(source))
        return source, unit_key(parts, read, build_dir, source_root, dpkg)

    def check(entry):
        source, key = key_of(entry)
        if key:
            cached = os.path.join(store, key)
            if os.path.exists(cached):
                with open(cached) as f:
                    return source, f.read(), True
        result = subprocess.run(["clang-tidy", "-p", build_dir, "--quiet", *EXTRA_ARGS, source],
                                capture_output=True, text=True, check=False)
        output = result.stdout + result.stderr
        # "N warnings generated." is noise; a finding is a line with "error:".
        output = "\n".join(line for line in output.splitlines() if "warnings generated" not in line
                           and "warning generated" not in line)
        if key:
            partial = os.path.join(store, key + ".tmp%d" % os.getpid())
            with open(partial, "w") as f:
                f.write(output)
            os.replace(partial, os.path.join(store, key))
        return source, output, False

    failed = False
    hits = 0
    # Started longest first; printed in the compile database's order, so
    # that the output does not depend on the timings.
    order = longest_first(units, compile_seconds(build_dir))
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for entry, result in zip(order, pool.map(check, order)):
            results[id(entry)] = result
    for entry in units:
        source, output, hit = results[id(entry)]
        hits += hit
        if "error:" in output:
            failed = True
        if output.strip():
            print(output)
    print("clang-tidy: %d translation units, %d from the cache" % (len(units), hits), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
