// rc_imm_lat: the raw-verbs floor of ltier's rc RPC on an RDMA device. Two
// processes ping-pong over one RC QP each, completions busy-polled, no ltier
// code in between:
//   --op write_imm  each side RDMA-WRITEs into the other's buffer with an
//                   immediate, which consumes a posted receive: how LITE (and
//                   ltier's ring RPC) carries a request and its reply;
//   --op send       SEND into a posted receive, as ib_send_lat does (a check
//                   of this tool against perftest on the same device).
// Small messages go inline; one send in 16 is signaled.
//
// --code N runs N distinct small functions before each post, standing for
// the code a middleware runs between two posts. Under emulation (Soft-RoCE
// in a TCG guest, where a post is a system call that runs the whole send)
// the post itself then takes longer: docs/PERF.md measures it.
//
//   rc_imm_lat [--op write_imm|send] [--device rxe0] [--ib-port 1] [--gid 1]
//              [--size 8] [--iters N] [--warmup N] [--port 18516]
//              [--code N] [SERVER_IP]
//
// Without SERVER_IP it serves one client and exits. The client prints
//   lat op=OP size=S iters=N p50_us=X p99_us=Y   (whole round trips)
//
// In a build with LTIER_TRACE_POINTS it records the same trace points as
// ltier's rc RPC (B/E a round trip, p/q a post, r a receive found), so
// bench/rpc_timeline.py sets the two timelines side by side.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/trace_points.h"

namespace {

struct Options {
  std::string op = "write_imm", device = "rxe0", server;
  int ib_port = 1, gid = 1, iters = 1000, warmup = 100, port = 18516, code = 0;
  size_t size = 8;
};

// --code: kCodeFns distinct functions, each its own machine code.
constexpr int kCodeFns = 2048;
volatile uint64_t g_code_sink;
template <int I>
void code_fn() {
  g_code_sink = g_code_sink * 31 + I;
}
template <int... I>
constexpr std::array<void (*)(), sizeof...(I)> code_table(std::integer_sequence<int, I...>) {
  return {&code_fn<I>...};
}
constexpr auto kCode = code_table(std::make_integer_sequence<int, kCodeFns>{});

// What each side tells the other over the tcp socket.
struct Wire {
  uint32_t qpn, psn, rkey, pad;
  uint64_t addr;
  uint8_t gid[16];
};

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "rc_imm_lat: %s: %s\n", what, strerror(errno));
  exit(1);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "rc_imm_lat: %s needs a value\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--op") {
      o.op = val();
    } else if (a == "--device") {
      o.device = val();
    } else if (a == "--ib-port") {
      o.ib_port = std::stoi(val());
    } else if (a == "--gid") {
      o.gid = std::stoi(val());
    } else if (a == "--size") {
      o.size = std::stoul(val());
    } else if (a == "--iters") {
      o.iters = std::stoi(val());
    } else if (a == "--warmup") {
      o.warmup = std::stoi(val());
    } else if (a == "--port") {
      o.port = std::stoi(val());
    } else if (a == "--code") {
      o.code = std::stoi(val());
    } else if (a[0] != '-') {
      o.server = a;
    } else {
      fprintf(stderr, "rc_imm_lat: unknown option %s\n", a.c_str());
      exit(2);
    }
  }
  if ((o.op != "write_imm" && o.op != "send") || o.size == 0 || o.size > 65536 || o.iters < 1 ||
      o.code < 0 || o.code > kCodeFns) {
    fprintf(stderr,
            "rc_imm_lat: --op write_imm|send, --size 1..65536, --iters >= 1, --code 0..%d\n",
            kCodeFns);
    exit(2);
  }
  return o;
}

// The tcp socket both sides exchange their Wire over (the client retries
// while the server starts).
int rendezvous(const Options& o) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(o.port));
  if (o.server.empty()) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(l, 1) != 0) {
      die("bind/listen");
    }
    int s = accept(l, nullptr, nullptr);
    close(l);
    if (s < 0) die("accept");
    return s;
  }
  if (inet_pton(AF_INET, o.server.c_str(), &sa.sin_addr) != 1) die("server address");
  for (int tries = 0; tries < 100; ++tries) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) return s;
    close(s);
    usleep(50000);
  }
  die("connect");
}

void exchange(int s, const void* out, void* in, size_t n) {
  if (write(s, out, n) != static_cast<ssize_t>(n)) die("write");
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(s, static_cast<char*>(in) + got, n - got);
    if (r <= 0) die("read");
    got += static_cast<size_t>(r);
  }
}

struct Rdma {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<char> buf;  // [0, size): what we send; [size, 2 size): where the peer writes
  uint32_t max_inline = 0;
  ibv_mtu mtu = IBV_MTU_1024;
};

void open_rdma(const Options& o, Rdma* r) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list != nullptr && i < n && r->ctx == nullptr; ++i) {
    if (o.device == ibv_get_device_name(list[i])) r->ctx = ibv_open_device(list[i]);
  }
  if (r->ctx == nullptr) die(("open " + o.device).c_str());
  ibv_free_device_list(list);
  r->pd = ibv_alloc_pd(r->ctx);
  r->cq = r->pd != nullptr ? ibv_create_cq(r->ctx, 512, nullptr, nullptr, 0) : nullptr;
  if (r->cq == nullptr) die("pd/cq");
  r->buf.assign(2 * o.size, 0);
  r->mr = ibv_reg_mr(r->pd, r->buf.data(), r->buf.size(),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (r->mr == nullptr) die("ibv_reg_mr");
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = r->cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 128;
  ia.cap.max_recv_wr = 128;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = 64;
  r->qp = ibv_create_qp(r->pd, &ia);
  if (r->qp == nullptr) die("ibv_create_qp");
  r->max_inline = ia.cap.max_inline_data;
  ibv_port_attr pa{};
  if (ibv_query_port(r->ctx, static_cast<uint8_t>(o.ib_port), &pa) != 0) die("ibv_query_port");
  r->mtu = pa.active_mtu;
}

