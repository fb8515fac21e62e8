#!/usr/bin/env python3
"""Writes numbered 4 KiB blocks to a device until a write fails (test VM only).

  seq_writer.py DEVICE LOG

Block i (at offset 4 KiB * (i mod blocks)) holds "seq <i>" padded with
zeros, written with O_DIRECT|O_SYNC, so a write that returns is on the
target. After each one LOG gets "ok <i>"; the first failure gets
"error <errno name> at <i>" and ends the program (exit 0): the test reads
LOG to know what the node believes it wrote.
"""
import errno
import mmap
import os
import sys

BLOCK = 4096


def main():
    device, log_path = sys.argv[1], sys.argv[2]
    fd = os.open(device, os.O_WRONLY | os.O_DIRECT | os.O_SYNC)
    blocks = os.lseek(fd, 0, os.SEEK_END) // BLOCK
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT wants
    with open(log_path, "w", buffering=1) as log:
        i = 0
        while True:
            buf.seek(0)
            buf.write(("seq %d\n" % i).encode().ljust(BLOCK, b"\0"))
            try:
                os.pwrite(fd, buf, (i % blocks) * BLOCK)
            except OSError as e:
                log.write("error %s at %d\n" % (errno.errorcode.get(e.errno, str(e.errno)), i))
                return
            log.write("ok %d\n" % i)
            i += 1


if __name__ == "__main__":
    main()
