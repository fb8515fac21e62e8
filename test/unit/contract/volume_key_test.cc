#include "contract/volume_key.h"

#include <gtest/gtest.h>

namespace blockcsi {
namespace {

// base64 of the 32 bytes 0x00..0x1f, and of 0x20..0x3f.
constexpr char kKek[] = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
constexpr char kOtherKek[] = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

SecretBytes Kek(const char* text) {
  auto kek = ParseKeyEncryptionKey(text, "vol-1");
  EXPECT_TRUE(kek.ok()) << kek.status().message();
  return std::move(kek).value();
}

TEST(VolumeKeyTest, AWrappedKeyOpensUnderItsKekForItsVolumeOnly) {
  SecretBytes kek = Kek(kKek);
  auto data_key = NewDataKey();
  ASSERT_TRUE(data_key.ok());
  ASSERT_EQ(data_key->size(), kDataKeyBytes);
  auto wrapped = WrapDataKey(kek, *data_key, "vol-1");
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().message();
  EXPECT_EQ(wrapped->rfind("v1.", 0), 0u);
  EXPECT_EQ(wrapped->find(data_key->bytes()), std::string::npos);

  auto opened = UnwrapDataKey(kek, *wrapped, "vol-1");
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_EQ(opened->bytes(), data_key->bytes());

  auto other_volume = UnwrapDataKey(kek, *wrapped, "vol-2");
  EXPECT_EQ(other_volume.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other_volume.status().message().find("vol-2"), std::string::npos);
  auto other_kek = UnwrapDataKey(Kek(kOtherKek), *wrapped, "vol-1");
  EXPECT_EQ(other_kek.status().code(), StatusCode::kPermissionDenied);
}

TEST(VolumeKeyTest, TwoWrapsOfOneKeyDifferAndATamperedBlobDoesNotOpen) {
  SecretBytes kek = Kek(kKek);
  auto data_key = NewDataKey();
  ASSERT_TRUE(data_key.ok());
  auto first = WrapDataKey(kek, *data_key, "vol-1");
  auto second = WrapDataKey(kek, *data_key, "vol-1");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(*first, *second);  // a fresh nonce each time

  std::string tampered = *first;
  char& c = tampered[10];
  c = c == 'A' ? 'B' : 'A';
  EXPECT_EQ(UnwrapDataKey(kek, tampered, "vol-1").status().code(), StatusCode::kPermissionDenied);
}

TEST(VolumeKeyTest, MalformedInputIsInvalidArgumentAndNeverQuotesTheSecret) {
  for (const char* bad :
       {"", "short", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwd",
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=AAAA", "AAEC*wQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}) {
    auto kek = ParseKeyEncryptionKey(bad, "vol-7");
    ASSERT_EQ(kek.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(kek.status().message().find("encryptionKey"), std::string::npos);
    EXPECT_NE(kek.status().message().find("vol-7"), std::string::npos);
    if (*bad != '\0') {
      EXPECT_EQ(kek.status().message().find(bad), std::string::npos) << kek.status().message();
    }
  }
  // What `echo` leaves at the end of a hand-made Secret is forgiven.
  EXPECT_TRUE(ParseKeyEncryptionKey(std::string(kKek) + "\n", "vol-7").ok());

  SecretBytes kek = Kek(kKek);
  for (const char* bad : {"", "v1.", "v2.AAAA", "v1.AAAA", "v1.!!!!"}) {
    EXPECT_EQ(UnwrapDataKey(kek, bad, "vol-1").status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(VolumeKeyTest, AMovedFromSecretIsEmpty) {
  SecretBytes a(std::string(32, 'k'));
  SecretBytes b(std::move(a));
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_EQ(b.size(), 32u);
}

}  // namespace
}  // namespace blockcsi
