// The gRPC core configuration of the blockcsi program: what gRPC registers
// at grpc_init (handshakers, load-balancing policies, resolvers, filters),
// cut to what a CSI plugin uses. Why: gRPC's own BuildCoreConfiguration
// (grpc_plugin_registry.cc) also registers xDS, RLS, grpclb, ring-hash,
// priority, weighted-target and outlier-detection policies, fault injection,
// RBAC, Google default credentials and the fake resolver. None serves a unix
// socket or a channel to a blockcsi-target agent, yet with gRPC linked
// statically every one of them was linked in (1.6 MiB of text) and touched
// at start; without them the plugin's RSS was 1.4 MiB smaller, measured
// side by side with `memory_bench --binary` (hack/bench.sh --memory-compare).
//
// What stays, in gRPC 1.51's order (the order matters: handshakers and
// filters run in the order registered): HTTP CONNECT and TCP connect
// handshakers (an http_proxy in the environment keeps working for the agent
// channel), pick_first and round_robin, the client channel, TLS
// (security handshakers and filters), authority, idle, HTTP, deadline and
// message-size filters, service-config channel args, the resource quota, the
// DNS (c-ares and native), sockaddr (unix:, ipv4:, ipv6:) resolvers and the
// proxy mapper, and the built-in server and lame-client filters.
//
// This file defines the symbol gRPC's static archive would otherwise take
// from grpc_plugin_registry.cc.o, so the linker never pulls that object in.
// It is compiled only into a program linked with the static gRPC archives of
// the version this list was read from (lean_link.cmake checks it); any
// other gRPC keeps its own registry. The Register functions are gRPC's
// internal ones; their header is not installed by Debian, so they are
// declared here with gRPC's own signatures.
namespace grpc_core {

class CoreConfiguration {
 public:
  class Builder;
};

void RegisterHttpConnectHandshaker(CoreConfiguration::Builder* builder);
void RegisterTCPConnectHandshaker(CoreConfiguration::Builder* builder);
void RegisterPickFirstLbPolicy(CoreConfiguration::Builder* builder);
void RegisterRoundRobinLbPolicy(CoreConfiguration::Builder* builder);
void BuildClientChannelConfiguration(CoreConfiguration::Builder* builder);
void SecurityRegisterHandshakerFactories(CoreConfiguration::Builder* builder);
void RegisterClientAuthorityFilter(CoreConfiguration::Builder* builder);
void RegisterChannelIdleFilters(CoreConfiguration::Builder* builder);
void RegisterHttpFilters(CoreConfiguration::Builder* builder);
void RegisterDeadlineFilter(CoreConfiguration::Builder* builder);
void RegisterMessageSizeFilter(CoreConfiguration::Builder* builder);
void RegisterServiceConfigChannelArgFilter(CoreConfiguration::Builder* builder);
void RegisterResourceQuota(CoreConfiguration::Builder* builder);
void RegisterAresDnsResolver(CoreConfiguration::Builder* builder);
void RegisterNativeDnsResolver(CoreConfiguration::Builder* builder);
void RegisterSockaddrResolver(CoreConfiguration::Builder* builder);
void RegisterHttpProxyMapper(CoreConfiguration::Builder* builder);
void RegisterSecurityFilters(CoreConfiguration::Builder* builder);
void RegisterBuiltins(CoreConfiguration::Builder* builder);

}  // namespace grpc_core

namespace grpc_event_engine::experimental {
void RegisterEventEngineChannelArgPreconditioning(grpc_core::CoreConfiguration::Builder* builder);
}  // namespace grpc_event_engine::experimental

namespace grpc_core {

void BuildCoreConfiguration(CoreConfiguration::Builder* builder) {
  grpc_event_engine::experimental::RegisterEventEngineChannelArgPreconditioning(builder);
  // TCP connect last: handshakers are added to the front of the list.
  RegisterHttpConnectHandshaker(builder);
  RegisterTCPConnectHandshaker(builder);
  RegisterPickFirstLbPolicy(builder);
  RegisterRoundRobinLbPolicy(builder);
  BuildClientChannelConfiguration(builder);
  SecurityRegisterHandshakerFactories(builder);
  RegisterClientAuthorityFilter(builder);
  RegisterChannelIdleFilters(builder);
  RegisterHttpFilters(builder);
  RegisterDeadlineFilter(builder);
  RegisterMessageSizeFilter(builder);
  RegisterServiceConfigChannelArgFilter(builder);
  RegisterResourceQuota(builder);
  RegisterAresDnsResolver(builder);
  RegisterNativeDnsResolver(builder);
  RegisterSockaddrResolver(builder);
  RegisterHttpProxyMapper(builder);
  RegisterSecurityFilters(builder);
  RegisterBuiltins(builder);
}

}  // namespace grpc_core
