// main() of blockcsi-bridge: the bridge is its own program, so
// each volume's process maps only what it needs.
#include "bridge/bridge_main.h"

int main(int argc, char** argv) { return blockcsi::RunBridgeMain(argc, argv); }
