#include "common/status.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "common/grpc_status.h"

namespace blockcsi {
namespace {

TEST(StatusTest, EveryCodeMapsToTheSameGrpcCodeAndBack) {
  for (int code = 1; code <= 16; ++code) {
    Status st(static_cast<StatusCode>(code), "volume vol-1: something");
    grpc::Status g = ToGrpcStatus(st);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(g.error_message(), "volume vol-1: something");
    Status back = FromGrpcStatus(g);
    EXPECT_EQ(back.code(), st.code());
    EXPECT_EQ(back.message(), st.message());
  }
  EXPECT_TRUE(ToGrpcStatus(OkStatus()).ok());
}

TEST(StatusTest, NamedCodesMatchTheGrpcEnum) {
  EXPECT_EQ(ToGrpcStatus(InvalidArgument("x")).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(NotFound("x")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(AlreadyExists("x")).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(ToGrpcStatus(FailedPrecondition("x")).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ToGrpcStatus(Aborted("x")).error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(ToGrpcStatus(OutOfRange("x")).error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(ToGrpcStatus(ResourceExhausted("x")).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(Unavailable("x")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToGrpcStatus(DeadlineExceeded("x")).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(ToGrpcStatus(Internal("x")).error_code(), grpc::StatusCode::INTERNAL);
}

TEST(StatusTest, ErrnoBecomesAStatusNamingTheObject) {
  Status st = ErrnoToStatus(ENOENT, "open /state/attachments/vol-1.json");
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("/state/attachments/vol-1.json"), std::string::npos);
  EXPECT_EQ(ErrnoToStatus(EEXIST, "x").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "x").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EBUSY, "x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrnoToStatus(ETIMEDOUT, "x").code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ErrnoToStatus(EACCES, "x").code(), StatusCode::kPermissionDenied);
}

TEST(StatusTest, StatusOrCarriesValueOrError) {
  StatusOr<int> good(42);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  StatusOr<int> bad(NotFound("volume vol-9 not found"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
}

TEST(StatusTest, WithContextKeepsCode) {
  Status st = NotFound("no such file").WithContext("volume vol-3");
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "volume vol-3: no such file");
  EXPECT_EQ(st.ToString(), "NOT_FOUND: volume vol-3: no such file");
}

// Issue #21: a 10 KB request field made a ~20 KB error the client could not
// receive (gRPC puts it in a header); NUL and newlines reached its logs raw.
TEST(GrpcStatusTest, MessagesAreBoundedAndEscapedOnTheWire) {
  grpc::Status big = ToGrpcStatus(InvalidArgument("volume \"" + std::string(20000, 'n') + "\" is bad"));
  EXPECT_EQ(big.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(big.error_message().size(), 2100u);
  EXPECT_NE(big.error_message().find("(20016 bytes)"), std::string::npos) << big.error_message().substr(2040);
  grpc::Status raw = ToGrpcStatus(NotFound(std::string("a\nb") + '\0' + "c"));
  EXPECT_EQ(raw.error_message(), "a\\x0ab\\x00c");
}

}  // namespace
}  // namespace blockcsi
