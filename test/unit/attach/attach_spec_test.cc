#include "attach/attach_spec.h"

#include <gtest/gtest.h>

#include "contract/initiator.h"
#include "contract/iscsi_names.h"
#include "contract/publish_context.h"

namespace blockcsi {
namespace {

const std::string kInitiator = InitiatorIqnForNode("worker-1");

std::map<std::string, std::string> GoodContext() {
  return {{publish_context::kPortals, "192.0.2.10:3260,[2001:db8::1]:3260,array-b.example.com:3261"},
          {publish_context::kTargetIqn, "iqn.2026-11.io.blockcsi:vol-7f3a9c2e"},
          {publish_context::kLun, "1"},
          {publish_context::kSerial, "bc7f3a9c2e41d08b"},
          {publish_context::kWwn, "6000000000000000000000007F3A9C2E"}};
}

StatusOr<AttachSpec> Parse(const std::map<std::string, std::string>& context,
                           const std::map<std::string, std::string>& secrets = {}) {
  return ParseAttachSpec("vol-1", context, secrets, kInitiator);
}

TEST(AttachSpecTest, ParsesAGoodContext) {
  auto spec = Parse(GoodContext());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->volume_id, "vol-1");
  EXPECT_EQ(spec->transport, "iscsi");
  EXPECT_EQ(spec->portals,
            (std::vector<std::string>{"192.0.2.10:3260", "[2001:db8::1]:3260", "array-b.example.com:3261"}));
  EXPECT_EQ(spec->target_iqn, "iqn.2026-11.io.blockcsi:vol-7f3a9c2e");
  EXPECT_EQ(spec->lun, 1);
  EXPECT_EQ(spec->expected_serial, "bc7f3a9c2e41d08b");
  EXPECT_EQ(spec->expected_wwn, "6000000000000000000000007f3a9c2e");  // normalised to lower case
  EXPECT_FALSE(spec->read_only);
  EXPECT_FALSE(spec->chap.enabled());
  EXPECT_EQ(spec->initiator_iqn, kInitiator);
}

struct BadCase {
  const char* key;
  const char* value;
  const char* message_part;
};

class AttachSpecRejects : public ::testing::TestWithParam<BadCase> {};

TEST_P(AttachSpecRejects, WithInvalidArgumentNamingTheProblem) {
  auto context = GoodContext();
  if (GetParam().value == nullptr) {
    context.erase(GetParam().key);
  } else {
    context[GetParam().key] = GetParam().value;
  }
  auto spec = Parse(context);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find(GetParam().message_part), std::string::npos) << spec.status().message();
  EXPECT_NE(spec.status().message().find("vol-1"), std::string::npos) << spec.status().message();
}

INSTANTIATE_TEST_SUITE_P(Cases, AttachSpecRejects,
                         ::testing::Values(BadCase{"portals", nullptr, "no portals"},
                                           BadCase{"portals", "192.0.2.10", "has no port"},
                                           BadCase{"portals", "192.0.2.10:0", "outside 1..65535"},
                                           BadCase{"portals", "192.0.2.10:70000", "outside 1..65535"},
                                           BadCase{"portals", "192.0.2.300:3260", "invalid IPv4"},
                                           BadCase{"portals", "2001:db8::1:3260", "without brackets"},
                                           BadCase{"portals", "[2001:db8::zz]:3260", "invalid IPv6"},
                                           BadCase{"portals", "[2001:db8::1]3260", "has no port"},
                                           BadCase{"portals", "bad_host!:3260", "invalid host name"},
                                           BadCase{"portals", "192.0.2.10:3260,,192.0.2.11:3260", "portal \"\""},
                                           BadCase{"portals", "192.0.2.10:3260,192.0.2.10:3260", "twice"},
                                           BadCase{"targetIqn", nullptr, "no targetIqn"},
                                           BadCase{"targetIqn", "iqn.2026-11.io.blockcsi:Vol", "lower-case"},
                                           BadCase{"targetIqn", "iqn.26-11.io.blockcsi:vol", "iqn.YYYY-MM."},
                                           BadCase{"targetIqn", "iqn.2026-13.io.blockcsi:vol", "month"},
                                           BadCase{"targetIqn", "iqn.2026-11..io:vol", "naming authority"},
                                           BadCase{"targetIqn", "eui.02004567A425678", "16 hex digits"},
                                           BadCase{"targetIqn", "target-1", "must start with iqn., eui. or naa."},
                                           BadCase{"lun", nullptr, "no lun"}, BadCase{"lun", "-1", "0..16383"},
                                           BadCase{"lun", "16384", "0..16383"}, BadCase{"lun", "1a", "0..16383"},
                                           BadCase{"serial", "has space", "printable ASCII"},
                                           BadCase{"wwn", "naa.6000000000000000000000007f3a9c2e", "wrong length"},
                                           BadCase{"wwn", "60000000000000000000000007f3a9cz", "not hexadecimal"},
                                           BadCase{"wwn", "3000000000000000000000007f3a9c2e", "NAA type"},
                                           BadCase{"readOnly", "yes", "\"true\" or \"false\""},
                                           BadCase{"transport", "nvme", "\"iscsi\" or \"rbd\""}));

