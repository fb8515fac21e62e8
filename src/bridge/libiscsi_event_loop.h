// LibIscsiEventLoop: the thread behind a LibIscsiSession. It owns the
// libiscsi context, takes commands from any thread, keeps up to the queue
// depth of them in flight and runs their completions. Internal to
// libiscsi_session.cc; not an interface of its own.
#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bridge/libiscsi_session.h"
#include "common/mutex.h"

struct iscsi_context;
struct scsi_task;

namespace blockcsi {

// One SCSI command, from Submit until its completion ran.
struct IscsiCommand {
  enum class Kind { kRead, kWrite, kSyncCache, kInquiry, kCapacity, kUnmap };
  Kind kind = Kind::kRead;
  uint64_t lba = 0;
  uint32_t blocks = 0;
  uint32_t block_size = 512;
  void* buffer = nullptr;
  int page = 0;
  // Runs once on the loop thread; `task` is the GOOD task (for its data-in)
  // or null on error, and is freed after `done` returns.
  std::function<void(Status, ::scsi_task* task)> done;
  // Set by the loop: the whole command (queueing, retries) ends by then.
  std::chrono::steady_clock::time_point deadline;
  int unit_attentions = 0;
  ::scsi_task* task = nullptr;  // while in flight
  int status = 0;               // from libiscsi's callback
  bool completed = false;
  // Where READ(16)/WRITE(16) data goes: libiscsi keeps the pointer until
  // the command completes, so it lives here, not on a stack.
  struct {
    void* base;
    size_t len;
  } iov{};
  // UNMAP's one block descriptor (lba, blocks), likewise.
  struct {
    uint64_t lba;
    uint32_t num;
  } unmap{};
};

class LibIscsiEventLoop {
 public:
  // Logs in with the first portal that answers (codes as in
  // LibIscsiSession::Connect) and starts the thread; *portal names the one.
  static StatusOr<std::unique_ptr<LibIscsiEventLoop>> Start(const LibIscsiOptions& options, std::string* portal);
  ~LibIscsiEventLoop();
  LibIscsiEventLoop(const LibIscsiEventLoop&) = delete;
  LibIscsiEventLoop& operator=(const LibIscsiEventLoop&) = delete;

  // Queues the command; after Close its completion runs at once, here.
  // From the loop thread itself (a completion, a watched fd's handler) it
  // goes straight to the queue: no lock, no wake-up.
  void Submit(std::unique_ptr<IscsiCommand> command);
  bool OnLoopThread() const;
  // Another descriptor this thread serves between its commands (the
  // bridge's /dev/fuse): `on_ready` runs here when `fd` is readable and
  // returns false once the descriptor is done (it is then no longer
  // polled). `on_idle` runs here when a poll timed out with no command
  // queued or in flight (about a second after the last one). One at a
  // time; Unwatch returns once neither is running and never runs again
  // (from any thread, the loop's own included).
  using WatchHandler = std::function<bool()>;
  void Watch(int fd, WatchHandler on_ready, std::function<void()> on_idle);
  void Unwatch();
  // Fails what was not sent, lets what is in flight finish (within its
  // deadline), logs out and joins the thread. Idempotent.
  void Close();
  uint64_t reconnects() const { return reconnects_.load(); }
  // Connections dropped (by the target, the network or a timeout) since the
  // loop started, whether or not a re-login followed.
  uint64_t drops() const { return drops_.load(); }
  // "<target> lun <n>", for messages.
  std::string Name() const;

 private:
  explicit LibIscsiEventLoop(LibIscsiOptions options) : options_(std::move(options)) {}
  static void* ThreadMain(void* self);
  void Run();
  bool TakeSubmitted();  // false once closing
  void Dispatch();
  // Puts queued PDUs on the wire now rather than after one more poll.
  void SendQueued();
  void ServeWatched();
  void Reconnect();
  void ServiceOnce();
  void ExpireDeadlines();
  void FinishCompleted();
  void Complete(std::unique_ptr<IscsiCommand> command, Status st);
  // Destroys the context; every command in flight completes with `why`.
  void DropContext(const std::string& why);
  void FailAllPending(const Status& st);
  void Shutdown();
  std::unique_ptr<IscsiCommand> TakeInFlight(IscsiCommand* command);
  Status TaskError(const IscsiCommand& command);
  static void OnTaskDone(::iscsi_context* ctx, int status, void* command_data, void* private_data);

  LibIscsiOptions options_;
  std::string portal_;
  std::atomic<uint64_t> reconnects_{0};
  std::atomic<uint64_t> drops_{0};
  int wake_fd_ = -1;  // eventfd: Submit and Close wake the loop
  pthread_t thread_{};
  bool thread_started_ = false;

  Mutex mu_;
  std::vector<std::unique_ptr<IscsiCommand>> submitted_ GUARDED_BY(mu_);
  bool closing_ GUARDED_BY(mu_) = false;
  bool closed_ GUARDED_BY(mu_) = false;  // the thread has ended
  CondVar watch_cv_;
  int watch_fd_ GUARDED_BY(mu_) = -1;
  WatchHandler watch_handler_ GUARDED_BY(mu_);
  std::function<void()> watch_idle_ GUARDED_BY(mu_);
  uint64_t watch_version_ GUARDED_BY(mu_) = 0;  // bumped by Watch/Unwatch
  uint64_t watch_seen_ GUARDED_BY(mu_) = 0;     // the version the loop took
  bool loop_ended_ GUARDED_BY(mu_) = false;

  // The loop thread's own, touched by nobody else while it runs.
  ::iscsi_context* ctx_ = nullptr;  // null after a dropped session
  std::deque<std::unique_ptr<IscsiCommand>> pending_;
  std::vector<std::unique_ptr<IscsiCommand>> in_flight_;
  std::vector<IscsiCommand*> completed_;  // filled by OnTaskDone
  std::string drop_reason_;
  bool woken_ = true;  // the eventfd was readable at the last poll
  int fd_ = -1;        // the watched descriptor, as the loop took it
  WatchHandler on_ready_;
  std::function<void()> on_idle_;
  bool watched_active_ = false;  // the descriptor was served since on_idle last ran
};

}  // namespace blockcsi
