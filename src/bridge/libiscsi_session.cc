#include "bridge/libiscsi_session.h"

// libiscsi's headers are C and need these before them.
#include <stdint.h>
#include <sys/types.h>

extern "C" {
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
}

#include "bridge/libiscsi_event_loop.h"
#include "common/mutex.h"

namespace blockcsi {
namespace {

// A blocking caller's wait for its command's completion (which runs on the
// loop thread, always, and always within the command timeout).
struct Waiter {
  Mutex mu;
  CondVar cv;
  bool done GUARDED_BY(mu) = false;
  Status status GUARDED_BY(mu);
  // Written by the completion before `done`, read by the caller after it.
  std::string data;  // INQUIRY's page
  uint32_t block_length = 0;
  uint64_t blocks = 0;
  bool lbpme = false;
  bool lbprz = false;
};

std::unique_ptr<IscsiCommand> MakeCommand(IscsiCommand::Kind kind, Waiter* w) {
  auto c = std::make_unique<IscsiCommand>();
  c->kind = kind;
  c->done = [w, kind](Status st, scsi_task* task) {
    if (st.ok() && task != nullptr && kind == IscsiCommand::Kind::kInquiry) {
      w->data.assign(reinterpret_cast<const char*>(task->datain.data), static_cast<size_t>(task->datain.size));
    }
    if (st.ok() && task != nullptr && kind == IscsiCommand::Kind::kCapacity) {
      auto* rc16 = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(task));
      if (rc16 == nullptr) {
        st = Internal("cannot decode READ CAPACITY(16)");
      } else {
        w->block_length = rc16->block_length;
        w->blocks = rc16->returned_lba + 1;
        w->lbpme = rc16->lbpme != 0;
        w->lbprz = rc16->lbprz != 0;
      }
    }
    MutexLock lock(w->mu);
    w->status = std::move(st);
    w->done = true;
    w->cv.Signal();
  };
  return c;
}

Status Wait(Waiter* w) {
  MutexLock lock(w->mu);
  while (!w->done) w->cv.Wait(w->mu);
  return w->status;
}

// The blocking calls: on the loop's own thread the command could never run.
Status SubmitAndWait(LibIscsiEventLoop& loop, std::unique_ptr<IscsiCommand> c, Waiter* w) {
  if (loop.OnLoopThread()) return Internal("blocking iSCSI call on the session's own thread");
  loop.Submit(std::move(c));
  return Wait(w);
}

}  // namespace

StatusOr<std::unique_ptr<LibIscsiSession>> LibIscsiSession::Connect(const LibIscsiOptions& o) {
  std::unique_ptr<LibIscsiSession> s(new LibIscsiSession());
  BLOCKCSI_ASSIGN_OR_RETURN(s->loop_, LibIscsiEventLoop::Start(o, &s->portal_));
  s->target_iqn_ = o.target_iqn;
  BLOCKCSI_RETURN_IF_ERROR(s->RefreshCapacity());
  return s;
}

LibIscsiSession::~LibIscsiSession() { Close(); }

void LibIscsiSession::Close() {
  if (loop_) loop_->Close();
}

void LibIscsiSession::Watch(int fd, std::function<bool()> on_ready, std::function<void()> on_idle) {
  loop_->Watch(fd, std::move(on_ready), std::move(on_idle));
}

void LibIscsiSession::Unwatch() {
  if (loop_) loop_->Unwatch();
}

uint64_t LibIscsiSession::reconnects() const { return loop_ ? loop_->reconnects() : 0; }

uint64_t LibIscsiSession::drops() const { return loop_ ? loop_->drops() : 0; }

StatusOr<std::string> LibIscsiSession::InquiryVpd(int page) {
  Waiter w;
  auto c = MakeCommand(IscsiCommand::Kind::kInquiry, &w);
  c->page = page;
  BLOCKCSI_RETURN_IF_ERROR(SubmitAndWait(*loop_, std::move(c), &w));
  return std::move(w.data);
}

Status LibIscsiSession::RefreshCapacity() {
  Waiter w;
  BLOCKCSI_RETURN_IF_ERROR(SubmitAndWait(*loop_, MakeCommand(IscsiCommand::Kind::kCapacity, &w), &w));
  block_size_ = w.block_length;
  num_blocks_ = w.blocks;
  lbpme_ = w.lbpme;
  lbprz_ = w.lbprz;
  return OkStatus();
}

Status LibIscsiSession::Read(uint64_t lba, uint32_t blocks, void* buffer) {
  Waiter w;
  auto c = MakeCommand(IscsiCommand::Kind::kRead, &w);
  c->lba = lba;
  c->blocks = blocks;
  c->block_size = block_size();
  c->iov = {buffer, size_t{blocks} * c->block_size};
  return SubmitAndWait(*loop_, std::move(c), &w);
}

Status LibIscsiSession::Write(uint64_t lba, uint32_t blocks, const void* buffer) {
  Waiter w;
  auto c = MakeCommand(IscsiCommand::Kind::kWrite, &w);
  c->lba = lba;
  c->blocks = blocks;
  c->block_size = block_size();
  c->iov = {const_cast<void*>(buffer), size_t{blocks} * c->block_size};
  return SubmitAndWait(*loop_, std::move(c), &w);
}

Status LibIscsiSession::SynchronizeCache() {
  Waiter w;
  return SubmitAndWait(*loop_, MakeCommand(IscsiCommand::Kind::kSyncCache, &w), &w);
}

void LibIscsiSession::ReadAsync(uint64_t lba, uint32_t blocks, void* buffer, IscsiDone done) {
  auto c = std::make_unique<IscsiCommand>();
  c->kind = IscsiCommand::Kind::kRead;
  c->lba = lba;
  c->blocks = blocks;
  c->block_size = block_size();
  c->iov = {buffer, size_t{blocks} * c->block_size};
  c->done = [done = std::move(done)](Status st, scsi_task*) { done(std::move(st)); };
  loop_->Submit(std::move(c));
}

void LibIscsiSession::WriteAsync(uint64_t lba, uint32_t blocks, const void* buffer, IscsiDone done) {
  auto c = std::make_unique<IscsiCommand>();
  c->kind = IscsiCommand::Kind::kWrite;
  c->lba = lba;
  c->blocks = blocks;
  c->block_size = block_size();
  c->iov = {const_cast<void*>(buffer), size_t{blocks} * c->block_size};
  c->done = [done = std::move(done)](Status st, scsi_task*) { done(std::move(st)); };
  loop_->Submit(std::move(c));
}

void LibIscsiSession::SynchronizeCacheAsync(IscsiDone done) {
  auto c = std::make_unique<IscsiCommand>();
  c->kind = IscsiCommand::Kind::kSyncCache;
  c->done = [done = std::move(done)](Status st, scsi_task*) { done(std::move(st)); };
  loop_->Submit(std::move(c));
}

void LibIscsiSession::UnmapAsync(uint64_t lba, uint32_t blocks, IscsiDone done) {
  auto c = std::make_unique<IscsiCommand>();
  c->kind = IscsiCommand::Kind::kUnmap;
  c->lba = lba;
  c->blocks = blocks;
  c->done = [done = std::move(done)](Status st, scsi_task*) { done(std::move(st)); };
  loop_->Submit(std::move(c));
}

}  // namespace blockcsi
