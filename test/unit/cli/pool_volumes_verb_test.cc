// `blockctl pool-volumes` against an in-process agent on a unix socket that
// answers ListVolumes in two pages: every volume of every page is listed
// with its provisioned and allocated bytes, and the totals; a socket that
// is not an agent's is named as the likely mistake.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/verb.h"
#include "support/test_util.h"
#include "target.grpc.pb.h"

namespace blockcsi::cli {
namespace {

namespace tpb = ::blockcsi::target::v1;

constexpr uint64_t kMiB = 1ULL << 20;

// Two volumes on the first page, one on the second, as a pool of three
// answers with max_entries 2.
class TwoPageAgent final : public tpb::TargetAgent::Service {
 public:
  grpc::Status ListVolumes(grpc::ServerContext*, const tpb::ListVolumesRequest* request,
                           tpb::ListVolumesResponse* response) override {
    auto add = [&](const std::string& id, const std::string& name, uint64_t size, uint64_t allocated) {
      tpb::Volume* v = response->add_volumes();
      v->set_id(id);
      v->set_name(name);
      v->set_size_bytes(size);
      v->set_allocated_bytes(allocated);
    };
    if (request->start_token().empty()) {
      add("vol-a", "pvc-a", 1024 * kMiB, 256 * kMiB);
      add("vol-b", "pvc-b", 512 * kMiB, 0);
      response->set_next_token("vol-c");
    } else if (request->start_token() == "vol-c") {
      add("vol-c", "pvc-c", 2048 * kMiB, 2048 * kMiB);
    }
    return grpc::Status::OK;
  }
};

class PoolVolumesVerbTest : public ::testing::Test {
 protected:
  void Serve(grpc::Service* service) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  ~PoolVolumesVerbTest() override {
    if (server_) server_->Shutdown();
  }

  struct Result {
    int code;
    std::string out, err;
  };
  Result Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"blockctl", "--endpoint", "unix://" + socket_});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    std::ostringstream out, err;
    int code = RunBlockctl(static_cast<int>(argv.size()), argv.data(), out, err, MachineHost());
    return {code, out.str(), err.str()};
  }

  testing::TempDir dir_;
  std::string socket_ = dir_.Join("agent.sock");
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(PoolVolumesVerbTest, ListsEveryPageWithProvisionedAndAllocatedBytes) {
  TwoPageAgent agent;
  Serve(&agent);
  Result r = Run({"-o", "json", "pool-volumes"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u) << r.out;
  EXPECT_EQ(j[0]["volume"], "vol-a");
  EXPECT_EQ(j[0]["name"], "pvc-a");
  EXPECT_EQ(j[0]["provisioned_bytes"], std::to_string(1024 * kMiB));
  EXPECT_EQ(j[0]["allocated_bytes"], std::to_string(256 * kMiB));
  EXPECT_EQ(j[0]["allocated_of_provisioned"], "25.0%");
  EXPECT_EQ(j[1]["allocated_bytes"], "0");
  EXPECT_EQ(j[2]["volume"], "vol-c") << "the second page is listed too";
  EXPECT_EQ(j[2]["allocated_of_provisioned"], "100.0%");

  r = Run({"pool-volumes"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("256Mi"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("total: 3.5Gi provisioned, 2.2Gi allocated (64.3%)"), std::string::npos) << r.out;
}

TEST_F(PoolVolumesVerbTest, ASocketThatIsNotAnAgentsIsNamed) {
  tpb::TargetAgent::Service unimplemented;  // every call UNIMPLEMENTED, as another program's socket answers
  Serve(&unimplemented);
  Result r = Run({"pool-volumes"});
  EXPECT_EQ(r.code, kExitProblems);
  EXPECT_NE(r.err.find("is --endpoint the agent's --socket?"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace blockcsi::cli
