"""Mutants generated from the sources by rule, never placed by hand.

Three categories, each a set of rewrite rules applied to every match in src/:

  os-effect     a system call with an effect (::unlink, ::mkdir, ::kill, ...)
                or a call through the host seam that changes the host
                (host->MakeDirectory, host_.RemovePath, ...): the call is
                skipped (it "succeeds" without doing anything) or fails.
  record-write  the crash-safe write steps: ::fsync, ::fdatasync and ::rename
                (skipped or failing), the Fsync* helpers and every call of
                WriteFileAtomically / RemoveFileDurably / Host::ReplaceFile
                skipped, and "write in place": in a function that renames a
                temp file over the real one, the temp name is replaced by the
                real one and the rename dropped.
  redaction     a log or error site that hides a secret shows it instead:
                Command::Secret becomes Arg, X.Redacted() becomes X's plain argv,
                RedactedJson(m) becomes m.ShortDebugString(),
                RedactSecretsInPlace(m) does nothing, Stdin(data, true) is not
                marked sensitive.

A skipped call still evaluates its arguments ((void)(arg), ...) so that no
variable becomes unused under -Werror. A mutant's id is its file, rule and the
text it replaces (plus #n for the n-th same text in that file): stable when
lines move, so test/tools/mutation_accepted.txt can name one.
"""

import hashlib
import os
import re

# Syscalls whose effect a test can observe; read-only calls (open, read, stat)
# are not mutated: skipping one only makes the code fail on garbage.
DURABLE_SYSCALLS = ("fsync", "fdatasync", "rename", "renameat", "renameat2")
EFFECT_SYSCALLS = ("unlink", "unlinkat", "rmdir", "mkdir", "mkdirat", "ftruncate", "truncate", "fchmod", "chmod",
                   "chown", "fchown", "lchown", "symlink", "link", "mount", "umount", "umount2", "kill", "flock",
                   "fallocate", "ioctl", "setxattr", "fsetxattr", "removexattr")
# The host seam's (src/common/host.h) methods that change the host.
HOST_STATUS_METHODS = ("WriteFile", "ReplaceFile", "OverwriteFile", "SetPermissions", "MakeDirectory", "MakeFile",
                       "RemovePath", "RemoveTree", "Symlink")
HOST_VOID_METHODS = ("Kill", "Reap")
# Functions that are themselves a crash-safe write step or a whole record write.
RECORD_FUNCTIONS = r"Fsync\w*|WriteFileAtomically|RemoveFileDurably"

RECEIVER = r"((?:[A-Za-z_]\w*(?:\(\))?(?:\.|->))+)"


class Mutant:
    def __init__(self, path, category, rule, start, end, original, replacement, text):
        self.path, self.category, self.rule = path, category, rule
        self.start, self.end = start, end
        self.original, self.replacement = original, replacement
        self.line = text.count("\n", 0, start) + 1
        self.id = ""

    def describe(self):
        shown = re.sub(r"\s+", " ", self.original)
        return "%s:%d %s: %s" % (self.path, self.line, self.rule, shown[:90])

    def apply(self, text):
        return text[:self.start] + self.replacement + text[self.end:]


