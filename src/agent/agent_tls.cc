#include "agent/agent_tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cerrno>

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

StatusOr<std::unique_ptr<BIO, BioCloser>> Open(const std::string& path, const char* flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, std::string(flag) + " " + path);
  std::unique_ptr<BIO, BioCloser> bio(BIO_new_file(path.c_str(), "r"));
  if (!bio) return InvalidArgument(std::string(flag) + " " + path + ": cannot be read: " + OpenSslError());
  return bio;
}

StatusOr<std::unique_ptr<X509, CertCloser>> ReadCert(const std::string& path, const char* flag) {
  BLOCKCSI_ASSIGN_OR_RETURN(auto bio, Open(path, flag));
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

Status CheckTlsFiles(const std::string& cert_path, const std::string& key_path, const std::string& ca_path) {
  struct stat st {};
  if (::stat(key_path.c_str(), &st) != 0) return ErrnoToStatus(errno, "--tls-key " + key_path);
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return FailedPrecondition("--tls-key " + key_path + " has mode " + mode +
                              ": a private key must not be accessible to group or others (chmod 600 it)");
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto key_bio, Open(key_path, "--tls-key"));
  std::unique_ptr<EVP_PKEY, KeyCloser> key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!key) return InvalidArgument("--tls-key " + key_path + " is not a PEM private key: " + OpenSslError());
  BLOCKCSI_ASSIGN_OR_RETURN(auto cert, ReadCert(cert_path, "--tls-cert"));
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("--tls-key " + key_path + " is not the key of the certificate --tls-cert " + cert_path);
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto ca, ReadCert(ca_path, "--tls-ca"));
  return OkStatus();
}

std::shared_ptr<grpc::AuthMetadataProcessor> MakeClientAllowList(std::set<std::string> allowed) {
  return std::make_shared<ClientAllowList>(std::move(allowed));
}

}  // namespace blockcsi
