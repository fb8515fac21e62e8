// What the verbs that call a gRPC admin service share (fences, rewrap-keys,
// pool-volumes): the channel to --endpoint, a unix socket, and how a failed
// call is told. Not for the CSI verbs (csi_call.cc, plugin_probe.cc).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "cli/verb.h"

namespace blockcsi::cli {

// The channel to the service on --endpoint, or null once the endpoint's
// problem is said (the caller exits with kExitUsage).
std::shared_ptr<grpc::Channel> AdminChannel(const GlobalOptions& options, const Io& io);

// Says that `what` failed, and, when the socket answered with another API
// (UNIMPLEMENTED), which socket --endpoint should have named (`whose`, e.g.
// "the controller's socket"). Returns kExitProblems.
int AdminCallFailed(const Io& io, const std::string& what, const grpc::Status& status, const std::string& whose);

}  // namespace blockcsi::cli
