#include "backend/local/tgtd_socket.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/span.h"
#include "common/unique_fd.h"

namespace blockcsi {
namespace {

// tgt 1.0.x usr/tgtadm.h; the same layout tgtadm of Debian's tgt 1.0.85
// sends (checked against it by tgtd_socket_test, which runs both).
enum WireMode : int32_t { kSystem = 0, kTarget = 1, kDevice = 2, kSession = 5, kConnection = 6, kAccount = 7 };
enum WireOp : int32_t { kNew = 0, kDelete = 1, kShow = 2, kBind = 3, kUnbind = 4, kUpdate = 5 };

struct WireRequest {
  int32_t mode = -1;
  int32_t op = -1;
  char lld[64] = {};
  uint32_t len = 0;
  int32_t tid = -1;
  uint64_t sid = 0;
  uint64_t lun = std::numeric_limits<uint64_t>::max();
  uint32_t cid = 0;
  uint32_t host_no = 0;
  uint32_t device_type = 0;  // TYPE_DISK
  uint32_t ac_dir = 0;       // incoming
  uint32_t pack = 0;
  uint32_t force = 0;
};
static_assert(sizeof(WireRequest) == 120, "struct tgtadm_req of tgt 1.0.x is 120 bytes");

struct WireResponse {
  uint32_t err = 0;
  uint32_t len = 0;
};

// tgtadm's messages, indexed by tgtd's error number (usr/tgtadm_error.h).
constexpr const char* kErrors[] = {"success",
                                   "unknown error",
                                   "out of memory",
                                   "can't find the driver",
                                   "can't find the target",
                                   "can't find the logical unit",
                                   "can't find the session",
                                   "can't find the connection",
                                   "can't find the binding",
                                   "this target already exists",
                                   "this binding already exists",
                                   "this logical unit number already exists",
                                   "this access control rule already exists",
                                   "this access control rule does not exist",
                                   "this account already exists",
                                   "can't find the account",
                                   "too many accounts",
                                   "invalid request",
                                   "this target already has an outgoing account",
                                   "this target is still active",
                                   "this logical unit is still active",
                                   "this driver is busy",
                                   "this operation isn't supported",
                                   "unknown parameter",
                                   "this device has Prevent Removal set"};

// A show of thousands of targets is a few MB; anything far past that is
// not tgtd talking.
constexpr uint32_t kMaxReply = 256u << 20;

CommandResult Refused(const std::string& why) {
  CommandResult r;
  r.exit_code = EINVAL;
  r.stderr_text = "tgtadm: " + why + "\n";
  return r;
}

template <typename T>
bool ParseNumber(const std::string& s, T* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

struct Parsed {
  WireRequest request;
  int control_port = 0;
  std::string params;
};

// The options that become tgtd's "key=value,..." parameters.
struct ParamOptions {
  std::string name, value, path, target_name, address, initiator, user, password, target_ops;
  bool has_name = false;
};

// One option with its value `v`: into the request or the parameters.
// Returns "" or why it cannot.
std::string ParseOption(const std::string& key, const std::string& v, Parsed& p, ParamOptions& o) {
  if (key == "-C" || key == "--control-port") {
    if (!ParseNumber(v, &p.control_port) || p.control_port < 0 || p.control_port > 65535) return "bad control port";
  } else if (key == "--lld" || key == "-L") {
    if (v.size() >= sizeof p.request.lld) return "lld name too long";
    std::memcpy(p.request.lld, v.data(), v.size());
  } else if (key == "--op" || key == "-o") {
    static const std::pair<const char*, WireOp> ops[] = {{"new", kNew},   {"delete", kDelete}, {"show", kShow},
                                                         {"bind", kBind}, {"unbind", kUnbind}, {"update", kUpdate}};
    for (const auto& [n, op] : ops) {
      if (v == n) p.request.op = op;
    }
    if (p.request.op < 0) return "unknown operation " + v;
  } else if (key == "--mode" || key == "-m") {
    static const std::pair<const char*, WireMode> modes[] = {
        {"system", kSystem},   {"target", kTarget},         {"logicalunit", kDevice}, {"session", kSession},
        {"conn", kConnection}, {"connection", kConnection}, {"account", kAccount}};
    for (const auto& [n, mode] : modes) {
      if (v == n) p.request.mode = mode;
    }
    if (p.request.mode < 0) return "unknown mode " + v;
  } else if (key == "--tid" || key == "-t") {
    if (!ParseNumber(v, &p.request.tid) || p.request.tid < 0) return "bad tid";
  } else if (key == "--sid" || key == "-s") {
    if (!ParseNumber(v, &p.request.sid)) return "bad sid";
  } else if (key == "--cid" || key == "-c") {
    if (!ParseNumber(v, &p.request.cid)) return "bad cid";
  } else if (key == "--lun" || key == "-l") {
    if (!ParseNumber(v, &p.request.lun)) return "bad lun";
  } else if (key == "-b" || key == "--backing-store") {
    o.path = v;
  } else if (key == "-T" || key == "--targetname") {
    o.target_name = v;
  } else if (key == "-I" || key == "--initiator-address") {
    o.address = v;
  } else if (key == "-Q" || key == "--initiator-name") {
    o.initiator = v;
  } else if (key == "-u" || key == "--user") {
    o.user = v;
  } else if (key == "-p" || key == "--password") {
    o.password = v;
  } else if (key == "-P" || key == "--params") {
    o.target_ops = v;
  } else if (key == "-n" || key == "--name") {
    o.name = v;
    o.has_name = true;
  } else if (key == "-v" || key == "--value") {
    o.value = v;
  } else {
    return "unsupported option " + key;
  }
  return "";
}

void BuildParams(const ParamOptions& o, Parsed& p) {
  // The same parameters, in the same order, as tgtadm builds them.
  auto add = [&](const std::string& text) { p.params += (p.params.empty() ? "" : ",") + text; };
  if (o.has_name) add(o.name + "=" + o.value);
  if (!o.path.empty()) add("path=" + o.path);
  if (!o.target_name.empty()) add("targetname=" + o.target_name);
  if (!o.address.empty()) add("initiator-address=" + o.address);
  if (!o.initiator.empty()) add("initiator-name=" + o.initiator);
  if (!o.user.empty()) add("user=" + o.user);
  if (!o.password.empty()) add("password=" + o.password);
  if (!o.target_ops.empty()) add("targetOps " + o.target_ops + ",");
}

// tgtadm's command line → its request, option for option (usr/tgtadm.c).
// Returns "" or why it cannot.
std::string Parse(const Command& command, Parsed& p) {
  const auto& args = command.args();
  ParamOptions o;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& key = args[i].value;
    if (key == "--outgoing" || key == "-O") {
      p.request.ac_dir = 1;
      continue;
    }
    if (key == "--force" || key == "-F") {
      p.request.force = 1;
      continue;
    }
    if (i + 1 >= args.size()) return "option " + key + " needs a value";
    const std::string& v = args[++i].value;
    if (v.find('\0') != std::string::npos) return "a value of " + key + " has a NUL byte";
    // A comma would split tgtd's "key=value,..." parameters (the --params
    // value is itself such a list).
    if (key != "--params" && key != "-P" && v.find(',') != std::string::npos) {
      return "a value of " + key + " has a comma";
    }
    if (std::string why = ParseOption(key, v, p, o); !why.empty()) return why;
  }
  if (p.request.op < 0 || p.request.mode < 0) return "no --op or --mode";
  BuildParams(o, p);
  return "";
}

Status SendAll(int fd, const char* data, size_t size, const std::string& where) {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return DeadlineExceeded("send to " + where + " timed out");
    if (n <= 0) return ErrnoToStatus(errno, "send to " + where);
    data += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status RecvAll(int fd, char* data, size_t size, const std::string& where) {
  while (size > 0) {
    ssize_t n = ::recv(fd, data, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return DeadlineExceeded(where + " did not answer in time");
    if (n < 0) return ErrnoToStatus(errno, "receive from " + where);
    if (n == 0) return Unavailable(where + " closed the connection mid-answer");
    data += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace

StatusOr<CommandResult> TgtdSocketExecutor::Run(const Command& command) {
  const auto& args = command.args();
  const std::string& program = args.empty() ? std::string() : args.front().value;
  if (program != "tgtadm" && (program.size() < 7 || program.compare(program.size() - 7, 7, "/tgtadm") != 0)) {
    return InvalidArgument("the tgtd socket runs tgtadm commands only, not " + program);
  }
  Parsed parsed;
  if (std::string why = Parse(command, parsed); !why.empty()) return Refused(why);
  // The request's mode and op in the detail ("1/2": target show), so that a
  // debug log tells a slow delete from a slow listing.
  Span span("tgtd_socket", std::to_string(parsed.request.mode) + "/" + std::to_string(parsed.request.op));
  std::string body = parsed.params;
  if (!body.empty()) body.push_back('\0');  // tgtadm sends the trailing NUL
  parsed.request.len = static_cast<uint32_t>(sizeof(WireRequest) + body.size());

  const std::string path = socket_dir_ + "/socket." + std::to_string(parsed.control_port);
  const std::string where = "tgtd on control port " + std::to_string(parsed.control_port);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return InvalidArgument("tgtd socket path " + path + " is too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoToStatus(errno, "socket for " + where);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(command.timeout().count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((command.timeout().count() % 1000) * 1000);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Unavailable(where + " does not answer: connect " + path + ": " + std::strerror(errno));
  }
  BLOCKCSI_RETURN_IF_ERROR(
      SendAll(fd.get(), reinterpret_cast<const char*>(&parsed.request), sizeof parsed.request, where));
  BLOCKCSI_RETURN_IF_ERROR(SendAll(fd.get(), body.data(), body.size(), where));

  WireResponse response;
  BLOCKCSI_RETURN_IF_ERROR(RecvAll(fd.get(), reinterpret_cast<char*>(&response), sizeof response, where));
  CommandResult result;
  if (response.err != 0) {
    constexpr size_t kKnown = sizeof kErrors / sizeof kErrors[0];
    return Refused(response.err < kKnown ? std::string(kErrors[response.err])
                                         : "(unknown tgtadm_errno " + std::to_string(response.err) + ")");
  }
  if (response.len < sizeof response || response.len > kMaxReply) {
    return Internal(where + " sent a reply of " + std::to_string(response.len) + " bytes");
  }
  std::string text(response.len - sizeof response, '\0');
  BLOCKCSI_RETURN_IF_ERROR(RecvAll(fd.get(), text.data(), text.size(), where));
  while (!text.empty() && text.back() == '\0') text.pop_back();
  result.exit_code = 0;
  result.stdout_text = std::move(text);
  return result;
}

}  // namespace blockcsi