def _matching_paren(text, open_at):
    """Index just past the ')' matching text[open_at] == '(' (strings and chars skipped)."""
    depth, i, n = 0, open_at, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            quote, i = c, i + 1
            while i < n and text[i] != quote:
                i += 2 if text[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def _split_args(inner):
    """Top-level comma-separated arguments of a call's inside."""
    args, depth, current, i = [], 0, "", 0
    while i < len(inner):
        c = inner[i]
        if c in "\"'":
            j = i + 1
            while j < len(inner) and inner[j] != c:
                j += 2 if inner[j] == "\\" else 1
            current += inner[i:j + 1]
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            args.append(current.strip())
            current = ""
        else:
            current += c
        i += 1
    if current.strip():
        args.append(current.strip())
    return args


def _voided(args, result_type, value):
    """An expression that evaluates every argument, then yields value: an
    immediately called lambda, so that a call used as a statement does not
    become an unused value under -Werror."""
    body = "".join("(void)(%s); " % a for a in args)
    if result_type == "void":
        return "[&] { %s}()" % body
    return "[&]() -> %s { %s%sreturn %s; }()" % (result_type, body, "errno = EIO; " if value == "-1" else "", value)


def _code_only(text):
    """text with comments and string contents blanked (same length), for matching."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out[i:j] = [c if c == "\n" else " " for c in text[i:j]]
            i = j
        elif text[i] == '"' and not text.startswith("R\"", i - 1):
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out[i + 1:j] = " " * (j - i - 1)
            i = j + 1
        elif text[i] == "'" and not text[i - 1:i].isalnum():
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _is_definition(code, start):
    """A function's own definition or declaration (a type before the name), not a call of it."""
    before = code[max(0, code.rfind("\n", 0, start) + 1):start]
    m = re.search(r"([\w:>&*]+)\s+$", before)
    return m is not None and m.group(1) not in ("return", "co_return", "else", "case", "throw")


def _function_start(code, at):
    """Offset of the line that opens the function containing `at` (a line at column 0 ending in '{')."""
    for m in reversed(list(re.finditer(r"(?m)^[A-Za-z].*\{[ \t]*$", code[:at]))):
        return m.start()
    return 0


def _calls(code, pattern):
    """(match, call start, call end, [args]) of every call `pattern(` in code."""
    for m in re.finditer(pattern, code):
        open_at = m.end() - 1
        end = _matching_paren(code, open_at)
        if end > 0:
            yield m, m.start(), end


def mutants_in(path, text):
    code = _code_only(text)
    found = []

    def add(category, rule, start, end, replacement):
        found.append(Mutant(path, category, rule, start, end, text[start:end], replacement, text))

    def args_of(m, end):
        return _split_args(text[m.end():end - 1])

    names = "|".join(DURABLE_SYSCALLS + EFFECT_SYSCALLS)
    for m, start, end in _calls(code, r"(?<![\w:])::(%s)\(" % names):
        name, args = m.group(1), args_of(m, end)
        category = "record-write" if name in DURABLE_SYSCALLS else "os-effect"
        add(category, "skip ::%s" % name, start, end, _voided(args, "int", "0"))
        add(category, "fail ::%s" % name, start, end, _voided(args, "int", "-1"))
        if name == "rename" and len(args) == 2:
            temp = re.sub(r"\.c_str\(\)$", "", args[0])
            real = re.sub(r"\.c_str\(\)$", "", args[1])
            if re.fullmatch(r"\w+", temp) and re.fullmatch(r"[\w.]+", real):
                fstart = code.find("\n", _function_start(code, start)) + 1
                body = text[fstart:start]
                # Only a temp file the function makes itself (a local name).
                if re.search(r"\b(std::string|auto)\s+%s\s*=" % temp, body):
                    # The whole span from the function's start to the rename: the
                    # temp name becomes the real one (created or truncated in
                    # place), the rename does nothing.
                    replaced = re.sub(r"(?<![\w.])%s\b(?!\s*=[^=])" % temp, real, body)
                    replaced = replaced.replace("O_EXCL", "O_TRUNC")
                    add("record-write", "write in place", fstart, end, replaced + _voided([real], "int", "0"))

    if not path.startswith("src/common/host."):
        host = "|".join(HOST_STATUS_METHODS)
        for m, start, end in _calls(code, RECEIVER + r"(%s)\(" % host):
            if "host" not in m.group(1).lower():
                continue
            method, args = m.group(2), args_of(m, end)
            category = "record-write" if method == "ReplaceFile" else "os-effect"
            add(category, "skip host %s" % method, start, end, _voided(args, "::blockcsi::Status", "::blockcsi::OkStatus()"))
            add(category, "fail host %s" % method, start, end,
                _voided(args, "::blockcsi::Status", '::blockcsi::Internal("mutant: %s failed")' % method))
        for m, start, end in _calls(code, RECEIVER + r"(%s)\(" % "|".join(HOST_VOID_METHODS)):
            if "host" in m.group(1).lower():
                add("os-effect", "skip host %s" % m.group(2), start, end, _voided(args_of(m, end), "void", ""))

    for m, start, end in _calls(code, r"(?<![\w:.>])(%s)\(" % RECORD_FUNCTIONS):
        if _is_definition(code, start):
            continue
        add("record-write", "skip %s" % m.group(1), start, end,
            _voided(args_of(m, end), "::blockcsi::Status", "::blockcsi::OkStatus()"))

    for m in re.finditer(r"\.Secret\(", code):
        add("redaction", "Secret as Arg", m.start(), m.end(), ".Arg(")
    for m, start, end in _calls(code, RECEIVER + r"Redacted\("):
        if end != m.end() + 1:
            continue
        receiver = m.group(1)[:-2] if m.group(1).endswith("->") else m.group(1)[:-1]
        deref = "(*%s)" % receiver if m.group(1).endswith("->") else "(%s)" % receiver
        add("redaction", "argv unredacted", start, end,
            '[&] { std::string s; for (const auto& a : %s.Argv()) s += a + " "; return s; }()' % deref)
    for m, start, end in _calls(code, r"(?<![\w:])RedactedJson\("):
        if not _is_definition(code, start):
            add("redaction", "json unredacted", start, end, "(%s).ShortDebugString()" % text[m.end():end - 1])
    for m, start, end in _calls(code, r"(?<![\w:])RedactSecretsInPlace\("):
        if not _is_definition(code, start):
            add("redaction", "skip RedactSecretsInPlace", start, end, _voided(args_of(m, end), "void", ""))
    for m, start, end in _calls(code, r"\.Stdin\("):
        args = args_of(m, end)
        if len(args) == 2 and args[1] == "true":
            add("redaction", "stdin not sensitive", start, end, ".Stdin(%s, false)" % args[0])

    seen = {}
    for mut in found:
        key = "%s|%s|%s" % (mut.path, mut.rule, re.sub(r"\s+", " ", mut.original) if mut.rule != "write in place"
                            else mut.original.splitlines()[0])
        seen[key] = seen.get(key, 0) + 1
        digest = hashlib.sha1(key.encode()).hexdigest()[:8]
        mut.id = "%s:%s:%s#%d" % (mut.path, mut.rule.replace(" ", "-"), digest, seen[key])
    return found


def all_mutants(root):
    """Every mutant of src/, sorted by id."""
    out = []
    for dirpath, _, files in os.walk(os.path.join(root, "src")):
        for name in sorted(files):
            if not name.endswith((".cc", ".h")):
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            with open(full) as f:
                out.extend(mutants_in(rel, f.read()))
    return sorted(out, key=lambda m: m.id)
