#include "bridge/libiscsi_event_loop.h"

// libiscsi's headers are C and need these before them.
#include <stdint.h>
#include <sys/types.h>

extern "C" {
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
}

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "bridge/libiscsi_login.h"
#include "common/logging.h"

namespace blockcsi {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The loop thread's stack: its deepest chain is a completion (a FUSE reply)
// or a CHAP login, far from glibc's 8 MiB default; a node runs one such
// thread per session of every volume.
constexpr size_t kLoopStackBytes = size_t{256} * 1024;
// Commands queued in libiscsi but not yet on the wire (past the target's
// CmdSN window, or behind a partly written PDU): the loop queues no more
// while this many wait there.
constexpr int kOutQueueSlack = 4;
// A target reports UNIT ATTENTION once per event (power on, reset, LUN
// change) per I_T nexus; a few retries always get past it.
constexpr int kUnitAttentionRetries = 5;
// How long the watched descriptor must be quiet, with no command out,
// before on_idle runs.
constexpr int kIdleAfterActivityMs = 100;

// The loop whose thread this is (null on every other thread): Submit from
// a completion or a watched descriptor's handler skips the lock and the
// wake-up, and blocking calls there are refused instead of deadlocking.
thread_local const LibIscsiEventLoop* t_running_loop = nullptr;

const char* CommandName(IscsiCommand::Kind kind) {
  switch (kind) {
    case IscsiCommand::Kind::kRead:
      return "READ(16)";
    case IscsiCommand::Kind::kWrite:
      return "WRITE(16)";
    case IscsiCommand::Kind::kSyncCache:
      return "SYNCHRONIZE CACHE";
    case IscsiCommand::Kind::kInquiry:
      return "INQUIRY VPD";
    case IscsiCommand::Kind::kCapacity:
      return "READ CAPACITY(16)";
    case IscsiCommand::Kind::kUnmap:
      return "UNMAP";
  }
  return "SCSI command";
}

scsi_task* QueueTask(iscsi_context* ctx, int lun, IscsiCommand* c, iscsi_command_cb cb) {
  auto* iov = reinterpret_cast<scsi_iovec*>(&c->iov);
  int block_size = static_cast<int>(c->block_size);
  uint32_t bytes = c->blocks * c->block_size;
  switch (c->kind) {
    case IscsiCommand::Kind::kRead:
      // Data-In lands straight in the caller's buffer: no allocation and
      // copy inside libiscsi.
      return iscsi_read16_iov_task(ctx, lun, c->lba, bytes, block_size, 0, 0, 0, 0, 0, cb, c, iov, 1);
    case IscsiCommand::Kind::kWrite:
      return iscsi_write16_iov_task(ctx, lun, c->lba, nullptr, bytes, block_size, 0, 0, 0, 0, 0, cb, c, iov, 1);
    case IscsiCommand::Kind::kSyncCache:
      return iscsi_synchronizecache10_task(ctx, lun, 0, 0, 0, 0, cb, c);
    case IscsiCommand::Kind::kInquiry:
      return iscsi_inquiry_task(ctx, lun, 1, c->page, 255, cb, c);
    case IscsiCommand::Kind::kCapacity:
      return iscsi_readcapacity16_task(ctx, lun, cb, c);
    case IscsiCommand::Kind::kUnmap:
      c->unmap = {c->lba, c->blocks};
      return iscsi_unmap_task(ctx, lun, 0, 0, reinterpret_cast<unmap_list*>(&c->unmap), 1, cb, c);
  }
  return nullptr;
}

}  // namespace

static_assert(sizeof(IscsiCommand{}.iov) == sizeof(scsi_iovec), "IscsiCommand::iov mirrors scsi_iovec");
static_assert(sizeof(IscsiCommand{}.unmap) == sizeof(unmap_list), "IscsiCommand::unmap mirrors unmap_list");

