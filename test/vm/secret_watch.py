#!/usr/bin/env python3
"""Watches every process's argv and environment for secrets (test VM only).

  secret_watch.py OUT [--allow-environ COMM]...   (the secrets, one a line, on stdin)

Appends one line per finding to OUT until SIGTERM: "<pid> <comm> argv|environ".
A process named by --allow-environ (the CSI client playing the kubelet, which
hands the secret to the plugin) may carry a secret in its environment, never
in its argv.

When to look: the kernel's process events connector reports every exec, and
the new program's argv and environment are read at once, so a process is
looked at when it starts, however briefly it lives -- a program that gets a
secret on its command line has it there from its exec on. A full scan of
/proc every second beside it catches what changes its argv later (a process
that rewrites its title). Before, every process was read every 50 ms: a
process that lived less than that could be missed, and under TCG the scans
took much of the guest's one CPU from the test. Without the connector (no
CONFIG_PROC_EVENTS, no CAP_NET_ADMIN) it falls back to scanning every 50 ms,
and says so.

Before it reports anything it checks itself: it prints "watching" on stdout
once it has seen its own canary in a child's argv and environment (through an
exec event when it has the connector), so a blind watcher fails the test.
One Python process instead of a grep per round: a fork is dear under TCG.
"""
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

# linux/netlink.h, linux/connector.h, linux/cn_proc.h
NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
NLMSG_DONE = 3
PROC_CN_MCAST_LISTEN = 1
PROC_EVENT_EXEC = 0x00000002
NLMSG_HEADER = struct.Struct("=IHHII")  # len, type, flags, seq, pid
CN_MSG_HEADER = struct.Struct("=IIIIHH")  # idx, val, seq, ack, len, flags
PROC_EVENT_HEADER = struct.Struct("=IIQ")  # what, cpu, timestamp_ns
EXEC_EVENT = struct.Struct("=II")  # process_pid, process_tgid

FULL_SCAN_EVERY_S = 1.0
POLL_EVERY_S = 0.05


def exec_events_socket():
    """A netlink socket subscribed to the process events, or None."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        sock.bind((os.getpid(), CN_IDX_PROC))
        op = struct.pack("=I", PROC_CN_MCAST_LISTEN)
        cn = CN_MSG_HEADER.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(op), 0) + op
        sock.send(NLMSG_HEADER.pack(NLMSG_HEADER.size + len(cn), NLMSG_DONE, 0, 0, os.getpid()) + cn)
        return sock
    except OSError as e:
        print("secret_watch: no process events (%s): scanning every %d ms" % (e, POLL_EVERY_S * 1000),
              file=sys.stderr, flush=True)
        return None


def exec_pids(sock):
    """The processes that exec'd, from what the socket holds now."""
    pids = []
    while True:
        try:
            data = sock.recv(65536, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return pids
        except OSError:  # ENOBUFS: events were lost; the caller scans everything
            return None
        at = 0
        while at + NLMSG_HEADER.size <= len(data):
            length = NLMSG_HEADER.unpack_from(data, at)[0]
            if length < NLMSG_HEADER.size:
                break
            body = at + NLMSG_HEADER.size + CN_MSG_HEADER.size
            if body + PROC_EVENT_HEADER.size + EXEC_EVENT.size <= at + length:
                what = PROC_EVENT_HEADER.unpack_from(data, body)[0]
                if what == PROC_EVENT_EXEC:
                    pids.append(str(EXEC_EVENT.unpack_from(data, body + PROC_EVENT_HEADER.size)[1]))
            at += (length + 3) & ~3


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
    me = str(os.getpid())
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

    def scan(needles, pids):
        found = []
        for name in pids:
            if not name.isdigit() or name == me:
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

    events = exec_events_socket()
    period = FULL_SCAN_EVERY_S if events is not None else POLL_EVERY_S

    def execs_within(timeout):
        """The processes that exec'd within timeout ([] when none, or without
        the connector), or None when events were lost: scan everything."""
        if events is None:
            time.sleep(timeout)
            return []
        if not select.select([events], [], [], timeout)[0]:
            return []
        return exec_pids(events)

    # Self-check: a child with a canary in its argv and its environment must
    # be seen both ways (with the connector: through its exec event). The
    # child lives until killed and the limit is a ceiling, not an
    # expectation: under TCG on a loaded machine this can take many seconds.
    canary = b"secret-watch-canary-%s" % me.encode()
    child = subprocess.Popen(["sh", "-c", "sleep 3600; :", canary.decode()], env={"CANARY": canary.decode()})
    deadline = time.time() + 300
    seen = set()
    while seen != {"argv", "environ"}:
        if time.time() > deadline:
            child.kill()
            sys.exit("secret_watch: did not see its own canary in an argv")
        pids = execs_within(POLL_EVERY_S)
        if events is None or pids is None:
            pids = os.listdir("/proc")
        seen |= {kind for _, _, kind in scan([canary], pids)}
    child.kill()
    child.wait()
    print("watching", flush=True)

    with open(out_path, "a") as out:
        full_scan_at = 0.0
        while not stop:
            now = time.monotonic()
            if now >= full_scan_at:
                pids = os.listdir("/proc")
                full_scan_at = now + period
            else:
                pids = execs_within(full_scan_at - now)
                if pids is None:
                    pids = os.listdir("/proc")
            for hit in scan(secrets, pids):
                if hit not in reported:
                    reported.add(hit)
                    out.write("%s %s %s\n" % hit)
                    out.flush()


if __name__ == "__main__":
    main()
