// ltier-node: a node process that joins the cluster and serves the memory it
// hosts. It reads commands on stdin, one per line, and answers one line each:
// "ok [values...]" or "err LT_ERR_NAME". Used by the tour, the integration
// tests and people poking at a cluster by hand. EOF on stdin (or "quit")
// leaves the cluster; with --serve it ignores stdin and serves until killed.
//
//   id                          -> ok NODE_ID
//   nodes                       -> ok ID ID ...
//   transport NODE              -> ok NAME WHY    (LT_peer_transport: shm, tcp or self)
//   malloc NODE SIZE RIGHTS     -> ok HANDLE      (RIGHTS: r, w, rw)
//   free H | unmap H            -> ok
//   publish H NAME RIGHTS       -> ok
//   map NAME RIGHTS             -> ok HANDLE
//   write H OFF HEX             -> ok
//   fill H OFF LEN BYTE         -> ok             (LT_write of LEN copies of BYTE)
//   read H OFF LEN              -> ok HEX
//   sum H OFF LEN               -> ok SUM         (LT_read, byte sum: cheap to print)
//   memset H OFF BYTE LEN       -> ok
//   memcpy DST DOFF SRC SOFF LEN -> ok
//   address                     -> ok HOST:PORT   (this node's tcp transport)
//   fadd H OFF ADD              -> ok OLD         (LT_fetch_add)
//   cas H OFF EXPECTED NEW      -> ok OLD         (LT_compare_swap)
//   fadd_loop H OFF N THREADS   -> ok             (THREADS threads, N fetch_add(1) each)
//   lock NAME [TIMEOUT_MS]      -> ok             (LT_lock; default timeout from config)
//   unlock NAME                 -> ok
//   barrier NAME COUNT [TIMEOUT_MS] -> ok
//   lock_loop H OFF NAME N THREADS -> ok          (THREADS threads, N x {lock; read the u64
//                                                 at OFF; write it + 1; unlock})
//   barrier_loop NAME COUNT GENS H OFF -> ok      (each generation: fetch_add the u64 at OFF;
//                                                 barrier; check it is >= gen*COUNT; barrier)
//   rpc NODE FUNC HEX [CAP]     -> ok HEX         (LT_RPC; CAP defaults to 1 MiB)
//   rpc_sizes NODE MAX          -> ok COUNT       (echo every size 0..MAX in steps, byte-checked)
//   rpc_async NODE COUNT SIZE   -> ok             (COUNT async echo calls outstanding at once)
//   rpc_timeout NODE MS         -> ok|err         (the slow function, waited MS then cancelled)
//   rpc_timeout_func NODE FUNC MS -> ok|err       (the same with function FUNC)
//   rpc_loop FUNC COUNT THREADS CAP -> ok SERVED TRUNCATED (THREADS threads answer COUNT
//                                                 requests to server-loop FUNC with LT_recvRPC
//                                                 (buffer CAP, grown on LT_ERR_TRUNCATED) and
//                                                 LT_replyRPC: the bytes reversed; a request
//                                                 starting with 0xEE gets LT_ERR_PERM. Each
//                                                 token is then replied to again, which must
//                                                 fail with LT_ERR_BAD_HANDLE)
//   rpc_gate NODE               -> ok             (async call of the gate function 4, then a
//                                                 blocking call of 5, which opens the gate, then
//                                                 waits for 4: completes only if the server runs
//                                                 handlers on >= 2 workers)
// Every node serves RPC functions 1 (echo), 2 (reply of the length given as
// a decimal string: bytes i*7+1), 3 (sleeps 300 ms, then echoes: for timeout
// tests only; handlers must not block), 4 (blocks until function 5 is called
// or 30 s pass; with engine.rpc_workers only) and 5; function 6 is a server
// loop (LT_regRPC_loop) answered by the rpc_loop command.
//   send NODE PORT HEX          -> ok             (LT_send)
//   recv PORT CAP [TIMEOUT_MS]  -> ok SRC HEX     (LT_recv; err LT_ERR_TRUNCATED NEEDED)
//   send_seq NODE PORT COUNT SIZE -> ok           (COUNT messages of SIZE bytes: sequence
//                                                 number, then a pattern of it)
//   recv_seq PORT COUNT SIZE    -> ok             (COUNT such messages from any senders;
//                                                 checks content and per-sender order)
//   send_async_n NODE PORT COUNT -> ok SENT [again] (8-byte LT_send_async until COUNT
//                                                 or LT_ERR_AGAIN, then waits for them)
//   send_threads NODE PORT THREADS COUNT -> ok    (THREADS x COUNT 8-byte LT_send)
//   recv_n PORT N               -> ok             (N receives of up to 8 bytes)
//   rpc_threads NODE THREADS COUNT -> ok          (THREADS x COUNT LT_RPC echoes, checked)
//   send_async NODE PORT SIZE   -> ok             (one send_seq-style message, number 0,
//                                                 submitted; wait_sends waits for them)
//   wait_sends                  -> ok
//   recv_pat PORT SIZE [TIMEOUT_MS] -> ok SRC SEQ (one send_seq-style message, checked)
//   (RIGHTS letters: r read, w write, a atomic)
//   quit
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ltier/lt.h"

