#!/usr/bin/env python3
"""Kills a process with SIGKILL the moment it runs a given child (test VM only).

  kill_when.py PID REGEX [--tree] [--timeout SECONDS]

Polls /proc every 10 ms for a descendant of PID whose command line (argv
joined by spaces) matches REGEX, then kills PID with SIGKILL -- with --tree
every descendant too, first, as a container runtime takes down a container's
processes with its main one. Prints what it killed and exits 0; exits 1 when
no such child ran within the timeout (default 120 s).
"""
import os
import re
import signal
import sys
import time


def processes():
    """pid -> (ppid, argv text) of every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv = f.read().replace(b"\0", b" ").strip().decode(errors="replace")
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields follow the last ')'.
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        table[int(name)] = (ppid, argv)
    return table


def descendants(table, root):
    out = []
    todo = [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, _) in table.items():
            if ppid == parent:
                out.append(pid)
                todo.append(pid)
    return out


def main():
    args = sys.argv[1:]
    tree = "--tree" in args
    timeout = 120.0
    if "--timeout" in args:
        timeout = float(args[args.index("--timeout") + 1])
    root, pattern = int(args[0]), re.compile(args[1])
    deadline = time.time() + timeout
    while time.time() < deadline:
        table = processes()
        if root not in table:
            sys.exit("kill_when: process %d is gone" % root)
        below = descendants(table, root)
        hits = [pid for pid in below if pattern.search(table[pid][1])]
        if hits:
            victims = (below if tree else []) + [root]
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            print("killed %s while it ran: %s" % (" ".join(map(str, victims)), table[hits[0]][1]), flush=True)
            return
        time.sleep(0.01)
    sys.exit("kill_when: no child of %d matched %r within %.0f s" % (root, pattern.pattern, timeout))


if __name__ == "__main__":
    main()
