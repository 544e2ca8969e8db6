// ltier-node's mixed commands: every kind of remote operation from many
// threads at once, sizes on both sides of every transport's fragment and
// eager limits, each checked byte for byte; and the receiver of their
// messages.
#include "node.h"

namespace ltier_node {

namespace {

// From empty to past a MiB: around a 4 KiB fragment, a tcp segment, the
// shm eager threshold and a rendezvous.
constexpr uint64_t kSizes[] = {0, 1, 63, 4095, 4097, 36871, 262147, 1048579};
constexpr uint64_t kSlice = 1048584;  // a thread's part of the LMR (8-byte aligned)

// One round of thread `t`: an RPC echo, a write and its read back into the
// thread's slice, one fetch_add(1) on the shared counter, and with a port
// (not 0) one send_seq-style message to it.
std::string mixed_round(lt_engine_t* e, lt_node_t node, uint32_t port, lt_lmr_t h, uint64_t counter,
                        uint64_t t, uint64_t i) {
  const uint64_t n = std::size(kSizes);
  const uint64_t rpc_len = kSizes[(t * 7 + i) % n], mem_len = kSizes[(t * 3 + i * 5) % n];
  const std::string at = " (thread " + std::to_string(t) + ", round " + std::to_string(i) + ")";
  auto req = pattern(rpc_len, static_cast<unsigned>(t * 1000 + i));
  std::vector<unsigned char> rep(rpc_len + 1);
  size_t got = 0;
  if (int rc = LT_RPC(e, node, 1, req.data(), rpc_len, rep.data(), rep.size(), &got)) {
    return err(rc) + " rpc of " + std::to_string(rpc_len) + at;
  }
  if (got != rpc_len || (rpc_len > 0 && std::memcmp(rep.data(), req.data(), rpc_len) != 0)) {
    return "err rpc mismatch at " + std::to_string(rpc_len) + at;
  }
  auto out = pattern(mem_len, static_cast<unsigned>(t * 77 + i));
  std::vector<unsigned char> back(mem_len);
  if (int rc = LT_write(e, h, t * kSlice, out.data(), mem_len)) return err(rc) + " write" + at;
  if (int rc = LT_read(e, h, t * kSlice, back.data(), mem_len)) return err(rc) + " read" + at;
  if (back != out) return "err read back differs at " + std::to_string(mem_len) + at;
  uint64_t old = 0;
  if (int rc = LT_fetch_add(e, h, counter, 1, &old)) return err(rc) + " fetch_add" + at;
  if (port != 0) {
    auto m = seq_message(std::max<uint64_t>(8, kSizes[(t * 5 + i * 3) % n]), t << 32 | i);
    if (int rc = LT_send(e, node, port, m.data(), m.size())) {
      return err(rc) + " send of " + std::to_string(m.size()) + at;
    }
  }
  return "";
}

}  // namespace

std::string cmd_mixed_threads(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  uint64_t threads = a.u64(), rounds = a.u64();
  std::string p;
  const uint32_t port = a.optional_word(&p) ? static_cast<uint32_t>(std::stoul(p)) : 0;
  if (threads == 0 || threads > 16) return "err LT_ERR_INVAL";
  const uint64_t counter = threads * kSlice;
  lt_lmr_t h;
  if (int rc = LT_malloc(e, node, counter + 8, LT_READ | LT_WRITE | LT_ATOMIC, &h)) {
    return err(rc) + " malloc";
  }
  std::vector<std::string> first(threads);
  std::vector<std::thread> ts;
  for (uint64_t t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (uint64_t i = 0; i < rounds && first[t].empty(); ++i) {
        first[t] = mixed_round(e, node, port, h, counter, t, i);
      }
    });
  }
  for (auto& t : ts) t.join();
  std::string answer = "ok";
  for (const std::string& f : first) {
    if (!f.empty()) {
      answer = f;
      break;
    }
  }
  uint64_t count = 0;
  if (answer == "ok") {
    if (int rc = LT_read(e, h, counter, &count, sizeof(count))) answer = err(rc) + " counter";
    if (answer == "ok" && count != threads * rounds) {
      answer = "err counter " + std::to_string(count) + " after " +
               std::to_string(threads * rounds) + " adds";
    }
  }
  (void)LT_free(e, h);
  return answer;
}

std::string cmd_recv_mixed(lt_engine_t* e, Args& a) {
  uint32_t port = a.u32();
  uint64_t count = a.u64();
  std::vector<unsigned char> buf(kSizes[std::size(kSizes) - 1]);
  for (uint64_t i = 0; i < count; ++i) {
    lt_node_t src = 0;
    size_t n = 0;
    if (int rc = LT_recv(e, port, buf.data(), buf.size(), &src, &n, -1)) {
      return err(rc) + " at " + std::to_string(i);
    }
    std::vector<unsigned char> m(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    uint64_t seq = 0;
    if (n < 8 || !seq_message_ok(m, n, &seq)) return content_error(seq, src);
  }
  return "ok";
}

}  // namespace ltier_node
