#include "common/plain_http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <thread>

#include "common/logging.h"

namespace blockcsi {
namespace {

using SteadyClock = std::chrono::steady_clock;

// One client: what it sent that is not answered yet, and what is still to
// be written back. Owns its socket.
struct Connection {
  explicit Connection(int socket_fd) : fd(socket_fd) {}
  ~Connection() { ::close(fd); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd;
  std::string in;
  std::string out;
  size_t sent = 0;
  bool close_after_write = false;
  SteadyClock::time_point deadline;
};

struct Answer {
  int code = 200;
  std::string_view reason = "OK";
  std::string_view content_type = "text/plain; charset=utf-8";
  std::string body;
  bool head_only = false;  // HEAD: the headers of a GET, no body
  bool close = false;
};

std::string Render(const Answer& a) {
  std::string text = "HTTP/1.1 " + std::to_string(a.code) + " " + std::string(a.reason) + "\r\n";
  text += "Content-Type: " + std::string(a.content_type) + "\r\n";
  text += "Content-Length: " + std::to_string(a.body.size()) + "\r\n";
  if (a.code == 405) text += "Allow: GET, HEAD\r\n";
  if (a.close) text += "Connection: close\r\n";
  text += "\r\n";
  if (!a.head_only) text += a.body;
  return text;
}

Answer Error(int code, std::string_view reason) {
  Answer a;
  a.code = code;
  a.reason = reason;
  a.body = std::string(reason) + "\n";
  a.close = true;  // after a refused request the stream may be anywhere: start over
  return a;
}

// The value of header `name` (case-insensitive) in `head`, or "" when absent.
std::string_view HeaderValue(std::string_view head, std::string_view name) {
  size_t pos = head.find("\r\n");
  while (pos != std::string_view::npos && pos + 2 < head.size()) {
    size_t start = pos + 2;
    size_t end = head.find("\r\n", start);
    std::string_view line = head.substr(start, end == std::string_view::npos ? end : end - start);
    size_t colon = line.find(':');
    if (colon == name.size() && std::equal(name.begin(), name.end(), line.begin(), [](char x, char y) {
          return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
        })) {
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
      return value;
    }
    pos = end;
  }
  return {};
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// The answer to one complete request head (request line and headers,
// without the blank line that ends them).
Answer Handle(std::string_view head, const std::vector<PlainHttpRoute>& routes) {
  std::string_view line = head.substr(0, head.find("\r\n"));
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Error(400, "Bad Request");
  }
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return version.starts_with("HTTP/") ? Error(505, "HTTP Version Not Supported") : Error(400, "Bad Request");
  }
  if (target.empty() || target.front() != '/') return Error(400, "Bad Request");
  bool is_head = method == "HEAD";
  if (method != "GET" && !is_head) return Error(405, "Method Not Allowed");
  // A body is never read: its bytes would be taken for the next request.
  std::string_view length = HeaderValue(head, "Content-Length");
  if ((!length.empty() && length != "0") || !HeaderValue(head, "Transfer-Encoding").empty()) {
    return Error(413, "Payload Too Large");
  }
  std::string_view path = target.substr(0, target.find('?'));
  auto route = std::find_if(routes.begin(), routes.end(), [&](const PlainHttpRoute& r) { return r.path == path; });
  Answer a;
  if (route == routes.end()) {
    a = Error(404, "Not Found");
    a.close = false;  // a well-formed request: the connection stays usable
  } else {
    a.content_type = route->content_type;
    a.body = route->render();
  }
  a.head_only = is_head;
  std::string_view connection = HeaderValue(head, "Connection");
  a.close = a.close || version == "HTTP/1.0" || EqualsIgnoreCase(connection, "close");
  return a;
}

// A listening, non-blocking socket on host:port, or why there is none.
StatusOr<int> Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return Unavailable("cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  std::string why = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return Unavailable("cannot listen on " + host + ":" + service + ": " + why);
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

class Server final : public PlainHttpServer {
 public:
  Server(int listen_fd, int wake_fd, std::vector<PlainHttpRoute> routes, PlainHttpLimits limits)
      : listen_fd_(listen_fd), wake_fd_(wake_fd), routes_(std::move(routes)), limits_(limits) {
    port_ = BoundPort(listen_fd_);
    thread_ = std::thread([this] { Run(); });
  }
  ~Server() override {
    uint64_t one = 1;
    while (::write(wake_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    thread_.join();
    connections_.clear();
    ::close(wake_fd_);
    ::close(listen_fd_);
  }
  int port() const override { return port_; }

 private:
  void Run();
  int PollTimeoutMs() const;
  void Accept();
  bool Read(Connection& c);
  bool Write(Connection& c);
  void AnswerComplete(Connection& c);
  void CloseExpired();

  int listen_fd_;
  int wake_fd_;
  int port_ = 0;
  std::vector<PlainHttpRoute> routes_;
  PlainHttpLimits limits_;
  std::vector<std::unique_ptr<Connection>> connections_;  // the server thread's only
  std::thread thread_;
};

void Server::Run() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    // At the limit the listener is left alone: new clients wait in the backlog.
    bool accepting = static_cast<int>(connections_.size()) < limits_.max_connections;
    fds.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    for (const auto& c : connections_) {
      fds.push_back({c->fd, static_cast<short>(c->sent < c->out.size() ? POLLOUT : POLLIN), 0});
    }
    if (::poll(fds.data(), fds.size(), PollTimeoutMs()) < 0 && errno != EINTR) {
      LogError("metrics server: poll failed", {{"error", std::strerror(errno)}});
      return;
    }
    if (fds[0].revents != 0) return;
    // Connections first, by index: Accept appends to connections_.
    std::vector<bool> keep(connections_.size(), true);
    for (size_t i = 0; i < connections_.size(); ++i) {
      short events = fds[i + 2].revents;
      if (events == 0) continue;
      Connection& c = *connections_[i];
      keep[i] = c.sent < c.out.size() ? Write(c) : Read(c);
    }
    for (size_t k = keep.size(); k-- > 0;) {
      if (!keep[k]) connections_.erase(connections_.begin() + static_cast<ptrdiff_t>(k));
    }
    CloseExpired();
    if ((fds[1].revents & POLLIN) != 0) Accept();
  }
}

int Server::PollTimeoutMs() const {
  if (connections_.empty()) return -1;
  auto next = std::min_element(connections_.begin(), connections_.end(),
                               [](const auto& a, const auto& b) { return a->deadline < b->deadline; });
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>((*next)->deadline - SteadyClock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 60000));
}

void Server::Accept() {
  while (static_cast<int>(connections_.size()) < limits_.max_connections) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: no one else waits; anything else: the client is gone
    auto c = std::make_unique<Connection>(fd);
    c->deadline = SteadyClock::now() + limits_.idle_timeout;
    connections_.push_back(std::move(c));
  }
}

// false: close the connection.
bool Server::Read(Connection& c) {
  char buf[4096];
  ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  if (n == 0) return false;  // the client is done
  c.in.append(buf, static_cast<size_t>(n));
  c.deadline = SteadyClock::now() + limits_.idle_timeout;
  AnswerComplete(c);
  return c.out.empty() || Write(c);
}

// Answers the first complete request in `c.in`, or refuses one that grew
// past the limit. Pipelined requests after it wait until the answer is out.
void Server::AnswerComplete(Connection& c) {
  size_t end = c.in.find("\r\n\r\n");
  if (end == std::string::npos || end + 4 > limits_.max_request_bytes) {
    if (c.in.size() < limits_.max_request_bytes) return;  // not complete yet
    c.out = Render(Error(431, "Request Header Fields Too Large"));
    c.close_after_write = true;
  } else {
    Answer a = Handle(std::string_view(c.in).substr(0, end), routes_);
    c.out = Render(a);
    c.close_after_write = a.close;
    c.in.erase(0, end + 4);
  }
  c.sent = 0;
  if (c.close_after_write) c.in.clear();
}

// Writes what the socket takes now; then, when the answer is out, answers a
// pipelined request that already came. false: close the connection.
bool Server::Write(Connection& c) {
  for (;;) {
    while (c.sent < c.out.size()) {
      ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      c.sent += static_cast<size_t>(n);
      c.deadline = SteadyClock::now() + limits_.idle_timeout;
    }
    if (c.close_after_write) {
      // Our side closes first: a FIN after the answer, not a reset before the client read it.
      ::shutdown(c.fd, SHUT_WR);
      return false;
    }
    c.out.clear();
    c.out.shrink_to_fit();  // a connection kept open between scrapes holds no answer
    c.sent = 0;
    AnswerComplete(c);
    if (c.out.empty()) return true;
  }
}

void Server::CloseExpired() {
  auto now = SteadyClock::now();
  std::erase_if(connections_, [now](const std::unique_ptr<Connection>& c) { return c->deadline <= now; });
}

}  // namespace

StatusOr<std::unique_ptr<PlainHttpServer>> StartPlainHttpServer(const std::string& host, int port,
                                                                std::vector<PlainHttpRoute> routes,
                                                                PlainHttpLimits limits) {
  if (port < 0 || port > 65535) return InvalidArgument("port out of range: " + std::to_string(port));
  BLOCKCSI_ASSIGN_OR_RETURN(int listen_fd, Listen(host, port));
  int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    Status st = Unavailable(std::string("eventfd: ") + std::strerror(errno));
    ::close(listen_fd);
    return st;
  }
  return std::unique_ptr<PlainHttpServer>(std::make_unique<Server>(listen_fd, wake_fd, std::move(routes), limits));
}

}  // namespace blockcsi
