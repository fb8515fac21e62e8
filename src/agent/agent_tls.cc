#include "agent/agent_tls.h"

#include <grpc/grpc_security_constants.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <vector>

#include "common/logging.h"
#include "common/mutex.h"

namespace blockcsi {
namespace {

std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

struct BioCloser {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct KeyCloser {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertCloser {
  void operator()(X509* c) const { X509_free(c); }
};

// The file's PEM text in a memory BIO: read through the host seam, so that
// tests hand in files (and modes) of their own.
StatusOr<std::unique_ptr<BIO, BioCloser>> Open(const Host& host, const std::string& path, const char* flag,
                                               std::string* text) {
  auto read = host.ReadFile(path);
  if (!read.ok()) return Status(read.status().code(), std::string(flag) + " " + path + ": " + read.status().message());
  *text = std::move(*read);
  std::unique_ptr<BIO, BioCloser> bio(BIO_new_mem_buf(text->data(), static_cast<int>(text->size())));
  if (!bio) return InvalidArgument(std::string(flag) + " " + path + ": cannot be read: " + OpenSslError());
  return bio;
}

StatusOr<std::unique_ptr<X509, CertCloser>> ReadCert(const Host& host, const std::string& path, const char* flag) {
  std::string text;
  BLOCKCSI_ASSIGN_OR_RETURN(auto bio, Open(host, path, flag, &text));
  std::unique_ptr<X509, CertCloser> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return InvalidArgument(std::string(flag) + " " + path + " is not a PEM certificate: " + OpenSslError());
  return cert;
}

// At most what an error message should carry of a name the client chose:
// printable ASCII, anything else as '?'.
std::string Printable(std::string text) {
  for (char& c : text) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return text;
}

// The names a client certificate may be admitted by: its subject's common
// names and its DNS subject alternative names. Email, URI and IP SANs are not
// names of a client here: a CA that signs "email:blockcsi-controller" for a
// mailbox must not thereby admit a controller.
std::vector<std::string> ClientNames(X509* cert) {
  std::vector<std::string> names;
  X509_NAME* subject = X509_get_subject_name(cert);
  for (int i = X509_NAME_get_index_by_NID(subject, NID_commonName, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) {
    const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i));
    names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(data)), ASN1_STRING_length(data));
  }
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; sans != nullptr && i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* san = sk_GENERAL_NAME_value(sans, i);
    if (san->type != GEN_DNS) continue;
    const ASN1_STRING* dns = san->d.dNSName;
    names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)), ASN1_STRING_length(dns));
  }
  GENERAL_NAMES_free(sans);
  return names;
}

// Whether the certificate says it is for TLS clients: an extended key usage
// that lists clientAuth. A certificate with no extended key usage at all is
// valid for any purpose to OpenSSL's own check, so a server's or a
// general-purpose certificate from the same CA would pass it; an allow-list
// of controllers asks for more.
bool IsForTlsClients(X509* cert) {
  return (X509_get_extension_flags(cert) & EXFLAG_XKUSAGE) != 0 &&
         (X509_get_extended_key_usage(cert) & XKU_SSL_CLIENT) != 0;
}

class ClientAllowList final : public grpc::AuthMetadataProcessor {
 public:
  explicit ClientAllowList(std::set<std::string> allowed) : allowed_(std::move(allowed)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata&, grpc::AuthContext* context, OutputMetadata*, OutputMetadata*) override {
    std::string why = Refusal(*context);
    if (why.empty()) return grpc::Status::OK;
    LogRefusal(why);
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, why);
  }

 private:
  // Why the call's client is refused, or "" to admit it.
  std::string Refusal(const grpc::AuthContext& context) const {
    auto pem = context.FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
    if (pem.empty()) return "the call has no client certificate; this agent's --allowed-client needs one";
    std::unique_ptr<BIO, BioCloser> bio(BIO_new_mem_buf(pem.front().data(), static_cast<int>(pem.front().size())));
    std::unique_ptr<X509, CertCloser> cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
    if (!cert) {
      ERR_clear_error();
      return "the client certificate cannot be read";
    }
    std::string names;
    bool listed = false;
    for (const auto& name : ClientNames(cert.get())) {
      listed = listed || allowed_.contains(name);
      names += (names.empty() ? "" : ", ") + name;
    }
    names = Printable(names.substr(0, 200));
    if (!listed) return "client certificate \"" + names + "\" is not in this agent's --allowed-client";
    if (!IsForTlsClients(cert.get())) {
      return "client certificate \"" + names + "\" has no extended key usage clientAuth; --allowed-client needs it";
    }
    return "";
  }

  // One warning per distinct refusal a minute, with the count of those left
  // out since: a client that retries a refused call in a loop must not fill
  // the log (each refusal still gets its PERMISSION_DENIED).
  void LogRefusal(const std::string& why) EXCLUDES(mu_) {
    const auto now = std::chrono::steady_clock::now();
    uint64_t left_out = 0;
    {
      MutexLock lock(mu_);
      if (refusals_.size() > 1024) refusals_.clear();  // bounded: names are the client's choice
      auto& seen = refusals_[why];
      if (seen.logged_at != std::chrono::steady_clock::time_point() && now - seen.logged_at < std::chrono::minutes(1)) {
        ++seen.left_out;
        return;
      }
      left_out = seen.left_out;
      seen = {now, 0};
    }
    LogWarn("client refused by --allowed-client",
            {{"why", why}, {"same refusals not logged", std::to_string(left_out)}});
  }

  const std::set<std::string> allowed_;
  struct Logged {
    std::chrono::steady_clock::time_point logged_at;
    uint64_t left_out = 0;
  };
  Mutex mu_;
  std::map<std::string, Logged> refusals_ GUARDED_BY(mu_);
};

}  // namespace

Status CheckTlsFiles(const Host& host, const std::string& cert_path, const std::string& key_path,
                     const std::string& ca_path) {
  auto mode = host.Permissions(key_path);
  if (!mode.ok()) return Status(mode.status().code(), "--tls-key " + key_path + ": " + mode.status().message());
  if ((*mode & (S_IRWXG | S_IRWXO)) != 0) {
    char octal[16];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(*mode));
    return FailedPrecondition("--tls-key " + key_path + " has mode " + octal +
                              ": a private key must not be accessible to group or others (chmod 600 it)");
  }
  std::string key_text;
  BLOCKCSI_ASSIGN_OR_RETURN(auto key_bio, Open(host, key_path, "--tls-key", &key_text));
  std::unique_ptr<EVP_PKEY, KeyCloser> key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  // The key's text is wiped, not left in freed memory.
  OPENSSL_cleanse(key_text.data(), key_text.size());
  if (!key) return InvalidArgument("--tls-key " + key_path + " is not a PEM private key: " + OpenSslError());
  BLOCKCSI_ASSIGN_OR_RETURN(auto cert, ReadCert(host, cert_path, "--tls-cert"));
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("--tls-key " + key_path + " is not the key of the certificate --tls-cert " + cert_path);
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto ca, ReadCert(host, ca_path, "--tls-ca"));
  return OkStatus();
}

std::shared_ptr<grpc::AuthMetadataProcessor> MakeClientAllowList(std::set<std::string> allowed) {
  return std::make_shared<ClientAllowList>(std::move(allowed));
}

}  // namespace blockcsi
