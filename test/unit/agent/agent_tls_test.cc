// The agent's TLS file checks, read through a rooted host: the key's mode is
// judged before its contents, and every refusal names the flag and the file.
#include "agent/agent_tls.h"

#include <sys/stat.h>

#include <gtest/gtest.h>
#include <string>

#include "support/test_util.h"

namespace blockcsi {
namespace {

class AgentTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_ = HostRootedAt(dir_.path());
    ASSERT_TRUE(host_->MakeDirectory("/etc/blockcsi", 0755).ok());
  }
  void Put(const std::string& path, const std::string& text, mode_t mode) {
    ASSERT_TRUE(host_->OverwriteFile(path, text).ok());
    ASSERT_TRUE(host_->SetPermissions(path, mode).ok());
  }

  testing::TempDir dir_;
  std::unique_ptr<Host> host_;
};

constexpr char kKey[] = "/etc/blockcsi/tls.key";
constexpr char kCert[] = "/etc/blockcsi/tls.crt";
constexpr char kCa[] = "/etc/blockcsi/ca.crt";

TEST_F(AgentTlsTest, AKeyGroupOrOthersCanReadIsRefusedNamingItsMode) {
  Put(kKey, "-----BEGIN PRIVATE KEY-----\n", 0644);
  Status st = CheckTlsFiles(*host_, kCert, kKey, kCa);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find(std::string("--tls-key ") + kKey), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("0644"), std::string::npos) << st.message();

  Put(kKey, "-----BEGIN PRIVATE KEY-----\n", 0640);
  EXPECT_EQ(CheckTlsFiles(*host_, kCert, kKey, kCa).code(), StatusCode::kFailedPrecondition);
}

TEST_F(AgentTlsTest, AMissingKeyIsNotFoundNamingTheFlag) {
  Status st = CheckTlsFiles(*host_, kCert, kKey, kCa);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("--tls-key"), std::string::npos) << st.message();
}

TEST_F(AgentTlsTest, APrivateKeyThatIsNoPemIsInvalidArgument) {
  Put(kKey, "-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n", 0600);
  Status st = CheckTlsFiles(*host_, kCert, kKey, kCa);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("not a PEM private key"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(kKey), std::string::npos) << st.message();
}

}  // namespace
}  // namespace blockcsi
