#!/usr/bin/env python3
"""Compares a fake sysfs tree of test/testdata/sysfs with the real /sys.

Usage: compare_fake_sysfs.py FAKE_ROOT REAL_ROOT [--shape ATTR=REGEX]... NAME=NAME...
Each fake path is mapped to the real one by the NAME=NAME replacements (the
fake's host, session, target, LUN and disk numbers to the kernel's), then:
the real path exists and is of the same kind (directory, file, symlink); a
link's text is the mapped fake text; a file's content is the fake's byte for
byte, except the attributes listed in SHAPE_ONLY or given with --shape
(values that differ from machine to machine: only their form is compared,
the fake's value must have it too) and the write-only ones (existence only).
Prints every difference; exit 1 if any.
"""
import os
import re
import sys

# Attributes whose value depends on the machine, not on the format: their
# pattern is checked instead.
SHAPE_ONLY = {
    "dev": rb"\d+:\d+\n",
}
WRITE_ONLY = {"delete", "rescan", "scan", "refresh"}


def kind(path):
    if os.path.islink(path):
        return "symlink"
    if os.path.isdir(path):
        return "directory"
    if os.path.isfile(path):
        return "file"
    return "missing" if not os.path.lexists(path) else "other"


def main():
    fake_root, real_root = sys.argv[1], sys.argv[2]
    shape_only = dict(SHAPE_ONLY)
    pairs = []
    args = sys.argv[3:]
    while args:
        if args[0] == "--shape" and len(args) > 1:
            attr, regex = args[1].split("=", 1)
            shape_only[attr] = regex.encode() + rb"\n"
            args = args[2:]
        else:
            pairs.append(args[0].split("=", 1))
            args = args[1:]

    def mapped(text):
        # Longest names first: "session1" before "1".
        for old, new in sorted(pairs, key=lambda p: -len(p[0])):
            text = re.sub(r"(?<![\w:])" + re.escape(old) + r"(?![\w])", new, text)
        return text

    differences = []
    checked = 0
    for directory, dirs, files in os.walk(fake_root):
        for name in sorted(dirs + files):
            fake = os.path.join(directory, name)
            rel = os.path.relpath(fake, fake_root)
            real = os.path.join(real_root, mapped(rel))
            checked += 1
            want, got = kind(fake), kind(real)
            if want != got:
                differences.append(f"{rel}: fake is a {want}, {real} is a {got}")
                continue
            if want == "symlink":
                if mapped(os.readlink(fake)) != os.readlink(real):
                    differences.append(
                        f"{rel}: fake links to {os.readlink(fake)}, {real} to {os.readlink(real)}")
            elif want == "file" and name not in WRITE_ONLY:
                with open(fake, "rb") as f:
                    fake_bytes = f.read()
                with open(real, "rb") as f:
                    real_bytes = f.read()
                if name in shape_only:
                    for who, value in (("fake", fake_bytes), (real, real_bytes)):
                        if not re.fullmatch(shape_only[name], value):
                            differences.append(f"{rel}: {who} holds {value!r}, not of the form {shape_only[name]!r}")
                elif mapped(fake_bytes.decode("latin-1")).encode("latin-1") != real_bytes:
                    differences.append(f"{rel}: fake holds {fake_bytes!r}, {real} holds {real_bytes!r}")
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(directory, d))]
    for line in differences:
        print("DIFFERS: " + line)
    print(f"{checked} fake paths compared with {real_root}, {len(differences)} differ")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