TEST(AttachSpecTest, AcceptsEuiAndNaaNames) {
  auto context = GoodContext();
  context[publish_context::kTargetIqn] = "eui.02004567A425678D";
  EXPECT_TRUE(Parse(context).ok());
  context[publish_context::kTargetIqn] = "naa.52004567BA64678D";
  EXPECT_TRUE(Parse(context).ok());
}

TEST(AttachSpecTest, RequiresSomeIdentity) {
  auto context = GoodContext();
  context.erase(publish_context::kSerial);
  context.erase(publish_context::kWwn);
  auto spec = Parse(context);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("identity"), std::string::npos);
  context[publish_context::kWwn] = "3000000300000001";  // NAA 3 alone is enough
  EXPECT_TRUE(Parse(context).ok());
}

std::map<std::string, std::string> RbdContext() {
  return {{publish_context::kTransport, "rbd"},
          {publish_context::kRbdPool, "kube"},
          {publish_context::kRbdImage, "csi-vol-0123456789abcdef0123456789abcdef"},
          {publish_context::kRbdImageId, "10f2a6b8c4d1"},
          {publish_context::kCephMonitors, "[v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0]"},
          {publish_context::kCephUser, "blockcsi"},
          {publish_context::kReadOnly, "false"}};
}

TEST(AttachSpecTest, RbdTakesImageAndVerifiesItsId) {
  auto spec = Parse(RbdContext(), {{secret_keys::kCephUserKey, "AQBx3kRmAAAAABAAq0Tq9Hj7yJ0Xc2l5Z3VhcmQ="}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->transport, "rbd");
  EXPECT_EQ(spec->rbd.pool, "kube");
  EXPECT_EQ(spec->rbd.image, "csi-vol-0123456789abcdef0123456789abcdef");
  EXPECT_EQ(spec->rbd.monitors, "[v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0]");
  EXPECT_EQ(spec->rbd.user, "blockcsi");
  EXPECT_EQ(spec->rbd.key, "AQBx3kRmAAAAABAAq0Tq9Hj7yJ0Xc2l5Z3VhcmQ=");
  // The shared identity check compares the image id like a SCSI serial.
  EXPECT_EQ(spec->expected_serial, "10f2a6b8c4d1");
  EXPECT_TRUE(spec->portals.empty());
}

TEST(AttachSpecTest, RbdSecretUserOverridesAndBadValuesAreNamed) {
  auto spec = Parse(RbdContext(), {{secret_keys::kCephUserId, "client.node-rbd"}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->rbd.user, "node-rbd");
  EXPECT_TRUE(spec->rbd.key.empty());

  for (const char* key : {publish_context::kRbdPool, publish_context::kRbdImage, publish_context::kRbdImageId}) {
    auto context = RbdContext();
    context.erase(key);
    auto missing = Parse(context);
    ASSERT_FALSE(missing.ok()) << key;
    EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(missing.status().message().find(key), std::string::npos) << missing.status().message();
    context[key] = "bad name;rm";
    EXPECT_EQ(Parse(context).status().code(), StatusCode::kInvalidArgument) << key;
  }
  auto context = RbdContext();
  context[publish_context::kCephMonitors] = "10.0.0.1 ; reboot";
  EXPECT_EQ(Parse(context).status().code(), StatusCode::kInvalidArgument);
  auto bad_key = Parse(RbdContext(), {{secret_keys::kCephUserKey, "not base64 \n secret-value"}});
  ASSERT_FALSE(bad_key.ok());
  EXPECT_EQ(bad_key.status().message().find("secret-value"), std::string::npos);
}

TEST(AttachSpecTest, ReadOnlyAndChapFromSecrets) {
  auto context = GoodContext();
  context[publish_context::kReadOnly] = "true";
  context[publish_context::kChapRequired] = "true";
  auto spec = Parse(context, {{secret_keys::kChapUsername, "alice"},
                              {secret_keys::kChapPassword, "s3cret-pass-1"},
                              {secret_keys::kChapMutualUsername, "target-1"},
                              {secret_keys::kChapMutualPassword, "s3cret-pass-2"}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->read_only);
  EXPECT_EQ(spec->chap.username, "alice");
  EXPECT_EQ(spec->chap.password, "s3cret-pass-1");
  EXPECT_TRUE(spec->chap.mutual());
  EXPECT_EQ(spec->chap.mutual_password, "s3cret-pass-2");
}

TEST(AttachSpecTest, ChapRequiredWithoutSecretsIsRejected) {
  auto context = GoodContext();
  context[publish_context::kChapRequired] = "true";
  auto spec = Parse(context);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find(secret_keys::kChapUsername), std::string::npos);
}

TEST(AttachSpecTest, SecretsNeverAppearInErrors) {
  auto context = GoodContext();
  context[publish_context::kChapRequired] = "true";
  // A password with a control character is rejected, but not quoted.
  auto spec = Parse(context, {{secret_keys::kChapUsername, "alice"}, {secret_keys::kChapPassword, "topsecret\x01"}});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message().find("topsecret"), std::string::npos) << spec.status().message();
  EXPECT_NE(spec.status().message().find(secret_keys::kChapPassword), std::string::npos);
  // A mutual user without its password.
  spec = Parse(context, {{secret_keys::kChapUsername, "alice"},
                         {secret_keys::kChapPassword, "hunter2-hunter2"},
                         {secret_keys::kChapMutualUsername, "tgt"}});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message().find("hunter2"), std::string::npos);
  // Username without password.
  spec = Parse(context, {{secret_keys::kChapUsername, "alice"}});
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find(secret_keys::kChapPassword), std::string::npos);
}

