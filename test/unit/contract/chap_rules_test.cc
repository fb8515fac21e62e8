// The one CHAP rule set: every limit of chap_rules.h at its edge, and
// that no message ever carries a value.
#include "contract/chap_rules.h"

#include <gtest/gtest.h>

#include "contract/publish_context.h"

namespace blockcsi {
namespace {

constexpr char kGoodUser[] = "node-a.user@example:1";
constexpr char kGoodSecret[] = "s3cret-pass-12";
constexpr char kOtherSecret[] = "other-pass-345";

Status Check(const ChapCredentials& c) { return ValidateChapCredentials(c, "volume vol-1: CHAP"); }

// The code is INVALID_ARGUMENT, the message names the volume and the
// field, and holds no value of the credentials.
void ExpectRefused(const ChapCredentials& c, const char* field) {
  Status st = Check(c);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("vol-1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  EXPECT_LT(st.message().size(), 300u) << st.message();
  for (const std::string* v : {&c.username, &c.password, &c.mutual_username, &c.mutual_password}) {
    if (v->size() >= 4) {
      EXPECT_EQ(st.message().find(*v), std::string::npos) << st.message();
    }
  }
}

TEST(ChapRulesTest, AcceptsNoChapOneWayAndMutual) {
  EXPECT_TRUE(Check({}).ok());
  EXPECT_TRUE(Check({kGoodUser, kGoodSecret, "", ""}).ok());
  EXPECT_TRUE(Check({kGoodUser, kGoodSecret, "target-user", kOtherSecret}).ok());
  EXPECT_TRUE(Check({"u", std::string(255, 'x'), "", ""}).ok());
  EXPECT_TRUE(Check({std::string(255, 'a'), "!#$%&()*+-./:;<>?@[]^_`{|}~", "", ""}).ok());
}

TEST(ChapRulesTest, UserNamesThatForgeTgtadmOutputOrSplitItsRequestAreRefused) {
  using namespace secret_keys;  // NOLINT(google-build-using-namespace)
  // The probe: a newline with a fake target block, a fake account
  // list, a comma (tgtadm's "user=..,password=.." separator), '='.
  for (const std::string& user :
       {std::string("evil\nTarget 3: iqn.2026-11.io.blockcsi:vol-0000000000000003"),
        std::string("user4\nAccount list:\n    ghost"), std::string("a,b"), std::string("a=b"), std::string("a b"),
        std::string("a\tb"), std::string("a\"b"), std::string("a'b"), std::string(1, '\0') + "nul",
        std::string("-leading-dash"), std::string(".dot"), std::string("caf\xc3\xa9"), std::string("a\rb")}) {
    SCOPED_TRACE(user);
    ExpectRefused({user, kGoodSecret, "", ""}, kChapUsername);
    ExpectRefused({kGoodUser, kGoodSecret, user, kOtherSecret}, kChapMutualUsername);
  }
  ExpectRefused({std::string(10 * 1024, 'u'), kGoodSecret, "", ""}, kChapUsername);
  ExpectRefused({std::string(256, 'u'), kGoodSecret, "", ""}, kChapUsername);
}

TEST(ChapRulesTest, SecretsOutOfBoundsOrWithSeparatorsAreRefused) {
  using namespace secret_keys;  // NOLINT(google-build-using-namespace)
  ExpectRefused({kGoodUser, "6bytes", "", ""}, kChapPassword);
  ExpectRefused({kGoodUser, std::string(11, 'p'), "", ""}, kChapPassword);
  ExpectRefused({kGoodUser, std::string(10 * 1024, 'p'), "", ""}, kChapPassword);
  ExpectRefused({kGoodUser, std::string(256, 'p'), "", ""}, kChapPassword);
  for (const std::string& secret :
       {std::string("long-enough,pw"), std::string("long-enough=pw"), std::string("long enough pw"),
        std::string("long-enough\npw"), std::string("long-enough\"pw"), std::string("long-enough\\pw"),
        std::string("long-enough") + std::string(1, '\0') + "pw"}) {
    SCOPED_TRACE(secret);
    ExpectRefused({kGoodUser, secret, "", ""}, kChapPassword);
    ExpectRefused({kGoodUser, kGoodSecret, "target-user", secret}, kChapMutualPassword);
  }
}

TEST(ChapRulesTest, HalfAPairIsRefusedNeverDowngraded) {
  using namespace secret_keys;  // NOLINT(google-build-using-namespace)
  // The issue: an empty user name with a password was granted with CHAP off.
  ExpectRefused({"", kGoodSecret, "", ""}, kChapPassword);
  ExpectRefused({kGoodUser, "", "", ""}, kChapUsername);
  ExpectRefused({kGoodUser, kGoodSecret, "target-user", ""}, kChapMutualUsername);
  ExpectRefused({kGoodUser, kGoodSecret, "", kOtherSecret}, kChapMutualPassword);
  ExpectRefused({"", "", "target-user", kOtherSecret}, kChapMutualUsername);
  // RFC 3720 §8.2.1: one secret may not authenticate both directions.
  ExpectRefused({kGoodUser, kGoodSecret, "target-user", kGoodSecret}, kChapMutualPassword);
}

TEST(ChapRulesTest, NameRuleIsTheOneTheTgtadmParserUses) {
  EXPECT_TRUE(IsValidChapName("alice"));
  EXPECT_TRUE(IsValidChapName("iqn.2026-11.io.blockcsi:node:n1"));
  EXPECT_FALSE(IsValidChapName(""));
  EXPECT_FALSE(IsValidChapName("alice (outgoing)"));
  EXPECT_FALSE(IsValidChapName(std::string(256, 'a')));
}

}  // namespace
}  // namespace blockcsi
