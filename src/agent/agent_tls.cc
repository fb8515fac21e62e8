#include "agent/agent_tls.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cstdio>

#include "common/logging.h"

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

class ClientAllowList final : public grpc::AuthMetadataProcessor {
 public:
  explicit ClientAllowList(std::set<std::string> allowed) : allowed_(std::move(allowed)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata&, grpc::AuthContext* context, OutputMetadata*, OutputMetadata*) override {
    std::string names;
    for (const char* property : {"x509_common_name", "x509_subject_alternative_name"}) {
      for (const auto& value : context->FindPropertyValues(property)) {
        std::string name(value.data(), value.size());
        if (allowed_.count(name)) return grpc::Status::OK;
        names += (names.empty() ? "" : ", ") + name;
      }
    }
    LogWarn("client certificate not in --allowed-client", {{"names", names}});
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "client certificate \"" + names.substr(0, 200) + "\" is not in this agent's --allowed-client");
  }

 private:
  const std::set<std::string> allowed_;
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
