// blockcsi-bridge: the per-volume userspace bridge process, a program of its
// own so that each bridge maps only what it links. It opens
// one volume through a BridgeTransport (`--transport iscsi`: a LUN over
// libiscsi; `--transport rbd`: an RBD image over librbd, one rados client of
// its own), serves it as a single FUSE file (direct_io) and puts a loop
// device on top, then answers its control socket until told to shut down. It
// runs detached from the plugin (own session and process group) so that a
// plugin crash, restart or upgrade never breaks a mounted volume. Secrets
// (CHAP credentials, the cephx key) arrive on stdin, never in argv.
#pragma once

namespace blockcsi {

// argv[0] is the program; an argv[1] of "bridge" (the old plugin's form) is
// skipped. Writes one JSON "ready" line to stdout (ok, device,
// size, identity — or the error) and then serves; returns the exit code.
int RunBridgeMain(int argc, char** argv);

}  // namespace blockcsi
