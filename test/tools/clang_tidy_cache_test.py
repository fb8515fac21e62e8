#!/usr/bin/env python3
"""The clang-tidy cache's keys (hack/clang_tidy_cached.py) against a made-up dpkg database.

  clang_tidy_cache_test.py [PATH/TO/clang_tidy_cached.py] [unittest arguments]

A TU's key must change with what its result can depend on -- clang-tidy's
packages, the packages and contents of the headers the TU includes, the
project's files -- and with nothing else: installing, upgrading or removing a
package no TU includes keeps every key, so every cached result stays valid.
"""

import importlib.util
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "hack", "clang_tidy_cached.py")


def load_script(path):
    spec = importlib.util.spec_from_file_location("clang_tidy_cached", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tidy = None


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class FakeMachine:
    """A file tree with system headers, a clang-tidy, a clone of the project and
    a dpkg database (status, info/*.list) that says who installed what."""

    def __init__(self, top):
        self.top = top
        self.usr = os.path.join(top, "root", "usr")
        self.admindir = os.path.join(top, "dpkg")
        # package -> (version, architecture, files)
        self.packages = {}
        self.headers = {
            "foo": os.path.join(self.usr, "include", "foo", "foo.h"),
            "bar": os.path.join(self.usr, "include", "bar", "bar.h"),
        }
        self.clang_tidy = os.path.join(self.usr, "lib", "llvm-14", "bin", "clang-tidy")
        self.builtin_header = os.path.join(self.usr, "lib", "llvm-14", "lib", "clang", "14.0.6", "include",
                                           "stddef.h")
        write(self.headers["foo"], "int foo();\n")
        write(self.headers["bar"], "int bar();\n")
        write(self.clang_tidy, "clang-tidy 14\n")
        write(self.builtin_header, "typedef long size_t;\n")
        self.install("libfoo-dev", "1.0-1", [self.headers["foo"]], arch="amd64")
        self.install("libbar-dev", "2.0-1", [self.headers["bar"]])
        self.install("clang-tidy-14", "1:14.0.6-12", [self.clang_tidy])
        self.install("libclang-common-14-dev", "1:14.0.6-12", [self.builtin_header])

    def install(self, name, version, files, arch=None):
        self.packages[name] = (version, arch, files)
        self.save()

    def remove(self, name):
        del self.packages[name]
        self.save()

    def save(self):
        shutil.rmtree(self.admindir, ignore_errors=True)
        os.makedirs(os.path.join(self.admindir, "info"))
        stanzas = []
        for name, (version, arch, files) in sorted(self.packages.items()):
            stanzas.append("Package: %s\nStatus: install ok installed\nArchitecture: %s\nVersion: %s\n"
                           "Description: made up\n for this test\n" % (name, arch or "all", version))
            listing = "%s:%s.list" % (name, arch) if arch else "%s.list" % name
            dirs = sorted({os.path.dirname(f) for f in files})
            write(os.path.join(self.admindir, "info", listing), "".join(d + "\n" for d in dirs + files))
        # A package removed with its configuration kept: owns nothing.
        stanzas.append("Package: libfoo-dev\nStatus: deinstall ok config-files\nArchitecture: i386\n"
                       "Version: 0.9-1\n")
        write(os.path.join(self.admindir, "status"), "\n".join(stanzas))

    def clone(self, name):
        """A clone of the project: two TUs, a.cc includes foo.h, b.cc bar.h, both a project header."""
        source_root = os.path.join(self.top, name)
        write(os.path.join(source_root, ".clang-tidy"), "Checks: 'bugprone-*'\n")
        write(os.path.join(source_root, "src", "common", "names.h"), "#pragma once\n")
        write(os.path.join(source_root, "src", "a.cc"), '#include <foo/foo.h>\n#include "common/names.h"\n')
        write(os.path.join(source_root, "src", "b.cc"), '#include <bar/bar.h>\n#include "common/names.h"\n')
        os.makedirs(os.path.join(source_root, "build"), exist_ok=True)
        return source_root


class ClangTidyCacheKeyTest(unittest.TestCase):
    def setUp(self):
        self.top = tempfile.mkdtemp(prefix="tidy-cache-test-")
        self.machine = FakeMachine(self.top)
        self.source_root = self.machine.clone("clone-1")

    def tearDown(self):
        shutil.rmtree(self.top)

    def keys(self, source_root=None):
        """Every TU's key as clang_tidy_cached.py computes it in one run."""
        source_root = source_root or self.source_root
        build_dir = os.path.join(source_root, "build")
        tidy._file_hashes.clear()  # one run reads each file once
        dpkg = tidy.DpkgDatabase(self.machine.admindir)
        packages = tidy.tool_identity([self.machine.clang_tidy, self.machine.builtin_header], dpkg)
        # What Ninja's dependency log holds for each object: the project's
        # files relative to the build directory, system headers absolute.
        reads = {
            "a.cc": ["../src/a.cc", "../src/common/names.h", self.machine.headers["foo"]],
            "b.cc": ["../src/b.cc", "../src/common/names.h", self.machine.headers["bar"]],
        }
        keys = {}
        for unit, read in reads.items():
            source = os.path.join(source_root, "src", unit)
            command = "g++ -I%s/src -c %s -o %s/%s.o" % (source_root, source, build_dir, unit)
            command = command.replace(build_dir, "<build>").replace(source_root, "<source>")
            parts = ("Debian LLVM version 14.0.6", packages, tidy.tidy_config_digest(source, source_root), command,
                     os.path.relpath(source, source_root), tidy.file_digest(source))
            keys[unit] = tidy.unit_key(parts, read, build_dir, source_root, dpkg)
        return keys

    def test_owner_is_the_package_and_its_installed_version(self):
        dpkg = tidy.DpkgDatabase(self.machine.admindir)
        self.assertEqual(dpkg.owner(self.machine.headers["foo"]), "libfoo-dev:amd64=1.0-1")
        self.assertEqual(dpkg.owner(self.machine.headers["bar"]), "libbar-dev=2.0-1")
        self.assertIsNone(dpkg.owner(os.path.join(self.source_root, "src", "a.cc")))

    def test_unrelated_package_installed_upgraded_or_removed_keeps_every_key(self):
        before = self.keys()
        self.machine.install("sl", "5.02-1+b1", [os.path.join(self.machine.usr, "games", "sl")], arch="amd64")
        self.assertEqual(self.keys(), before, "installing sl")
        self.machine.install("sl", "5.03-1", [os.path.join(self.machine.usr, "games", "sl")], arch="amd64")
        self.assertEqual(self.keys(), before, "upgrading sl")
        self.machine.remove("sl")
        self.assertEqual(self.keys(), before, "removing sl")

    def test_upgrade_of_an_included_package_invalidates_exactly_its_includers(self):
        before = self.keys()
        self.machine.install("libfoo-dev", "1.0-2", [self.machine.headers["foo"]], arch="amd64")
        after = self.keys()
        self.assertNotEqual(after["a.cc"], before["a.cc"])
        self.assertEqual(after["b.cc"], before["b.cc"])

    def test_clang_tidy_upgrade_invalidates_every_key(self):
        before = self.keys()
        self.machine.install("clang-tidy-14", "1:14.0.6-13", [self.machine.clang_tidy])
        after = self.keys()
        self.assertNotEqual(after["a.cc"], before["a.cc"])
        self.assertNotEqual(after["b.cc"], before["b.cc"])
        # Its builtin headers are seen by every TU, though no command names them.
        self.machine.install("clang-tidy-14", "1:14.0.6-12", [self.machine.clang_tidy])
        self.assertEqual(self.keys(), before)
        self.machine.install("libclang-common-14-dev", "1:14.0.6-13", [self.machine.builtin_header])
        self.assertNotEqual(self.keys()["b.cc"], before["b.cc"])

    def test_header_contents_invalidate_their_includers(self):
        before = self.keys()
        write(self.machine.headers["bar"], "int bar(int);\n")  # changed outside dpkg
        after = self.keys()
        self.assertEqual(after["a.cc"], before["a.cc"])
        self.assertNotEqual(after["b.cc"], before["b.cc"])
        write(os.path.join(self.source_root, "src", "common", "names.h"), "#pragma once\nint n;\n")
        changed = self.keys()
        self.assertNotEqual(changed["a.cc"], after["a.cc"])
        self.assertNotEqual(changed["b.cc"], after["b.cc"])

    def test_clang_tidy_config_invalidates_every_key(self):
        before = self.keys()
        write(os.path.join(self.source_root, ".clang-tidy"), "Checks: 'bugprone-*,misc-*'\n")
        after = self.keys()
        self.assertNotEqual(after["a.cc"], before["a.cc"])
        self.assertNotEqual(after["b.cc"], before["b.cc"])

    def test_a_second_clone_of_the_same_tree_has_the_same_keys(self):
        second = self.machine.clone("clone-2")
        self.assertEqual(self.keys(second), self.keys())


if __name__ == "__main__":
    script = sys.argv.pop(1) if len(sys.argv) > 1 and sys.argv[1].endswith(".py") else SCRIPT
    tidy = load_script(script)
    unittest.main()