namespace {

int rpc_echo(void*, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
             size_t* out_len) {
  if (in_len > out_cap) return -LT_ERR_TRUNCATED;
  if (in_len) std::memcpy(out, in, in_len);
  *out_len = in_len;
  return 0;
}

int rpc_sized(void*, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
              size_t* out_len) {
  std::string s(static_cast<const char*>(in), in_len);
  size_t n = static_cast<size_t>(std::strtoull(s.c_str(), nullptr, 10));
  if (n > out_cap) return -LT_ERR_TRUNCATED;
  for (size_t i = 0; i < n; ++i)
    static_cast<unsigned char*>(out)[i] = static_cast<unsigned char>(i * 7 + 1);
  *out_len = n;
  return 0;
}

int rpc_slow(void* ctx, lt_node_t src, const void* in, size_t in_len, void* out, size_t out_cap,
             size_t* out_len) {
  usleep(300000);
  return rpc_echo(ctx, src, in, in_len, out, out_cap, out_len);
}

// The gate of functions 4 and 5 (a tool's state, not the library's).
std::atomic<bool> g_gate_open{false};

int rpc_gate_wait(void* ctx, lt_node_t src, const void* in, size_t in_len, void* out,
                  size_t out_cap, size_t* out_len) {
  for (int i = 0; i < 30000 && !g_gate_open.load(); ++i) usleep(1000);
  if (!g_gate_open.load()) return -LT_ERR_TIMEDOUT;
  return rpc_echo(ctx, src, in, in_len, out, out_cap, out_len);
}

int rpc_gate_open(void*, lt_node_t, const void*, size_t, void*, size_t, size_t* out_len) {
  g_gate_open.store(true);
  *out_len = 0;
  return 0;
}

// Runs `body` n times on each of `threads` threads; the first error wins.
template <typename Body>
int run_threads(uint64_t threads, uint64_t n, Body body) {
  std::atomic<int> first_error{0};
  std::vector<std::thread> ts;
  for (uint64_t t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      for (uint64_t i = 0; i < n; ++i) {
        int rc = body();
        if (rc != 0) {
          int zero = 0;
          first_error.compare_exchange_strong(zero, rc);
          return;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  return first_error;
}

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed) >> 3);
  return v;
}

// A send_seq message: its number (u64, host byte order), then pattern(size,
// number) from byte 8 on.
std::vector<unsigned char> seq_message(uint64_t size, uint64_t seq) {
  auto m = pattern(size, static_cast<unsigned>(seq));
  std::memcpy(m.data(), &seq, sizeof(seq));
  return m;
}

// True when the first n bytes of m are a whole send_seq message of m.size()
// bytes; its number goes to *seq either way.
bool seq_message_ok(const std::vector<unsigned char>& m, size_t n, uint64_t* seq) {
  std::memcpy(seq, m.data(), sizeof(*seq));
  auto want = pattern(m.size(), static_cast<unsigned>(*seq));
  return n == m.size() && std::memcmp(m.data() + 8, want.data() + 8, m.size() - 8) == 0;
}

// Sends posted by send_async and not yet waited for (wait_sends): each
// keeps its buffer until then.
struct PendingSend {
  std::vector<unsigned char> buf;
  lt_req_t id;
};
std::vector<PendingSend> g_pending_sends;

uint32_t parse_rights(const std::string& s) {
  uint32_t r = 0;
  for (char c : s) {
    if (c == 'r') r |= LT_READ;
    if (c == 'w') r |= LT_WRITE;
    if (c == 'a') r |= LT_ATOMIC;
  }
  return r;
}

std::string to_hex(const std::vector<unsigned char>& b) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s.push_back(k[c >> 4]);
    s.push_back(k[c & 15]);
  }
  return s;
}

