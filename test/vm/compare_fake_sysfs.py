#!/usr/bin/env python3
"""Compares a fake tree (test/testdata/sysfs, or the plain directory the unit
tests give LioExporter for configfs) with the real /sys or configfs.

Usage: compare_fake_sysfs.py FAKE_ROOT REAL_ROOT [OPTION]... NAME=NAME...
Each fake path is mapped to the real one by the NAME=NAME replacements (the
fake's host, session, target, LUN and disk numbers to the kernel's), then:
the real path exists and is of the same kind (directory, file, symlink); a
link's text is the mapped fake text; a file's content is the fake's byte for
byte, except the attributes listed in SHAPE_ONLY or given with --shape
(values that differ from machine to machine: only their form is compared,
the fake's value must have it too) and the write-only ones (existence only).
Options:
  --shape ATTR=REGEX     ATTR's value (one line) must have that form on both sides
  --write-only ATTR      ATTR is compared by existence only (reading it fails)
  --shown ATTR=TEMPLATE  the kernel shows a written value v (the fake's bytes,
                         one trailing newline dropped) as TEMPLATE with {} = v,
                         then a newline (configfs formats what it is given)
  --links-by-target      a link is compared by where it resolves under each
                         root, not by its text (configfs writes its own text)
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
    write_only = set(WRITE_ONLY)
    shown = {}
    links_by_target = False
    pairs = []
    args = sys.argv[3:]
    while args:
        option = args[0]
        if option in ("--shape", "--write-only", "--shown") and len(args) > 1:
            if option == "--shape":
                attr, regex = args[1].split("=", 1)
                shape_only[attr] = regex.encode() + rb"\n"
            elif option == "--shown":
                attr, template = args[1].split("=", 1)
                shown[attr] = template
            else:
                write_only.add(args[1])
            args = args[2:]
        elif option == "--links-by-target":
            links_by_target = True
            args = args[1:]
        else:
            pairs.append(args[0].split("=", 1))
            args = args[1:]

    # One pass over the text, longest names first ("session1" before "1"):
    # a replaced name is never replaced again (sdc->sdd beside sdd->sdc).
    names = dict(pairs)
    pattern = re.compile(r"(?<![\w:])(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) +
                         r")(?![\w])") if names else None

    def mapped(text):
        return pattern.sub(lambda m: names[m.group(1)], text) if pattern else text

    def target_under(root, link):
        resolved = os.path.realpath(link)
        rel = os.path.relpath(resolved, os.path.realpath(root))
        return rel if os.path.lexists(resolved) else f"{rel} (dangling)"

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
            if want == "symlink" and links_by_target:
                fake_to, real_to = mapped(target_under(fake_root, fake)), target_under(real_root, real)
                if fake_to != real_to:
                    differences.append(f"{rel}: fake resolves to {fake_to}, {real} to {real_to}")
            elif want == "symlink":
                if mapped(os.readlink(fake)) != os.readlink(real):
                    differences.append(
                        f"{rel}: fake links to {os.readlink(fake)}, {real} to {os.readlink(real)}")
            elif want == "file" and name not in write_only:
                with open(fake, "rb") as f:
                    fake_bytes = f.read()
                with open(real, "rb") as f:
                    real_bytes = f.read()
                if name in shape_only:
                    for who, value in (("fake", fake_bytes), (real, real_bytes)):
                        if not re.fullmatch(shape_only[name], value):
                            differences.append(f"{rel}: {who} holds {value!r}, not of the form {shape_only[name]!r}")
                    continue
                text = mapped(fake_bytes.decode("latin-1"))
                if name in shown:
                    text = shown[name].replace("{}", text[:-1] if text.endswith("\n") else text) + "\n"
                if text.encode("latin-1") != real_bytes:
                    differences.append(f"{rel}: fake holds {fake_bytes!r}, {real} holds {real_bytes!r}")
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(directory, d))]
    for line in differences:
        print("DIFFERS: " + line)
    print(f"{checked} fake paths compared with {real_root}, {len(differences)} differ")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
