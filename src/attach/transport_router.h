// TransportRouter: one Connector in front of several, one per transport
// ("iscsi" → the open-iscsi connector, "rbd" → krbd), so one node serves
// both kinds of volume. Prepare/Connect route by spec.transport, the rest by
// record.transport (an empty transport is "iscsi", as in records written
// before RBD existed). Reconcile hands each inner connector only its own
// records and merges the refreshed ones back.
//
// family(): the facade stamps the connector's family on every record and
// re-attaches a volume only through a connector of that family. The router
// is one family (the kernel's, "iscsi", what the iSCSI connector alone
// always called itself) for records of every transport: record.connector
// says which family made the record, record.transport which inner
// connector owns it, so records of the plain iSCSI connector stay valid.
// Thread-safe as far as the inner connectors are; the routing table is
// fixed at construction.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "attach/connector.h"

namespace blockcsi {

std::unique_ptr<Connector> MakeTransportRouter(std::string family,
                                               std::map<std::string, std::unique_ptr<Connector>> by_transport);

}  // namespace blockcsi
