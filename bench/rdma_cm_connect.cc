// rdma_cm_connect: how long a warm process takes to reach a new peer with
// rdma_cm and complete a first exchange with it, the raw peer of
// `ltier-perf --new-peer` (a warm engine's first LT_RPC to a node that just
// joined). No ltier code.
//
// The client makes `tries + 1` connections, one after another, each to a
// server process of its own started for it (this program again, with
// --serve), as each of ltier-perf's new peers is a fresh node: the server
// listens, tells the client so, and after kSettleMs (ltier-perf's wait for a
// new node to finish starting) the client connects. The first connection
// warms the client up: librdmacm opens the devices, and the protection
// domain, completion queue and registered buffer it makes are kept for the
// later connections, as a middleware keeps them. Each later connection is
// timed from rdma_create_id to the completion of the server's answer to an
// 8-byte SEND: address and route resolution, the QP, the connection
// manager's exchange (REQ, REP, RTU) and one round trip.
//
//   rdma_cm_connect [--port 18517] [--tries N] SERVER_IP
//   rdma_cm_connect --serve [--port 18517] SERVER_IP   (one connection, then exits)
//
// The client prints
//   connect op=first_exchange tries=N p50_us=X p90_us=Y
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

constexpr int kEventTimeoutMs = 20000;
constexpr int kPollTimeoutMs = 20000;
constexpr size_t kMsg = 8;
constexpr int kSettleMs = 200;

struct Options {
  std::string server;
  int port = 18517, tries = 20;
  bool serve = false;
};

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "rdma_cm_connect: %s: %s\n", what, errno != 0 ? strerror(errno) : "failed");
  exit(1);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--port" || a == "--tries") && i + 1 < argc) {
      (a == "--port" ? o.port : o.tries) = std::atoi(argv[++i]);
    } else if (a == "--serve") {
      o.serve = true;
    } else if (a[0] != '-' && o.server.empty()) {
      o.server = a;
    } else {
      o.server.clear();  // the usage below
      break;
    }
  }
  if (o.server.empty()) {
    fprintf(stderr,
            "usage: rdma_cm_connect [--port P] [--tries N] SERVER_IP\n"
            "       rdma_cm_connect --serve [--port P] SERVER_IP\n");
    exit(2);
  }
  if (o.tries < 1) o.tries = 1;
  return o;
}

// The next event on the channel, which must be `want` (it is acked here;
// the id it names is returned).
rdma_cm_id* expect_event(rdma_event_channel* ec, rdma_cm_event_type want) {
  pollfd p{ec->fd, POLLIN, 0};
  if (poll(&p, 1, kEventTimeoutMs) != 1) die("no connection manager event in time");
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ec, &ev) != 0) die("rdma_get_cm_event");
  const rdma_cm_event_type got = ev->event;
  rdma_cm_id* id = ev->id;
  const int status = ev->status;
  rdma_ack_cm_event(ev);
  if (got != want) {
    fprintf(stderr, "rdma_cm_connect: expected %s, got %s (status %d)\n", rdma_event_str(want),
            rdma_event_str(got), status);
    exit(1);
  }
  return id;
}

// What the first connection makes and the later ones reuse.
struct Verbs {
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  char buf[2 * kMsg] = {};
};

void make_verbs(ibv_context* ctx, Verbs* v) {
  if (v->pd != nullptr) return;
  if ((v->pd = ibv_alloc_pd(ctx)) == nullptr) die("ibv_alloc_pd");
  if ((v->cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0)) == nullptr) die("ibv_create_cq");
  v->mr = ibv_reg_mr(v->pd, v->buf, sizeof(v->buf), IBV_ACCESS_LOCAL_WRITE);
  if (v->mr == nullptr) die("ibv_reg_mr");
}

void make_qp(rdma_cm_id* id, Verbs* v) {
  ibv_qp_init_attr a{};
  a.send_cq = v->cq;
  a.recv_cq = v->cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 4;
  a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  if (rdma_create_qp(id, v->pd, &a) != 0) die("rdma_create_qp");
}

void post_recv(rdma_cm_id* id, Verbs* v) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(v->buf + kMsg), kMsg, v->mr->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (ibv_post_recv(id->qp, &wr, &bad) != 0) die("ibv_post_recv");
}

void post_send(rdma_cm_id* id, Verbs* v) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(v->buf), kMsg, v->mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 2;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(id->qp, &wr, &bad) != 0) die("ibv_post_send");
}

// Busy-polls until `n` successful completions came.
void await(Verbs* v, int n) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kPollTimeoutMs);
  while (n > 0) {
    ibv_wc wc[4];
    int k = ibv_poll_cq(v->cq, 4, wc);
    if (k < 0) die("ibv_poll_cq");
    for (int i = 0; i < k; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        fprintf(stderr, "rdma_cm_connect: completion %s\n", ibv_wc_status_str(wc[i].status));
        exit(1);
      }
    }
    n -= k;
    if (n > 0 && std::chrono::steady_clock::now() > end) die("no completion in time");
  }
}