StatusOr<std::unique_ptr<LibIscsiEventLoop>> LibIscsiEventLoop::Start(const LibIscsiOptions& o, std::string* portal) {
  if (o.portals.empty()) return InvalidArgument("no portal to log in to");
  std::unique_ptr<LibIscsiEventLoop> loop(new LibIscsiEventLoop(o));
  std::vector<std::string> failures;
  StatusCode worst = StatusCode::kUnavailable;
  for (const std::string& p : o.portals) {
    std::string error;
    loop->ctx_ = LoginToPortal(o, p, &error);
    if (loop->ctx_ != nullptr) {
      loop->portal_ = p;
      break;
    }
    StatusCode code = LoginFailureCode(error);
    if (code != StatusCode::kUnavailable) worst = code;
    failures.push_back(p + ": " + error);
    LogWarn("iSCSI login failed", {{"portal", p}, {"target", o.target_iqn}, {"error", error}});
  }
  if (loop->ctx_ == nullptr) return LoginFailure(o, failures, worst);
  *portal = loop->portal_;
  loop->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (loop->wake_fd_ < 0) return ErrnoToStatus(errno, "eventfd for the iSCSI session");
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kLoopStackBytes);
  int rc = pthread_create(&loop->thread_, &attr, &LibIscsiEventLoop::ThreadMain, loop.get());
  pthread_attr_destroy(&attr);
  if (rc != 0) return ErrnoToStatus(rc, "start the iSCSI session thread");
  loop->thread_started_ = true;
  return loop;
}

