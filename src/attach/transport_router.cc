#include "attach/transport_router.h"

#include <utility>
#include <vector>

#include "common/logging.h"

namespace blockcsi {
namespace {

class TransportRouter final : public Connector {
 public:
  TransportRouter(std::string family, std::map<std::string, std::unique_ptr<Connector>> routes)
      : family_(std::move(family)), routes_(std::move(routes)) {}

  std::string family() const override { return family_; }

  void Prepare(const AttachSpec& spec, AttachRecord* record) override {
    // An unserved transport fails in Connect, where an error can be returned.
    if (Connector* c = Route(spec.transport)) c->Prepare(spec, record);
  }

  StatusOr<ConnectResult> Connect(const AttachSpec& spec, AttachRecord* record) override {
    BLOCKCSI_ASSIGN_OR_RETURN(Connector * c, RouteOrError(spec.volume_id, spec.transport));
    return c->Connect(spec, record);
  }

  Status Disconnect(const AttachRecord& record) override {
    Connector* c = Route(record.transport);
    // Nothing can have been attached for a transport no connector serves
    // (Connect refused it), so the record of such an attempt is just removed.
    if (c == nullptr) {
      LogWarn("attach record of a transport this node does not serve; nothing to disconnect",
              {{"volume_id", record.volume_id}, {"transport", record.transport}});
      return OkStatus();
    }
    return c->Disconnect(record);
  }

  StatusOr<LunIdentity> ReadIdentity(const AttachRecord& record) override {
    BLOCKCSI_ASSIGN_OR_RETURN(Connector * c, RouteOrError(record.volume_id, record.transport));
    return c->ReadIdentity(record);
  }

  StatusOr<uint64_t> Rescan(AttachRecord* record) override {
    BLOCKCSI_ASSIGN_OR_RETURN(Connector * c, RouteOrError(record->volume_id, record->transport));
    return c->Rescan(record);
  }

  AttachHealth Check(const AttachRecord& record) override {
    auto c = RouteOrError(record.volume_id, record.transport);
    if (!c.ok()) return {true, c.status().message()};
    return (*c)->Check(record);
  }

  Status Reconcile(std::vector<AttachRecord>* records) override {
    // Every inner connector reconciles, also with no record of its
    // transport: each reports the orphans of its own kind.
    Status first;
    for (auto& [transport, connector] : routes_) {
      std::vector<size_t> index;
      std::vector<AttachRecord> mine;
      for (size_t i = 0; i < records->size(); ++i) {
        if (Normalize((*records)[i].transport) == transport) {
          index.push_back(i);
          mine.push_back((*records)[i]);
        }
      }
      Status st = connector->Reconcile(&mine);
      if (!st.ok()) {
        LogWarn("reconciling attach records", {{"transport", transport}, {"error", st.ToString()}});
        if (first.ok()) first = st;
      }
      // Inner connectors refresh records in place; they do not add or drop any.
      for (size_t k = 0; k < index.size() && k < mine.size(); ++k) (*records)[index[k]] = std::move(mine[k]);
    }
    for (const auto& r : *records) {
      if (Route(r.transport) == nullptr) {
        LogWarn("attach record of a transport this node does not serve",
                {{"volume_id", r.volume_id}, {"transport", r.transport}});
      }
    }
    return first;
  }

 private:
  static std::string Normalize(const std::string& transport) { return transport.empty() ? "iscsi" : transport; }

  Connector* Route(const std::string& transport) const {
    auto it = routes_.find(Normalize(transport));
    return it == routes_.end() ? nullptr : it->second.get();
  }

  StatusOr<Connector*> RouteOrError(const std::string& volume_id, const std::string& transport) const {
    if (Connector* c = Route(transport)) return c;
    std::string served;
    for (const auto& [t, c] : routes_) served += (served.empty() ? "" : ", ") + t;
    return InvalidArgument("volume \"" + volume_id + "\": transport \"" + transport +
                           "\" is not served by this node's \"" + family_ + "\" connector (it serves " + served + ")");
  }

  const std::string family_;
  const std::map<std::string, std::unique_ptr<Connector>> routes_;
};

}  // namespace

std::unique_ptr<Connector> MakeTransportRouter(std::string family,
                                               std::map<std::string, std::unique_ptr<Connector>> by_transport) {
  return std::make_unique<TransportRouter>(std::move(family), std::move(by_transport));
}

}  // namespace blockcsi