void hang_up(rdma_event_channel* ec, rdma_cm_id* id) {
  rdma_disconnect(id);
  expect_event(ec, RDMA_CM_EVENT_DISCONNECTED);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

// One connection, then returns. The device's PD, CQ and buffer are made
// before it listens (bound to the server's address, the listener knows its
// device), as a node makes them when it joins.
void serve(const Options& o, rdma_event_channel* ec) {
  rdma_cm_id* listener = nullptr;
  if (rdma_create_id(ec, &listener, nullptr, RDMA_PS_TCP) != 0) die("rdma_create_id");
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(o.port));
  if (inet_pton(AF_INET, o.server.c_str(), &sin.sin_addr) != 1) die("the address to bind");
  if (rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&sin)) != 0) die("rdma_bind_addr");
  if (listener->verbs == nullptr) die("no RDMA device has that address");
  Verbs v;
  make_verbs(listener->verbs, &v);
  if (rdma_listen(listener, 4) != 0) die("rdma_listen");
  if (write(1, "L", 1) != 1) die("telling the client");  // listening
  rdma_cm_id* id = expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST);
  make_qp(id, &v);
  post_recv(id, &v);
  rdma_conn_param p{};
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.rnr_retry_count = 7;
  if (rdma_accept(id, &p) != 0) die("rdma_accept");
  expect_event(ec, RDMA_CM_EVENT_ESTABLISHED);
  await(&v, 1);  // the client's message
  post_send(id, &v);
  await(&v, 1);
  expect_event(ec, RDMA_CM_EVENT_DISCONNECTED);  // the client hangs up
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_id(listener);
}

// Starts a fresh server on `port` and returns once it listens.
pid_t start_server(const std::string& ip, int port) {
  int p[2];
  if (pipe(p) != 0) die("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_addclose(&fa, p[0]);
  std::string exe = "/proc/self/exe", ps = std::to_string(port);
  std::string addr = ip;
  char serve[] = "--serve", flag[] = "--port";
  char* argv[] = {exe.data(), serve, flag, ps.data(), addr.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv, environ) != 0) die("starting a server");
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  char c = 0;
  pollfd w{p[0], POLLIN, 0};
  if (poll(&w, 1, kEventTimeoutMs) != 1 || read(p[0], &c, 1) != 1 || c != 'L') {
    die("a server did not start listening");
  }
  close(p[0]);
  return pid;
}

// One connection and its first exchange, in microseconds.
double connect_once(rdma_event_channel* ec, const addrinfo* dst, Verbs* v) {
  const auto t0 = std::chrono::steady_clock::now();
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(ec, &id, nullptr, RDMA_PS_TCP) != 0) die("rdma_create_id");
  if (rdma_resolve_addr(id, nullptr, dst->ai_addr, 2000) != 0) die("rdma_resolve_addr");
  expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED);
  if (rdma_resolve_route(id, 2000) != 0) die("rdma_resolve_route");
  expect_event(ec, RDMA_CM_EVENT_ROUTE_RESOLVED);
  make_verbs(id->verbs, v);
  make_qp(id, v);
  post_recv(id, v);
  rdma_conn_param p{};
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.retry_count = 7;
  p.rnr_retry_count = 7;
  if (rdma_connect(id, &p) != 0) die("rdma_connect");
  expect_event(ec, RDMA_CM_EVENT_ESTABLISHED);
  post_send(id, v);
  await(v, 2);  // our send and the server's answer
  const std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - t0;
  hang_up(ec, id);
  return d.count();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  rdma_event_channel* ec = rdma_create_event_channel();
  if (ec == nullptr) die("rdma_create_event_channel");
  if (o.serve) {
    serve(o, ec);
    rdma_destroy_event_channel(ec);
    return 0;
  }
  Verbs v;
  std::vector<double> us;
  for (int t = 0; t <= o.tries; ++t) {
    const int port = o.port + t % 64;  // a listener's port may linger a moment after it exits
    addrinfo hints{}, *dst = nullptr;
    hints.ai_family = AF_INET;
    if (getaddrinfo(o.server.c_str(), std::to_string(port).c_str(), &hints, &dst) != 0) {
      die("getaddrinfo");
    }
    const pid_t server = start_server(o.server, port);
    std::this_thread::sleep_for(std::chrono::milliseconds(kSettleMs));
    const double d = connect_once(ec, dst, &v);
    if (t > 0) us.push_back(d);  // the first warms the process up
    freeaddrinfo(dst);
    int status = 0;
    if (waitpid(server, &status, 0) != server || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      die("a server failed");
    }
  }
  std::sort(us.begin(), us.end());
  auto pct = [&us](double p) { return us[static_cast<size_t>(p / 100.0 * (us.size() - 1))]; };
  printf("connect op=first_exchange tries=%zu p50_us=%.1f p90_us=%.1f\n", us.size(), pct(50),
         pct(90));
  rdma_destroy_event_channel(ec);
  return 0;
}
