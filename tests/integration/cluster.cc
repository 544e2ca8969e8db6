#include "cluster.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#ifndef LTIER_BIN_DIR
#error "LTIER_BIN_DIR must point at the build's tools/ directory"
#endif

namespace lt::itest {

Proc::Proc(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    // A test killed (a ctest timeout) must not leave its manager behind:
    // nodes exit when their stdin closes, the manager does not read it.
    // (The signal follows the forking thread: tests make processes on the
    // thread that runs them.)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // it died before the prctl
    dup2(in[0], 0);
    dup2(out[1], 1);
    setpgid(0, 0);
    for (auto& e : env) putenv(strdup(e.c_str()));
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  in_ = in[1];
  out_ = out[0];
}

Proc::~Proc() {
  if (in_ >= 0) close(in_);
  if (!reaped_ && pid_ > 0) {
    if (wait_exit(3000) == -1) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  if (out_ >= 0) close(out_);
}

std::string Proc::read_line(int timeout_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    end - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      if (timeout_ms >= kHangMs) dump_stacks();
      return "TIMEOUT";
    }
    pollfd p{out_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char tmp[65536];
    ssize_t n = read(out_, tmp, sizeof(tmp));
    if (n <= 0) return "EOF";
    buf_.append(tmp, static_cast<size_t>(n));
  }
}

void Proc::dump_stacks() {
  // Once per test process: the node that did not answer, then every other
  // process this test started (the manager, the node's peers), since the
  // one stuck may be a peer.
  static bool dumped = false;
  if (dumped || pid_ <= 0 || access("/usr/bin/gdb", X_OK) != 0) return;
  dumped = true;
  const std::string bt =
      " -batch -ex 'thread apply all bt 40' 2>/dev/null | grep -E '^(#|Thread)' 1>&2";
  fprintf(stderr, "itest: pid %d gave no reply in time; its threads, then the others':\n",
          static_cast<int>(pid_));
  const std::string c = "/usr/bin/gdb -p " + std::to_string(pid_) + bt + "; for p in $(pgrep -P " +
                        std::to_string(getpid()) + "); do [ $p = " + std::to_string(pid_) +
                        " ] && continue; echo \"itest: pid $p\" 1>&2; /usr/bin/gdb -p $p" + bt +
                        "; done";
  if (std::system(c.c_str()) != 0) fprintf(stderr, "itest: gdb could not attach\n");
}

bool Proc::send(const std::string& line) {
  std::string l = line + "\n";
  return write(in_, l.data(), l.size()) == static_cast<ssize_t>(l.size());
}

std::string Proc::cmd(const std::string& line, int timeout_ms) {
  if (!send(line)) return "EOF";
  return read_line(timeout_ms);
}

void Proc::signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

bool Proc::wait_stopped(int timeout_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string path = "/proc/" + std::to_string(pid_) + "/stat";
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream f(path);
    std::string stat;
    std::getline(f, stat);
    // Field 3, after "pid (comm) ": 'T' is stopped.
    auto rp = stat.rfind(')');
    if (rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] == 'T') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

int Proc::wait_exit(int timeout_ms) {
  if (reaped_) return -1;
  if (in_ >= 0) {
    close(in_);
    in_ = -1;
  }
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (std::chrono::steady_clock::now() > end) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string Cluster::bin(const char* name) { return std::string(LTIER_BIN_DIR) + "/" + name; }

Cluster::Cluster(ClusterOptions o) : o_(std::move(o)) {
  start_manager(o_.manager_listen, o_.manager_args);
}

bool Cluster::start_manager(const std::string& listen, const std::vector<std::string>& extra) {
  char tmpl[] = "/tmp/ltier-itest-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd >= 0) close(fd);
  unlink(tmpl);
  port_file_ = tmpl;
  std::vector<std::string> argv = o_.manager_prefix;
  for (auto a : {bin("ltier-manager"), std::string("--listen"), listen, std::string("--secret"),
                 o_.secret, std::string("--down-after-ms"), std::to_string(o_.down_after_ms),
                 std::string("--port-file"), port_file_}) {
    argv.push_back(a);
  }
  for (auto& a : extra) argv.push_back(a);
  manager_ = std::make_unique<Proc>(argv, std::vector<std::string>{});
  std::string address;
  for (int i = 0; i < 500; ++i) {
    std::ifstream f(port_file_);
    if (f >> address) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  unlink(port_file_.c_str());
  if (!manager_address_.empty() && address != manager_address_) return false;
  manager_address_ = address;
  return !address.empty();
}

void Cluster::kill_manager() {
  if (!manager_) return;
  manager_->signal(SIGKILL);
  manager_->wait_exit(5000);
  manager_.reset();
}

bool Cluster::restart_manager(const std::vector<std::string>& extra) {
  kill_manager();
  // The same address: SO_REUSEADDR on the listener lets it bind again at
  // once although the old connections linger.
  return start_manager(manager_address_, extra);
}

Cluster::~Cluster() {
  for (auto& n : nodes_) {
    n->signal(SIGTERM);
  }
  nodes_.clear();
  if (manager_) manager_->signal(SIGTERM);
  manager_.reset();
}

Proc* Cluster::add_node(const std::vector<std::string>& extra_env,
                        const std::vector<std::string>& prefix, std::string* ready_line) {
  std::vector<std::string> env = {"LTIER_MANAGER=" + manager_address_, "LTIER_SECRET=" + o_.secret,
                                  "LTIER_TCP_LISTEN=127.0.0.1:0"};
  for (auto& e : extra_env) env.push_back(e);
  std::vector<std::string> argv = prefix;
  if (!prefix.empty()) {
    // `ip netns exec` does not pass our added environment through execvp's
    // child reliably; hand it over with env(1).
    argv.push_back("env");
    for (auto& e : env) argv.push_back(e);
  }
  argv.push_back(bin("ltier-node"));
  auto p = std::make_unique<Proc>(argv, env);
  std::string line = p->read_line(15000);
  if (ready_line) *ready_line = line;
  nodes_.push_back(std::move(p));
  if (line.rfind("ready ", 0) != 0) return nullptr;
  return nodes_.back().get();
}

std::string ok_value(const std::string& reply) {
  if (reply.rfind("ok ", 0) != 0) return "";
  return reply.substr(3);
}

std::string cmd_until_not(Proc* p, const std::string& line, const std::string& stale, int tries,
                          int gap_ms) {
  std::string r;
  for (int i = 0; i < tries; ++i) {
    r = p->cmd(line, 15000);
    if (r != stale) break;
    usleep(static_cast<useconds_t>(gap_ms) * 1000);
  }
  return r;
}

std::string id_of(Proc* p) { return ok_value(p->cmd("id")); }

long long tx_ops_to(Proc* p, const std::string& peer) {
  const std::string s = p->cmd("peers");
  const size_t at = s.find(" " + peer + ":");
  if (at == std::string::npos) return -1;
  const size_t tx = s.find("tx=", at);
  if (tx == std::string::npos) return -1;
  return std::atoll(s.c_str() + tx + 3);
}

std::string await_event(Proc* p, const std::string& kind, int timeout_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string r;
  while (std::chrono::steady_clock::now() < end) {
    r = p->cmd("event 1000");
    if (r.rfind("ok " + kind + " ", 0) == 0) return r;
  }
  return r;
}

bool lists(const std::string& nodes_reply, const std::string& id) {
  std::string padded = nodes_reply + " ";
  return padded.find(" " + id + " ") != std::string::npos;
}

int shell(const std::string& cmd) { return std::system(cmd.c_str()); }

}  // namespace lt::itest
