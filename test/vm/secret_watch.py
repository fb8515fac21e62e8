#!/usr/bin/env python3
"""Watches every process's argv and environment for secrets (test VM only).

  secret_watch.py OUT [--allow-environ COMM]...   (the secrets, one a line, on stdin)

Polls /proc every 50 ms until SIGTERM and appends one line per finding to
OUT: "<pid> <comm> argv|environ". A process named by --allow-environ (the
CSI client playing the kubelet, which hands the secret to the plugin) may
carry a secret in its environment, never in its argv. One Python process
instead of a grep per round: a fork is dear under TCG. Before it reports
anything it checks itself: it prints "watching" on stdout once it has seen
its own canary in a child's argv and environment, so a blind watcher
fails the test.
"""
import os
import signal
import subprocess
import sys
import time


def main():
    out_path = sys.argv[1]
    allow_environ = set()
    args = sys.argv[2:]
    while args:
        if args[0] == "--allow-environ" and len(args) > 1:
            allow_environ.add(args[1])
            args = args[2:]
        else:
            sys.exit("secret_watch: bad argument " + args[0])
    secrets = [line.rstrip("\n").encode() for line in sys.stdin if line.strip()]
    if not secrets:
        sys.exit("secret_watch: no secrets on stdin")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    me = os.getpid()
    reported = set()

    def read(pid, what):
        with open("/proc/%s/%s" % (pid, what), "rb") as f:
            return f.read()

    def look(pid, needles):
        """The findings in one process: (comm, kind) pairs, and its comm and argv."""
        comm = read(pid, "comm")
        argv = read(pid, "cmdline")
        kinds = [("argv", argv)]
        if comm.strip().decode(errors="replace") not in allow_environ:
            kinds.append(("environ", read(pid, "environ")))
        hits = [kind for kind, data in kinds if any(s in data for s in needles)]
        return hits, comm, argv

    def scan(needles):
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                hits, comm, argv = look(name, needles)
                # A shell's child between fork and exec is named like the
                # shell while the program it becomes (csi-call) may already
                # have its environment: read apart, the shell would be charged
                # with csi-call's allowed environment. A finding counts only
                # when the name and argv read after it are still the same.
                for _ in range(3):
                    if not hits or (read(name, "comm"), read(name, "cmdline")) == (comm, argv):
                        break
                    hits, comm, argv = look(name, needles)
                else:
                    continue  # still changing: the next round looks again
            except OSError:
                continue  # gone meanwhile, or a kernel thread
            for kind in hits:
                found.append((name, comm.strip().decode(errors="replace"), kind))
        return found

    # Self-check: a child with a canary in its argv and its environment must
    # be seen both ways. The child lives until killed and the limit is a
    # ceiling, not an expectation: under TCG on a loaded machine the first
    # scans can take many seconds.
    canary = b"secret-watch-canary-%d" % me
    child = subprocess.Popen(["sh", "-c", "sleep 3600; :", canary.decode()], env={"CANARY": canary.decode()})
    deadline = time.time() + 300
    while {kind for _, _, kind in scan([canary])} != {"argv", "environ"}:
        if time.time() > deadline:
            child.kill()
            sys.exit("secret_watch: did not see its own canary in an argv")
        time.sleep(0.05)
    child.kill()
    child.wait()
    print("watching", flush=True)

    with open(out_path, "a") as out:
        while not stop:
            for hit in scan(secrets):
                if hit not in reported:
                    reported.add(hit)
                    out.write("%s %s %s\n" % hit)
                    out.flush()
            time.sleep(0.05)


if __name__ == "__main__":
    main()
