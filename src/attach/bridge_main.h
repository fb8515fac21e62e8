// `blockcsi bridge ...`: the per-volume userspace bridge process. It logs in
// to one LUN with libiscsi, serves it as a single FUSE file (direct_io) and
// puts a loop device on top, then answers its control socket until told to
// shut down. It runs detached from the plugin (own session and process
// group) so that a plugin crash, restart or upgrade never breaks a mounted
// volume. Secrets arrive on stdin, never in argv.
#pragma once

namespace blockcsi {

// argv[0] is "bridge". Writes one JSON "ready" line to stdout (ok, device,
// size, identity — or the error) and then serves; returns the exit code.
int RunBridgeMain(int argc, char** argv);

}  // namespace blockcsi
