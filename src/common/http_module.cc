// libblockcsi_http.so: cpp-httplib behind the C interface of http_module.h.
// Links nothing of blockcsi; every entry point catches what httplib throws.
#include "common/http_module.h"

#include <httplib.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

namespace {

void SetError(char* error, size_t error_size, const std::string& message) {
  if (error_size == 0) return;
  std::snprintf(error, error_size, "%s", message.c_str());
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int blockcsi_https_request(const char* method, const char* host, int port,
                                                                  const char* ca_pem, const char* bearer,
                                                                  const char* path, const char* content_type,
                                                                  const char* request_body, size_t request_body_size,
                                                                  int* status, char** body, size_t* body_size,
                                                                  char* error, size_t error_size) {
  try {
    httplib::SSLClient client(host, port);
    client.enable_server_certificate_verification(true);
    if (ca_pem[0] != '\0') {
      X509_STORE* store = X509_STORE_new();
      BIO* bio = BIO_new_mem_buf(ca_pem, -1);
      while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
        X509_STORE_add_cert(store, cert);
        X509_free(cert);
      }
      BIO_free(bio);
      client.set_ca_cert_store(store);  // the client owns the store
    }
    client.set_connection_timeout(5, 0);
    client.set_read_timeout(10, 0);
    client.set_write_timeout(10, 0);
    httplib::Headers headers{{"Accept", "application/json"}};
    if (bearer[0] != '\0') headers.emplace("Authorization", std::string("Bearer ") + bearer);
    const std::string verb = method;
    const std::string payload(request_body, request_body_size);
    if (verb != "GET" && verb != "DELETE" && verb != "POST" && verb != "PUT" && verb != "PATCH") {
      SetError(error, error_size, "unsupported method " + verb);
      return -1;
    }
    auto send = [&]() -> httplib::Result {
      if (verb == "GET") return client.Get(path, headers);
      if (verb == "DELETE") return client.Delete(path, headers);
      if (verb == "POST") return client.Post(path, headers, payload, content_type);
      if (verb == "PUT") return client.Put(path, headers, payload, content_type);
      return client.Patch(path, headers, payload, content_type);
    };
    auto result = send();
    if (!result) {
      SetError(error, error_size, httplib::to_string(result.error()));
      return -1;
    }
    *status = result->status;
    *body_size = result->body.size();
    *body = static_cast<char*>(std::malloc(result->body.size() + 1));
    if (*body == nullptr) {
      SetError(error, error_size, "out of memory");
      return -1;
    }
    std::memcpy(*body, result->body.data(), result->body.size());
    (*body)[result->body.size()] = '\0';
    return 0;
  } catch (const std::exception& e) {
    SetError(error, error_size, e.what());
    return -1;
  }
}

}  // extern "C"
