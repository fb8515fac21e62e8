// TransportRouter: one Connector in front of several, one per transport
// ("iscsi" → the open-iscsi connector, "rbd" → krbd), so one node serves
// both kinds of volume. Prepare/Connect route by spec.transport, the rest by
// record.transport (an empty transport is "iscsi", as in records written
// before RBD existed). Reconcile hands each inner connector only its own
// records and merges the refreshed ones back.
//
// name(): the facade stamps one connector name on every record and
// re-attaches a volume only through a connector of that name, and the
// Connector interface has no per-record name. So the router reports the
// one name it was built with (the node's --connector value, "iscsi"), for
// records of every transport: record.connector says which connector
// *family* made the record, record.transport which inner connector owns
// it. Records written by the plain iSCSI connector stay valid unchanged.
// Thread-safe as far as the inner connectors are; the routing table is
// fixed at construction.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "attach/connector.h"

namespace blockcsi {

std::unique_ptr<Connector> MakeTransportRouter(std::string name,
                                               std::map<std::string, std::unique_ptr<Connector>> by_transport);

}  // namespace blockcsi