bool from_hex(const std::string& s, std::vector<unsigned char>* out) {
  if (s.size() % 2 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return false;
  }
  for (size_t i = 0; i < s.size(); i += 2) {
    out->push_back(static_cast<unsigned char>(std::stoul(s.substr(i, 2), nullptr, 16)));
  }
  return true;
}

std::string run(lt_engine_t* e, const std::string& line) {
  std::istringstream in(line);
  std::string cmd;
  in >> cmd;
  auto err = [](int rc) { return std::string("err ") + LT_errname(rc); };
  auto u64 = [&]() {
    std::string t;
    in >> t;
    return static_cast<uint64_t>(std::stoull(t, nullptr, 0));
  };
  // An optional trailing TIMEOUT_MS, in µs; -1 (the default timeout) when absent.
  auto opt_timeout_us = [&]() -> int64_t {
    std::string t;
    return (in >> t) ? static_cast<int64_t>(std::stoll(t)) * 1000 : -1;
  };
  try {
    if (cmd == "id") return "ok " + std::to_string(LT_node_id(e));
    if (cmd == "address") {
      char a[128];
      int rc = LT_local_address(e, a, sizeof(a));
      return rc ? err(rc) : std::string("ok ") + a;
    }
    if (cmd == "transport") {
      lt_node_t node = static_cast<lt_node_t>(u64());
      char name[16], why[128];
      int rc = LT_peer_transport(e, node, name, sizeof(name), why, sizeof(why));
      if (rc) return err(rc);
      return std::string("ok ") + name + " " + why;
    }
    if (cmd == "nodes") {
      lt_node_t ids[1024];
      size_t n = 0;
      LT_nodes(e, ids, 1024, &n);
      std::string s = "ok";
      for (size_t i = 0; i < n && i < 1024; ++i) {
        s.push_back(' ');
        s.append(std::to_string(ids[i]));
      }
      return s;
    }
    if (cmd == "malloc") {
      uint64_t node = u64(), size = u64();
      std::string r;
      in >> r;
      lt_lmr_t h;
      int rc = LT_malloc(e, static_cast<lt_node_t>(node), size, parse_rights(r), &h);
      return rc ? err(rc) : "ok " + std::to_string(h);
    }
    if (cmd == "free" || cmd == "unmap") {
      lt_lmr_t h = u64();
      int rc = cmd == "free" ? LT_free(e, h) : LT_unmap(e, h);
      return rc ? err(rc) : "ok";
    }
    if (cmd == "publish") {
      lt_lmr_t h = u64();
      std::string name, r;
      in >> name >> r;
      int rc = LT_publish(e, h, name.c_str(), parse_rights(r));
      return rc ? err(rc) : "ok";
    }
    if (cmd == "map") {
      std::string name, r;
      in >> name >> r;
      lt_lmr_t h;
      int rc = LT_map(e, name.c_str(), parse_rights(r), &h);
      return rc ? err(rc) : "ok " + std::to_string(h);
    }
    if (cmd == "write") {
      lt_lmr_t h = u64();
      uint64_t off = u64();
      std::string hex;
      in >> hex;
      std::vector<unsigned char> b;
      if (!from_hex(hex, &b)) return "err LT_ERR_INVAL";
      int rc = LT_write(e, h, off, b.data(), b.size());
      return rc ? err(rc) : "ok";
    }
    if (cmd == "fill") {
      lt_lmr_t h = u64();
      uint64_t off = u64(), len = u64(), byte = u64();
      std::vector<unsigned char> b(len, static_cast<unsigned char>(byte));
      int rc = LT_write(e, h, off, b.data(), len);
      return rc ? err(rc) : "ok";
    }
    if (cmd == "read" || cmd == "sum") {
      lt_lmr_t h = u64();
      uint64_t off = u64(), len = u64();
      if (len > (1u << 30)) return "err LT_ERR_INVAL";
      std::vector<unsigned char> b(len, 0xEE);
      int rc = LT_read(e, h, off, b.data(), len);
      if (rc) return err(rc);
      if (cmd == "read") return "ok " + to_hex(b);
      uint64_t sum = 0;
      for (unsigned char c : b) sum += c;
      return "ok " + std::to_string(sum);
    }
    if (cmd == "fadd" || cmd == "cas") {
      lt_lmr_t h = u64();
      uint64_t off = u64(), a = u64(), old = 0;
      int rc = cmd == "fadd" ? LT_fetch_add(e, h, off, a, &old)
                             : LT_compare_swap(e, h, off, a, u64(), &old);
      return rc ? err(rc) : "ok " + std::to_string(old);
    }
    if (cmd == "fadd_loop") {
      lt_lmr_t h = u64();
      uint64_t off = u64(), n = u64(), threads = u64();
      if (threads == 0 || threads > 64) return "err LT_ERR_INVAL";
      int rc = run_threads(threads, n, [&] {
        uint64_t old;
        return LT_fetch_add(e, h, off, 1, &old);
      });
      return rc ? err(rc) : "ok";
    }
    if (cmd == "send") {
      lt_node_t node = static_cast<lt_node_t>(u64());
      uint32_t port = static_cast<uint32_t>(u64());
      std::string hex;
      in >> hex;
      std::vector<unsigned char> m;
      if (hex != "-" && !from_hex(hex, &m)) return "err LT_ERR_INVAL";
      int rc = LT_send(e, node, port, m.data(), m.size());
      return rc ? err(rc) : "ok";
    }
    if (cmd == "recv") {
      uint32_t port = static_cast<uint32_t>(u64());
      uint64_t cap = u64();
      int64_t timeout_us = opt_timeout_us();
      std::vector<unsigned char> m(cap);
      lt_node_t src = 0;
      size_t n = 0;
      int rc = LT_recv(e, port, m.data(), cap, &src, &n, timeout_us);
      if (rc == -LT_ERR_TRUNCATED) return err(rc) + " " + std::to_string(n);
      if (rc) return err(rc);
      m.resize(n);
      return "ok " + std::to_string(src) + " " + (n ? to_hex(m) : std::string("-"));
    }
    if (cmd == "send_seq") {
      lt_node_t node = static_cast<lt_node_t>(u64());
      uint32_t port = static_cast<uint32_t>(u64());
      uint64_t count = u64(), size = std::max<uint64_t>(8, u64());
      for (uint64_t i = 0; i < count; ++i) {
        auto m = seq_message(size, i);
        int rc = LT_send(e, node, port, m.data(), size);
        if (rc) return err(rc) + " at " + std::to_string(i);
      }
      return "ok";
    }
    if (cmd == "recv_seq") {
      uint32_t port = static_cast<uint32_t>(u64());
      uint64_t count = u64(), size = std::max<uint64_t>(8, u64());
      std::map<lt_node_t, uint64_t> next;
      std::vector<unsigned char> m(size);
      for (uint64_t i = 0; i < count; ++i) {
        lt_node_t src = 0;
        size_t n = 0;
        int rc = LT_recv(e, port, m.data(), size, &src, &n, -1);
        if (rc) return err(rc) + " at " + std::to_string(i);
        uint64_t seq;
        if (!seq_message_ok(m, n, &seq)) {
          return "err content of message " + std::to_string(seq) + " from " + std::to_string(src);
        }
        if (seq != next[src]) {
          return "err order: from node " + std::to_string(src) + " got " + std::to_string(seq) +
                 " expected " + std::to_string(next[src]);
        }
        ++next[src];
      }
      return "ok";
    }
    if (cmd == "send_threads") {  // THREADS threads x COUNT blocking 8-byte LT_send
      lt_node_t node = static_cast<lt_node_t>(u64());
      uint32_t port = static_cast<uint32_t>(u64());
      uint64_t threads = u64(), n = u64();
      if (threads == 0 || threads > 64) return "err LT_ERR_INVAL";
      int rc = run_threads(threads, n, [&] {
        uint64_t v = 1;
        return LT_send(e, node, port, &v, sizeof(v));
      });
      return rc ? err(rc) : "ok";
    }
    if (cmd == "recv_n") {  // N receives of up to 8 bytes
      uint32_t port = static_cast<uint32_t>(u64());
      uint64_t n = u64();
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t v;
        lt_node_t src = 0;
        size_t len = 0;
        if (int rc = LT_recv(e, port, &v, sizeof(v), &src, &len, -1); rc) {
          return err(rc) + " at " + std::to_string(i);
        }
      }
      return "ok";
    }
    if (cmd == "rpc_threads") {  // THREADS threads x COUNT 8-byte LT_RPC echoes of function 1
      lt_node_t node = static_cast<lt_node_t>(u64());
      uint64_t threads = u64(), n = u64();
      if (threads == 0 || threads > 64) return "err LT_ERR_INVAL";
      std::atomic<uint64_t> bad{0};
      int rc = run_threads(threads, n, [&] {
        uint64_t v = 0x1234, back = 0;
        size_t len = 0;
        int r = LT_RPC(e, node, 1, &v, sizeof(v), &back, sizeof(back), &len);
        if (r == 0 && (len != sizeof(v) || back != v)) bad.fetch_add(1);
        return r;
      });
      if (rc) return err(rc);
      return bad.load() ? "err mismatch" : "ok";
    }
    if (cmd == "send_async") {  // one pattern message, sequence number 0; wait_sends waits
      lt_node_t node = static_cast<lt_node_t>(u64());
      uint32_t port = static_cast<uint32_t>(u64());
      uint64_t size = std::max<uint64_t>(8, u64());
      PendingSend ps{seq_message(size, 0), 0};
      int rc = LT_send_async(e, node, port, ps.buf.data(), size, &ps.id);
      if (rc) return err(rc);
      g_pending_sends.push_back(std::move(ps));
      return "ok";
    }
    if (cmd == "wait_sends") {
      int first = 0;
      for (auto& ps : g_pending_sends) {
        int rc = LT_wait(e, ps.id, -1);
        if (rc && !first) first = rc;
      }
      g_pending_sends.clear();
      return first ? err(first) : "ok";
    }
    if (cmd == "recv_pat") {  // one pattern message of `size` bytes: "ok SRC SEQ" when intact
      uint32_t port = static_cast<uint32_t>(u64());
      uint64_t size = std::max<uint64_t>(8, u64());
      int64_t timeout_us = opt_timeout_us();
      std::vector<unsigned char> m(size);
      lt_node_t src = 0;
      size_t n = 0;
      int rc = LT_recv(e, port, m.data(), size, &src, &n, timeout_us);
      if (rc == -LT_ERR_TRUNCATED) return err(rc) + " " + std::to_string(n);
      if (rc) return err(rc);
      uint64_t seq;
      if (!seq_message_ok(m, n, &seq)) {
        return "err content of message " + std::to_string(seq) + " from " + std::to_string(src);
      }
      return "ok " + std::to_string(src) + " " + std::to_string(seq);
    }
    if (cmd == "send_async_n") {
      lt_node_t node = static_cast<lt_node_t>(u64());
      uint32_t port = static_cast<uint32_t>(u64());
      uint64_t count = u64();
      std::vector<uint64_t> vals(count);
      std::vector<lt_req_t> ids;
      bool again = false;
      for (uint64_t i = 0; i < count; ++i) {
        vals[i] = i;
        lt_req_t id;
        int rc = LT_send_async(e, node, port, &vals[i], 8, &id);
        if (rc == -LT_ERR_AGAIN) {
          again = true;
          break;
        }
        if (rc) return err(rc);
        ids.push_back(id);
      }
      for (lt_req_t id : ids) {
        if (int rc = LT_wait(e, id, -1); rc) return err(rc);
      }
      return "ok " + std::to_string(ids.size()) + (again ? " again" : "");
    }
    if (cmd == "rpc") {
      lt_node_t node = static_cast<lt_node_t>(u64());
      uint32_t func = static_cast<uint32_t>(u64());
      std::string hex, cap_s;
      in >> hex;
      size_t cap = (in >> cap_s) ? std::stoull(cap_s) : (1u << 20);
      std::vector<unsigned char> req;
      if (hex != "-" && !from_hex(hex, &req)) return "err LT_ERR_INVAL";
      std::vector<unsigned char> rep(cap);
      size_t n = 0;
      int rc = LT_RPC(e, node, func, req.data(), req.size(), rep.data(), cap, &n);
      if (rc == -LT_ERR_TRUNCATED) return err(rc) + " " + std::to_string(n);
      if (rc) return err(rc);
      rep.resize(n);
      return "ok " + (n ? to_hex(rep) : std::string("-"));
    }
    if (cmd == "rpc_sizes") {
      lt_node_t node = static_cast<lt_node_t>(u64());
      uint64_t max = u64();
      std::vector<unsigned char> rep(max + 1);
      uint64_t count = 0;
      std::vector<uint64_t> sizes;
      for (uint64_t sz = 0; sz <= max; sz = sz < 16 ? sz + 1 : sz * 2 - 7) sizes.push_back(sz);
      if (sizes.back() != max) sizes.push_back(max);  // always the largest asked for
      for (uint64_t sz : sizes) {
        auto req = pattern(sz, static_cast<unsigned>(sz));
        size_t n = 0;
        int rc = LT_RPC(e, node, 1, req.data(), sz, rep.data(), rep.size(), &n);
        if (rc) return err(rc) + " at size " + std::to_string(sz);
        if (n != sz || (sz > 0 && std::memcmp(rep.data(), req.data(), sz) != 0)) {
          return "err mismatch at size " + std::to_string(sz);
        }
        ++count;
      }
      return "ok " + std::to_string(count);
    }
    if (cmd == "rpc_async") {
      lt_node_t node = static_cast<lt_node_t>(u64());
      uint64_t count = u64(), size = u64();
      std::vector<std::vector<unsigned char>> reqs, reps;
      std::vector<size_t> lens(count);
      std::vector<lt_req_t> ids(count);
      for (uint64_t i = 0; i < count; ++i) {
        reqs.push_back(pattern(size, static_cast<unsigned>(i)));
        reps.emplace_back(size);
      }
      for (uint64_t i = 0; i < count; ++i) {
        int rc =
            LT_RPC_async(e, node, 1, reqs[i].data(), size, reps[i].data(), size, &lens[i], &ids[i]);
        if (rc) return err(rc) + " issuing call " + std::to_string(i);
      }
      for (uint64_t i = 0; i < count; ++i) {
        int rc = LT_wait(e, ids[i], -1);
        if (rc) return err(rc) + " call " + std::to_string(i);
        if (lens[i] != size || reps[i] != reqs[i]) return "err mismatch call " + std::to_string(i);
      }
      return "ok";
    }
    if (cmd == "rpc_loop") {
      uint32_t func = static_cast<uint32_t>(u64());
      uint64_t count = u64(), threads = u64(), cap0 = u64();
      std::atomic<uint64_t> left{count}, truncated{0};
      std::atomic<int> first_error{0};
      std::vector<std::thread> ts;
      for (uint64_t t = 0; t < threads; ++t) {
        ts.emplace_back([&] {
          std::vector<unsigned char> buf(cap0);
          for (;;) {
            uint64_t l = left.load();
            if (l == 0 || first_error.load() != 0) return;
            if (!left.compare_exchange_weak(l, l - 1)) continue;
            lt_node_t src = 0;
            size_t n = 0;
            lt_rpc_token_t tok = 0;
            int rc;
            while ((rc = LT_recvRPC(e, func, buf.data(), buf.size(), &src, &n, &tok, -1)) ==
                   -LT_ERR_TRUNCATED) {
              truncated.fetch_add(1);
              buf.resize(n);
            }
            if (rc == 0) {
              std::reverse(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
              bool deny = n > 0 && buf[n - 1] == 0xEE;  // first byte, now last
              rc = LT_replyRPC(e, tok, buf.data(), n, deny ? -LT_ERR_PERM : 0);
            }
            if (rc == 0 && LT_replyRPC(e, tok, nullptr, 0, 0) != -LT_ERR_BAD_HANDLE) {
              rc = -LT_ERR_INTERNAL;  // a spent token must be refused
            }
            if (rc != 0) {
              int zero = 0;
              first_error.compare_exchange_strong(zero, rc);
            }
          }
        });
      }
      for (auto& t : ts) t.join();
      if (first_error.load() != 0) return err(first_error.load());
      return "ok " + std::to_string(count) + " " + std::to_string(truncated.load());
    }
    if (cmd == "rpc_gate") {
      lt_node_t node = static_cast<lt_node_t>(u64());
      char req[3] = {7, 8, 9}, rep[3];
      size_t n = 0, m = 0;
      lt_req_t id;
      int rc = LT_RPC_async(e, node, 4, req, 3, rep, 3, &n, &id);
      if (rc) return err(rc);
      rc = LT_RPC(e, node, 5, nullptr, 0, nullptr, 0, &m);
      int rc4 = LT_wait(e, id, -1);
      if (rc) return err(rc) + " opening the gate";
      if (rc4) return err(rc4) + " waiting at the gate";
      return n == 3 && std::memcmp(req, rep, 3) == 0 ? "ok" : "err mismatch";
    }
    if (cmd == "rpc_timeout" || cmd == "rpc_timeout_func") {
      lt_node_t node = static_cast<lt_node_t>(u64());
      uint32_t func = cmd == "rpc_timeout" ? 3 : static_cast<uint32_t>(u64());
      int64_t ms = static_cast<int64_t>(u64());
      char req[4] = {1, 2, 3, 4}, rep[4];
      size_t n = 0;
      lt_req_t id;
      int rc = LT_RPC_async(e, node, func, req, 4, rep, 4, &n, &id);
      if (rc) return err(rc);
      rc = LT_wait(e, id, ms * 1000);
      if (rc == -LT_ERR_TIMEDOUT) rc = LT_cancel(e, id);
      return rc ? err(rc) : "ok";
    }
    if (cmd == "lock" || cmd == "unlock" || cmd == "barrier") {
      std::string name;
      in >> name;
      uint64_t count = cmd == "barrier" ? u64() : 0;
      int64_t timeout_us = opt_timeout_us();
      int rc = cmd == "lock" ? LT_lock(e, name.c_str(), timeout_us)
               : cmd == "unlock"
                   ? LT_unlock(e, name.c_str())
                   : LT_barrier(e, name.c_str(), static_cast<uint32_t>(count), timeout_us);
      return rc ? err(rc) : "ok";
    }
    if (cmd == "lock_loop") {
      lt_lmr_t h = u64();
      uint64_t off = u64();
      std::string name;
      in >> name;
      uint64_t n = u64(), threads = u64();
      if (threads == 0 || threads > 64) return "err LT_ERR_INVAL";
      int rc = run_threads(threads, n, [&] {
        // A deliberately non-atomic read-modify-write: only the lock keeps
        // the count exact.
        uint64_t v = 0;
        int r = LT_lock(e, name.c_str(), -1);
        if (r == 0) r = LT_read(e, h, off, &v, sizeof(v));
        ++v;
        if (r == 0) r = LT_write(e, h, off, &v, sizeof(v));
        int ur = LT_unlock(e, name.c_str());
        return r != 0 ? r : ur;
      });
      return rc ? err(rc) : "ok";
    }
    if (cmd == "barrier_loop") {
      std::string name;
      in >> name;
      uint64_t count = u64(), gens = u64();
      lt_lmr_t h = u64();
      uint64_t off = u64();
      for (uint64_t g = 1; g <= gens; ++g) {
        uint64_t old = 0, now = 0;
        int rc = LT_fetch_add(e, h, off, 1, &old);
        if (rc == 0) rc = LT_barrier(e, name.c_str(), static_cast<uint32_t>(count), -1);
        if (rc == 0) rc = LT_read(e, h, off, &now, sizeof(now));
        if (rc != 0) return err(rc);
        // Everyone incremented before anyone passed; nobody increments the
        // next generation before everyone has read.
        if (now != g * count)
          return "err mismatch gen " + std::to_string(g) + " saw " + std::to_string(now);
        rc = LT_barrier(e, name.c_str(), static_cast<uint32_t>(count), -1);
        if (rc != 0) return err(rc);
      }
      return "ok";
    }
    if (cmd == "memset") {
      lt_lmr_t h = u64();
      uint64_t off = u64(), byte = u64(), len = u64();
      int rc = LT_memset(e, h, off, static_cast<int>(byte), len);
      return rc ? err(rc) : "ok";
    }
    if (cmd == "memcpy") {
      lt_lmr_t d = u64();
      uint64_t doff = u64();
      lt_lmr_t s = u64();
      uint64_t soff = u64(), len = u64();
      int rc = LT_memcpy(e, d, doff, s, soff, len);
      return rc ? err(rc) : "ok";
    }
  } catch (const std::exception&) {
    return "err LT_ERR_INVAL";
  }
  return "err LT_ERR_INVAL unknown command '" + cmd + "'";
}

}  // namespace