LibIscsiEventLoop::~LibIscsiEventLoop() {
  Close();
  if (ctx_ != nullptr) iscsi_destroy_context(ctx_);  // a loop whose thread never started
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

std::string LibIscsiEventLoop::Name() const { return options_.target_iqn + " lun " + std::to_string(options_.lun); }

void* LibIscsiEventLoop::ThreadMain(void* self) {
  auto* loop = static_cast<LibIscsiEventLoop*>(self);
  t_running_loop = loop;
  loop->Run();
  return nullptr;
}

bool LibIscsiEventLoop::OnLoopThread() const { return t_running_loop == this; }

void LibIscsiEventLoop::Submit(std::unique_ptr<IscsiCommand> command) {
  command->deadline = Clock::now() + options_.command_timeout;
  if (OnLoopThread()) {
    // Dispatched before this thread polls again; during Shutdown it is
    // failed with the rest of the queue.
    pending_.push_back(std::move(command));
    return;
  }
  {
    MutexLock lock(mu_);
    if (!closing_) {
      submitted_.push_back(std::move(command));
      uint64_t one = 1;
      // The eventfd counter only grows; a full counter still wakes the loop.
      (void)!::write(wake_fd_, &one, sizeof one);
      return;
    }
  }
  command->done(FailedPrecondition("session to " + Name() + " is closed"), nullptr);
}

void LibIscsiEventLoop::Close() {
  {
    MutexLock lock(mu_);
    if (closed_) return;
    closing_ = true;
    closed_ = true;
    if (wake_fd_ >= 0) {
      uint64_t one = 1;
      (void)!::write(wake_fd_, &one, sizeof one);
    }
  }
  if (thread_started_) pthread_join(thread_, nullptr);
}

void LibIscsiEventLoop::Watch(int fd, WatchHandler on_ready, std::function<void()> on_idle) {
  if (OnLoopThread()) {
    fd_ = fd;
    on_ready_ = on_ready;
    on_idle_ = on_idle;
  }
  MutexLock lock(mu_);
  watch_fd_ = fd;
  watch_handler_ = std::move(on_ready);
  watch_idle_ = std::move(on_idle);
  watch_seen_ = OnLoopThread() ? watch_version_ + 1 : watch_seen_;
  ++watch_version_;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void LibIscsiEventLoop::Unwatch() {
  if (OnLoopThread()) {
    fd_ = -1;
    on_ready_ = nullptr;
    on_idle_ = nullptr;
  }
  MutexLock lock(mu_);
  watch_fd_ = -1;
  watch_handler_ = nullptr;
  watch_idle_ = nullptr;
  uint64_t version = ++watch_version_;
  if (OnLoopThread() || !thread_started_) {
    watch_seen_ = version;
    return;
  }
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  // The loop takes the change between two polls, never inside the handler.
  while (watch_seen_ < version && !loop_ended_) watch_cv_.Wait(mu_);
}

bool LibIscsiEventLoop::TakeSubmitted() {
  if (woken_) {
    uint64_t count = 0;
    (void)!::read(wake_fd_, &count, sizeof count);
    woken_ = false;
  }
  MutexLock lock(mu_);
  for (auto& c : submitted_) pending_.push_back(std::move(c));
  submitted_.clear();
  if (watch_seen_ != watch_version_) {
    fd_ = watch_fd_;
    on_ready_ = watch_handler_;
    on_idle_ = watch_idle_;
    watch_seen_ = watch_version_;
    watch_cv_.SignalAll();
  }
  return !closing_;
}

void LibIscsiEventLoop::Run() {
  while (TakeSubmitted()) {
    if (!pending_.empty() && ctx_ == nullptr) Reconnect();
    Dispatch();
    FinishCompleted();
    ServiceOnce();
    FinishCompleted();
    ExpireDeadlines();
    FinishCompleted();
  }
  fd_ = -1;
  on_ready_ = nullptr;
  on_idle_ = nullptr;
  Shutdown();
  MutexLock lock(mu_);
  loop_ended_ = true;
  watch_cv_.SignalAll();
}

void LibIscsiEventLoop::Reconnect() {
  std::string error;
  ctx_ = LoginToPortal(options_, portal_, &error);
  if (ctx_ == nullptr) {
    FailAllPending(Unavailable("iSCSI re-login to " + options_.target_iqn + " at " + portal_ + " failed: " + error));
    return;
  }
  ++reconnects_;
  LogInfo("iSCSI session re-established", {{"target", options_.target_iqn}, {"portal", portal_}});
}

void LibIscsiEventLoop::Dispatch() {
  int cap = std::max(1, options_.queue_depth);
  while (ctx_ != nullptr && !pending_.empty() && static_cast<int>(in_flight_.size()) < cap &&
         iscsi_out_queue_length(ctx_) < kOutQueueSlack) {
    std::unique_ptr<IscsiCommand> c = std::move(pending_.front());
    pending_.pop_front();
    c->completed = false;
    c->task = QueueTask(ctx_, options_.lun, c.get(), &LibIscsiEventLoop::OnTaskDone);
    if (c->task == nullptr) {
      Status st =
          Unavailable(std::string(CommandName(c->kind)) + " on " + Name() + ": cannot queue: " + IscsiError(ctx_));
      Complete(std::move(c), st);
      DropContext(st.message());
      return;
    }
    in_flight_.push_back(std::move(c));
  }
}

void LibIscsiEventLoop::ServiceOnce() {
  auto now = Clock::now();
  // Wake at least every 250 ms while commands are out (libiscsi scans for
  // timed-out PDUs and drives its reconnect only from iscsi_service), and
  // now and then when idle, for NOP-Ins.
  bool idle = in_flight_.empty() && pending_.empty();
  milliseconds wait = idle ? milliseconds(1000) : milliseconds(250);
  // After activity on the watched descriptor, on_idle comes soon (what it
  // releases is only worth keeping while requests follow each other).
  if (idle && watched_active_ && on_idle_) wait = milliseconds(kIdleAfterActivityMs);
  for (const auto& c : in_flight_) {
    wait = std::min(wait, std::chrono::duration_cast<milliseconds>(c->deadline - now) + milliseconds(1));
  }
  for (const auto& c : pending_) {
    wait = std::min(wait, std::chrono::duration_cast<milliseconds>(c->deadline - now) + milliseconds(1));
  }
  wait = std::max(wait, milliseconds(0));
  pollfd fds[3] = {{wake_fd_, POLLIN, 0}, {-1, 0, 0}, {fd_, POLLIN, 0}};
  int events = ctx_ != nullptr ? iscsi_which_events(ctx_) : 0;
  if (ctx_ != nullptr && events != 0) {
    fds[1] = {iscsi_get_fd(ctx_), static_cast<short>(events), 0};
  } else if (ctx_ != nullptr) {
    wait = std::min(wait, milliseconds(100));  // libiscsi asks for a pause (a reconnect in progress)
  }
  int ready = ::poll(fds, 3, static_cast<int>(wait.count()));
  if (ready < 0 && errno != EINTR) LogWarn("iSCSI session poll failed", {{"error", std::strerror(errno)}});
  woken_ = ready > 0 && fds[0].revents != 0;
  if (ctx_ != nullptr && iscsi_service(ctx_, ready > 0 ? fds[1].revents : 0) < 0) DropContext(IscsiError(ctx_));
  if (ready > 0 && fds[2].revents != 0) ServeWatched();
  if (ready == 0 && on_idle_ && in_flight_.empty() && pending_.empty()) {
    watched_active_ = false;
    on_idle_();
  }
}

void LibIscsiEventLoop::ServeWatched() {
  // Replies first: they free the kernel's slots for the next requests.
  FinishCompleted();
  watched_active_ = true;
  if (on_ready_ && !on_ready_()) {
    fd_ = -1;
    on_ready_ = nullptr;
    on_idle_ = nullptr;
  }
  // What the handler submitted goes out now, not after another poll.
  Dispatch();
  SendQueued();
}

void LibIscsiEventLoop::SendQueued() {
  if (ctx_ == nullptr) return;
  int events = iscsi_which_events(ctx_);
  if ((events & POLLOUT) == 0) return;
  // Only when the socket says so: POLLOUT also means "connect finished"
  // to libiscsi while a connection is being made.
  pollfd pfd{iscsi_get_fd(ctx_), static_cast<short>(events), 0};
  if (::poll(&pfd, 1, 0) <= 0) return;
  if (iscsi_service(ctx_, pfd.revents) < 0) DropContext(IscsiError(ctx_));
}

void LibIscsiEventLoop::ExpireDeadlines() {
  auto now = Clock::now();
  for (const auto& c : in_flight_) {
    if (!c->completed && c->deadline <= now) {
      std::string why =
          std::string(CommandName(c->kind)) + " on " + Name() + " did not complete within the command timeout";
      // The session is in an unknown state: start over on the next command.
      LogWarn("iSCSI command failed; the session will be re-established",
              {{"target", options_.target_iqn}, {"error", why}});
      DropContext(why);
      break;
    }
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    if ((*it)->deadline > now) {
      ++it;
      continue;
    }
    std::unique_ptr<IscsiCommand> c = std::move(*it);
    it = pending_.erase(it);
    std::string what = CommandName(c->kind);
    Complete(std::move(c), Unavailable(what + " on " + Name() + " was not sent within the command timeout"));
  }
}

void LibIscsiEventLoop::OnTaskDone(iscsi_context*, int status, void*, void* private_data) {
  // Only note it: the task is freed, retried or handed on outside
  // libiscsi's call chain.
  auto* c = static_cast<IscsiCommand*>(private_data);
  c->status = status;
  c->completed = true;
}

std::unique_ptr<IscsiCommand> LibIscsiEventLoop::TakeInFlight(IscsiCommand* command) {
  auto it = std::find_if(in_flight_.begin(), in_flight_.end(), [&](const auto& c) { return c.get() == command; });
  std::unique_ptr<IscsiCommand> c = std::move(*it);
  in_flight_.erase(it);
  return c;
}

void LibIscsiEventLoop::FinishCompleted() {
  bool drop = false;
  std::string drop_why;
  for (size_t i = 0; i < in_flight_.size();) {
    if (!in_flight_[i]->completed) {
      ++i;
      continue;
    }
    std::unique_ptr<IscsiCommand> c = TakeInFlight(in_flight_[i].get());
    if (c->status == SCSI_STATUS_CANCELLED) {
      if (c->task != nullptr) scsi_free_scsi_task(c->task);
      c->task = nullptr;
      std::string why = std::string(CommandName(c->kind)) + " on " + Name() + ": " +
                        (drop_reason_.empty() ? "the session was dropped" : drop_reason_);
      Complete(std::move(c), Unavailable(why));
      continue;
    }
    if (c->status == SCSI_STATUS_CHECK_CONDITION && c->task->sense.key == SCSI_SENSE_UNIT_ATTENTION &&
        c->unit_attentions < kUnitAttentionRetries) {
      scsi_free_scsi_task(c->task);
      c->task = nullptr;
      ++c->unit_attentions;
      pending_.push_front(std::move(c));
      continue;
    }
    if (c->status != SCSI_STATUS_GOOD) {
      bool transport_error = c->status != SCSI_STATUS_CHECK_CONDITION && c->status != SCSI_STATUS_BUSY &&
                             c->status != SCSI_STATUS_RESERVATION_CONFLICT;
      Status st = TaskError(*c);
      if (transport_error) {
        drop = true;
        drop_why = st.message();
      }
      Complete(std::move(c), st);
      continue;
    }
    bool short_read = c->kind == IscsiCommand::Kind::kRead && c->task->residual_status == SCSI_RESIDUAL_UNDERFLOW &&
                      c->task->residual > 0;
    Complete(std::move(c), short_read ? Unavailable("short READ(16) from " + options_.target_iqn) : OkStatus());
  }
  if (drop) DropContext(drop_why);
}

Status LibIscsiEventLoop::TaskError(const IscsiCommand& c) {
  std::string detail;
  if (c.task != nullptr && c.status == SCSI_STATUS_CHECK_CONDITION) {
    detail = std::string("check condition: ") + scsi_sense_key_str(c.task->sense.key) + " / " +
             scsi_sense_ascq_str(c.task->sense.ascq);
  } else {
    detail = ctx_ != nullptr ? IscsiError(ctx_) : "status " + std::to_string(c.status);
  }
  return Unavailable(std::string(CommandName(c.kind)) + " on " + Name() + " failed: " + detail);
}

void LibIscsiEventLoop::Complete(std::unique_ptr<IscsiCommand> c, Status st) {
  scsi_task* task = c->task;
  c->task = nullptr;
  bool ok = st.ok();
  c->done(std::move(st), ok ? task : nullptr);
  if (task != nullptr) scsi_free_scsi_task(task);
}

void LibIscsiEventLoop::DropContext(const std::string& why) {
  if (ctx_ == nullptr) return;
  ++drops_;
  drop_reason_ = why;
  // Outstanding tasks complete (cancelled) inside destroy; FinishCompleted
  // frees them and fails their commands.
  iscsi_destroy_context(ctx_);
  ctx_ = nullptr;
  for (auto& c : in_flight_) {
    if (!c->completed) {
      c->completed = true;
      c->status = SCSI_STATUS_CANCELLED;
    }
  }
  FinishCompleted();
  drop_reason_.clear();
}

void LibIscsiEventLoop::FailAllPending(const Status& st) {
  while (!pending_.empty()) {
    std::unique_ptr<IscsiCommand> c = std::move(pending_.front());
    pending_.pop_front();
    Complete(std::move(c), st);
  }
}

void LibIscsiEventLoop::Shutdown() {
  Status closed = FailedPrecondition("session to " + Name() + " is closed");
  {
    MutexLock lock(mu_);
    for (auto& c : submitted_) pending_.push_back(std::move(c));
    submitted_.clear();
  }
  FailAllPending(closed);
  // What is on the wire finishes (or meets its deadline) first: a write the
  // caller was told nothing about must not vanish silently.
  while (!in_flight_.empty() && ctx_ != nullptr) {
    ServiceOnce();
    FinishCompleted();
    ExpireDeadlines();
    FinishCompleted();
    FailAllPending(closed);  // unit-attention retries
  }
  if (ctx_ == nullptr) return;
  // Logout must not block teardown for long when the target is gone.
  iscsi_set_timeout(ctx_, 5);
  iscsi_set_reconnect_max_retries(ctx_, 0);
  iscsi_logout_sync(ctx_);
  iscsi_destroy_context(ctx_);
  ctx_ = nullptr;
}

}  // namespace blockcsi
