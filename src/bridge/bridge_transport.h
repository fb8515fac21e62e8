// BridgeTransport: what the userspace bridge (`blockcsi bridge`) serves as
// its FUSE file — one volume reached over iSCSI (libiscsi) or RBD (librbd).
// The bridge owns FUSE, the loop device and the control socket; a transport
// owns the connection to the storage. Offsets and lengths of Read/Write are
// multiples of block_size() (the bridge does the read-modify-write for
// anything else). Thread-safe: the bridge calls Read/Write/Flush (and their
// async forms) from several threads at once and the control calls from another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "common/lun_identity.h"
#include "common/status.h"

namespace blockcsi {

class BridgeTransport {
 public:
  virtual ~BridgeTransport() = default;

  // "iscsi" | "rbd", for the status reply and messages.
  virtual std::string name() const = 0;
  // Where the volume is reached from, for the status reply and the record
  // ("10.0.0.1:3260", "rbd/csi-vol-…"). Never a secret.
  virtual std::string location() const = 0;
  virtual uint32_t block_size() const = 0;
  virtual uint64_t size_bytes() const = 0;

  virtual Status Read(uint64_t offset, size_t length, char* out) = 0;
  virtual Status Write(uint64_t offset, size_t length, const char* in) = 0;
  // Makes every completed write durable.
  virtual Status Flush() = 0;
  // The same three with a completion: `done` runs exactly once, on any
  // thread (it must not block), possibly before the call returns; buffers
  // stay valid until then. Several may be in flight at once. The defaults
  // run the blocking call in the caller's thread.
  using Done = std::function<void(Status)>;
  virtual void ReadAsync(uint64_t offset, size_t length, char* out, Done done) {
    Done finish = std::move(done);
    finish(Read(offset, length, out));
  }
  virtual void WriteAsync(uint64_t offset, size_t length, const char* in, Done done) {
    Done finish = std::move(done);
    finish(Write(offset, length, in));
  }
  virtual void FlushAsync(Done done) {
    Done finish = std::move(done);
    finish(Flush());
  }
  // Lets the thread that runs the completions also serve `fd` (the
  // bridge's /dev/fuse, non-blocking): `on_ready` runs there when fd is
  // readable and returns false once it is done; `on_idle` runs there when
  // nothing was in flight for a while. A request is then read,
  // sent and replied to on one thread. False: the transport has no such
  // thread and the bridge reads fd on its own. On that thread the blocking
  // Read/Write/Flush fail; the async ones are what it may call.
  // By value: an override keeps both callbacks (the sink idiom); this default keeps none.
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  virtual bool Watch(int /*fd*/, std::function<bool()> /*on_ready*/, std::function<void()> /*on_idle*/) {
    return false;
  }
  // After Watch: returns once on_ready is not running and never will again.
  virtual void Unwatch() {}
  // Deallocates [offset, offset + length) so that it reads back as zeros:
  // fallocate PUNCH_HOLE, which is what the loop device makes of a discard
  // and of a write-zeroes. Block-aligned; only called when can_punch_hole(),
  // which is fixed once the transport is open. Errors as for writes, within
  // the same timeouts.
  virtual bool can_punch_hole() const { return false; }
  virtual void PunchHoleAsync(uint64_t /*offset*/, uint64_t /*length*/, Done done) {
    Done finish = std::move(done);
    finish(Unimplemented(name() + " cannot deallocate"));
  }
  // What the loop device should align discards to, in bytes: the storage's
  // allocation unit (a multiple of block_size()).
  virtual uint32_t discard_granularity() const { return block_size(); }
  // Re-reads the volume's size (after a resize); size_bytes() follows.
  virtual Status RefreshSize() = 0;
  // The identity the shared check (VerifyLunIdentity) compares with the
  // published one: SCSI VPD pages, or the RBD image id as the serial.
  virtual StatusOr<LunIdentity> ReadIdentity() = 0;
  // OK, or a lasting condition the node must report (VolumeCondition), e.g.
  // "this client was fenced". Transient I/O errors are the bridge's to count.
  virtual Status Health() const = 0;
  // Releases the connection (best effort); the destructor calls it too.
  virtual void Close() = 0;
  // Sessions re-established after a drop since the transport opened, for
  // the bridge's I/O figures. Transports whose library reconnects out of
  // our sight (librados) report 0.
  virtual uint64_t reconnects() const { return 0; }
  // Connections dropped since the transport opened, re-established or not:
  // the node plugin reads them to ask at once whether it was fenced.
  // Transports that see no drops (librados) report 0; theirs show in Health.
  virtual uint64_t connection_drops() const { return 0; }
};

}  // namespace blockcsi