int main(int argc, char** argv) {
  bool serve = false;
  lt_join_opts_t opts{};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--serve") {
      serve = true;
    } else if (a == "--manager" && i + 1 < argc) {
      opts.manager = argv[++i];
    } else if (a == "--secret" && i + 1 < argc) {
      opts.secret = argv[++i];
    } else if (a == "--listen" && i + 1 < argc) {
      opts.listen = argv[++i];
    } else if (a == "--config" && i + 1 < argc) {
      opts.config_path = argv[++i];
    } else {
      fprintf(stderr,
              "usage: ltier-node [--serve] [--manager H:P] [--secret S] [--listen H:P] "
              "[--config F]\n");
      return 2;
    }
  }
  std::signal(SIGPIPE, SIG_IGN);
  // Block SIGTERM/SIGINT before LT_join starts threads, so --serve receives
  // them in sigwait and leaves the cluster cleanly.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  if (serve) pthread_sigmask(SIG_BLOCK, &set, nullptr);
  lt_engine_t* e = nullptr;
  int rc = LT_join(&opts, &e);
  if (rc != 0) {
    printf("err %s\n", LT_errname(rc));
    fflush(stdout);
    fprintf(stderr, "ltier-node: join failed: %s\n", LT_strerror(rc));
    return 1;
  }
  for (auto [id, fn] : {std::pair<uint32_t, lt_rpc_fn>{1, rpc_echo},
                        {2, rpc_sized},
                        {3, rpc_slow},
                        {4, rpc_gate_wait},
                        {5, rpc_gate_open}}) {
    if (int r = LT_regRPC(e, id, fn, nullptr); r != 0) {
      fprintf(stderr, "ltier-node: LT_regRPC(%u): %s\n", id, LT_strerror(r));
    }
  }
  if (int r = LT_regRPC_loop(e, 6); r != 0) {
    fprintf(stderr, "ltier-node: LT_regRPC_loop(6): %s\n", LT_strerror(r));
  }
  printf("ready %u\n", LT_node_id(e));
  fflush(stdout);
  if (serve) {
    int sig;
    sigwait(&set, &sig);
  } else {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line == "quit") break;
      if (line.empty()) continue;
      std::string out = run(e, line);
      printf("%s\n", out.c_str());
      fflush(stdout);
    }
  }
  LT_leave(e);
  return 0;
}