void connect_qp(const Options& o, Rdma* r, const Wire& peer, uint32_t my_psn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = static_cast<uint8_t>(o.ib_port);
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(r->qp, &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    die("INIT");
  }
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = r->mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(o.gid);
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = static_cast<uint8_t>(o.ib_port);
  if (ibv_modify_qp(r->qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    die("RTR");
  }
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = my_psn;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(r->qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    die("RTS");
  }
}

void post_recv(const Options& o, Rdma* r) {
  ibv_sge sge{reinterpret_cast<uint64_t>(r->buf.data() + o.size), static_cast<uint32_t>(o.size),
              r->mr->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.sg_list = &sge;
  wr.num_sge = o.op == "send" ? 1 : 0;  // a write's immediate needs no buffer
  if (ibv_post_recv(r->qp, &wr, &bad) != 0) die("ibv_post_recv");
}

void post_send(const Options& o, Rdma* r, const Wire& peer, uint64_t n) {
  for (int i = 0; i < o.code; ++i) kCode[static_cast<size_t>(i)]();
  ibv_sge sge{reinterpret_cast<uint64_t>(r->buf.data()), static_cast<uint32_t>(o.size),
              r->mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags =
      (o.size <= r->max_inline ? IBV_SEND_INLINE : 0) | (n % 16 == 0 ? IBV_SEND_SIGNALED : 0);
  if (o.op == "send") {
    wr.opcode = IBV_WR_SEND;
  } else {
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(static_cast<uint32_t>(n));
    wr.wr.rdma.remote_addr = peer.addr;
    wr.wr.rdma.rkey = peer.rkey;
  }
  LT_TRACE_POINT('p');
  const int rc = ibv_post_send(r->qp, &wr, &bad);
  LT_TRACE_POINT('q');
  if (rc != 0) die("ibv_post_send");
}

// Polls until a receive completes (send completions are reaped on the way).
void await_recv(Rdma* r) {
  ibv_wc wc[8];
  for (;;) {
    int n = ibv_poll_cq(r->cq, 8, wc);
    if (n < 0) die("ibv_poll_cq");
    bool got = false;
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        fprintf(stderr, "rc_imm_lat: completion: %s\n", ibv_wc_status_str(wc[i].status));
        exit(1);
      }
      got = got || (wc[i].opcode & IBV_WC_RECV) != 0;
    }
    if (got) {
      LT_TRACE_POINT('r');
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  Rdma r;
  open_rdma(o, &r);
  Wire me{}, peer{};
  me.qpn = r.qp->qp_num;
  me.psn = std::random_device{}() & 0xffffff;
  me.rkey = r.mr->rkey;
  me.addr = reinterpret_cast<uint64_t>(r.buf.data() + o.size);
  ibv_gid gid;
  if (ibv_query_gid(r.ctx, static_cast<uint8_t>(o.ib_port), o.gid, &gid) != 0) die("ibv_query_gid");
  std::memcpy(me.gid, gid.raw, 16);
  const int s = rendezvous(o);
  exchange(s, &me, &peer, sizeof(Wire));
  connect_qp(o, &r, peer, me.psn);
  for (int i = 0; i < 64; ++i) post_recv(o, &r);
  char go = 1, back = 0;
  exchange(s, &go, &back, 1);  // both sides are at RTS with receives posted
  const int total = o.warmup + o.iters;
  std::vector<double> us;
  us.reserve(static_cast<size_t>(o.iters));
  for (int i = 0; i < total; ++i) {
    if (o.server.empty()) {
      await_recv(&r);
      post_recv(o, &r);
      post_send(o, &r, peer, static_cast<uint64_t>(i));
      continue;
    }
    LT_TRACE_POINT('B');
    const auto t0 = std::chrono::steady_clock::now();
    post_send(o, &r, peer, static_cast<uint64_t>(i));
    await_recv(&r);
    post_recv(o, &r);
    const std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - t0;
    if (i >= o.warmup) us.push_back(d.count());
    LT_TRACE_POINT('E');
  }
  exchange(s, &go, &back, 1);  // the last reply's completion is in before anyone goes
  close(s);
  if (!o.server.empty()) {
    std::sort(us.begin(), us.end());
    auto pct = [&](double p) {
      return us[std::min(us.size() - 1, static_cast<size_t>(p / 100 * (us.size() - 1) + 0.5))];
    };
    printf("lat op=%s size=%zu iters=%d p50_us=%.2f p99_us=%.2f\n", o.op.c_str(), o.size, o.iters,
           pct(50), pct(99));
  }
  ibv_destroy_qp(r.qp);
  ibv_dereg_mr(r.mr);
  ibv_destroy_cq(r.cq);
  ibv_dealloc_pd(r.pd);
  ibv_close_device(r.ctx);
  return 0;
}
