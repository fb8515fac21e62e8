// The login side of LibIscsiEventLoop: one bounded login to a portal and
// what its failures mean (the codes of LibIscsiSession::Connect). Internal
// to the bridge's libiscsi session; not an interface of its own.
#pragma once

#include <string>
#include <vector>

#include "bridge/libiscsi_session.h"
#include "common/status.h"

struct iscsi_context;

namespace blockcsi {

// libiscsi's last error as one line (a CSI error message is one line).
std::string IscsiError(iscsi_context* ctx);
// The code a login failure's text stands for.
StatusCode LoginFailureCode(const std::string& error);
// One login within the command timeout; the context is ready for commands
// on success and destroyed on failure (error text in *error).
iscsi_context* LoginToPortal(const LibIscsiOptions& o, const std::string& portal, std::string* error);
// The error once every portal failed, with a hint for the worst code.
Status LoginFailure(const LibIscsiOptions& o, const std::vector<std::string>& failures, StatusCode worst);

}  // namespace blockcsi