// Issue #21: the node applies the rules the controller and the target do
// (chap_rules.h); a password without a user was silently ignored (no CHAP).
TEST(AttachSpecTest, StageSecretsFollowTheOneChapRuleSet) {
  auto context = GoodContext();
  auto password_only = Parse(context, {{secret_keys::kChapPassword, "s3cret-pass-12"}});
  ASSERT_FALSE(password_only.ok()) << "a password without a user must not mean \"no CHAP\"";
  EXPECT_EQ(password_only.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(password_only.status().message().find("vol-1"), std::string::npos);
  for (const std::string& user : {std::string("a,b"), std::string("u\nTarget 1: x"), std::string(256, 'u')}) {
    auto spec = Parse(context, {{secret_keys::kChapUsername, user}, {secret_keys::kChapPassword, "s3cret-pass-12"}});
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << user.substr(0, 10);
  }
  auto short_secret = Parse(context, {{secret_keys::kChapUsername, "alice"}, {secret_keys::kChapPassword, "6bytes"}});
  EXPECT_EQ(short_secret.status().code(), StatusCode::kInvalidArgument);
  auto ok = Parse(context, {{secret_keys::kChapUsername, "alice"}, {secret_keys::kChapPassword, "s3cret-pass-12"}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->chap.username, "alice");
}

TEST(AttachSpecTest, RejectsABadInitiatorName) {
  auto spec = ParseAttachSpec("vol-1", GoodContext(), {}, "not-an-iqn");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("initiator"), std::string::npos);
}

TEST(IscsiNamesTest, PortalToStringRoundTrips) {
  for (const char* text : {"192.0.2.10:3260", "[2001:db8::1]:3260", "array.example.com:860"}) {
    auto portal = ParsePortal(text);
    ASSERT_TRUE(portal.ok()) << text;
    EXPECT_EQ(portal->ToString(), text);
  }
  auto v6 = ParsePortal("[fe80::1]:3260");
  ASSERT_TRUE(v6.ok());
  EXPECT_TRUE(v6->ipv6);
  EXPECT_EQ(v6->host, "fe80::1");
  EXPECT_EQ(v6->port, 3260);
}

TEST(IscsiNamesTest, IqnLengthLimit) {
  std::string name = "iqn.2026-11.io.blockcsi:" + std::string(200, 'a');
  EXPECT_EQ(ValidateIscsiName(name).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateIscsiName(name.substr(0, 223)).ok());
}

}  // namespace
}  // namespace blockcsi
