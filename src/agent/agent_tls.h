// The agent's TLS at start and per call: the key, certificate and CA files
// are checked before serving (a private key others can read is refused; a
// broken file fails naming it), and an optional allow-list of client
// certificate names is enforced on every call over mTLS (docs/deploy.md,
// "Trust model"). Thread-safe.
#pragma once

#include <grpcpp/security/auth_metadata_processor.h>

#include <memory>
#include <set>
#include <string>

#include "common/host.h"
#include "common/status.h"

namespace blockcsi {

// FAILED_PRECONDITION when the key file gives group or others any access;
// INVALID_ARGUMENT naming the file when one is not the PEM it should be, or
// the key does not belong to the certificate; NOT_FOUND when one is missing.
Status CheckTlsFiles(const Host& host, const std::string& cert_path, const std::string& key_path,
                     const std::string& ca_path);

// Admits a call when its client certificate's common name or one of its DNS
// subject alternative names is in `allowed` and its extended key usage lists
// clientAuth; PERMISSION_DENIED otherwise (email, URI and IP names never
// match). Installed on the mTLS credentials only (a unix socket's clients
// are local, guarded by the socket's mode).
std::shared_ptr<grpc::AuthMetadataProcessor> MakeClientAllowList(std::set<std::string> allowed);

}  // namespace blockcsi
