// ltier-node commands: membership and names, memory, atomics, locks and barriers.
#include "node.h"

namespace ltier_node {

// ---------------------------------------------------------------- membership

std::string cmd_id(lt_engine_t* e, Args&) { return "ok " + std::to_string(LT_node_id(e)); }

std::string cmd_address(lt_engine_t* e, Args&) {
  char a[128];
  int rc = LT_local_address(e, a, sizeof(a));
  return rc ? err(rc) : std::string("ok ") + a;
}

std::string cmd_transport(lt_engine_t* e, Args& a) {
  lt_node_t node = a.node();
  char name[16], why[128];
  int rc = LT_peer_transport(e, node, name, sizeof(name), why, sizeof(why));
  if (rc) return err(rc);
  return std::string("ok ") + name + " " + why;
}

std::string cmd_stats(lt_engine_t* e, Args&) {
  lt_stats_t st;
  if (int rc = LT_stats(e, &st); rc != 0) return err(rc);
  std::string s =
      "ok served=" + std::to_string(st.served) + " malformed=" + std::to_string(st.malformed) +
      " late=" + std::to_string(st.late_replies) + " ring_calls=" + std::to_string(st.ring_calls) +
      " ring_replies=" + std::to_string(st.ring_replies) +
      " split_recvs=" + std::to_string(st.split_recvs);
  for (uint32_t i = 0; i < st.num_transports; ++i) {
    const lt_transport_stats_t& t = st.transports[i];
    s += std::string(" ") + t.name + ":conns=" + std::to_string(t.connections) +
         ",qps=" + std::to_string(t.queue_pairs) + ",spare=" + std::to_string(t.spare_queue_pairs) +
         ",regs=" + std::to_string(t.registrations) + ",rexmit=" + std::to_string(t.retransmits) +
         ",cuts=" + std::to_string(t.window_cuts) + ",resets=" + std::to_string(t.qp_resets);
  }
  return s;
}

std::string cmd_peers(lt_engine_t* e, Args&) {
  std::vector<lt_peer_stats_t> ps(1);  // too small on purpose when there are several: *n says
  size_t n = 0;
  if (int rc = LT_peer_stats(e, ps.data(), ps.size(), &n); rc != 0) return err(rc);
  if (n > ps.size()) {
    ps.resize(n + 8);  // peers may come meanwhile; what does not fit is left out
    if (int rc = LT_peer_stats(e, ps.data(), ps.size(), &n); rc != 0) return err(rc);
  }
  std::string s = "ok";
  for (size_t i = 0; i < n && i < ps.size(); ++i) {
    const lt_peer_stats_t& p = ps[i];
    s += " " + std::to_string(p.node) + ":" + p.transport + ":tx=" + std::to_string(p.tx_ops) +
         "/" + std::to_string(p.tx_bytes) + ",rx=" + std::to_string(p.rx_ops) + "/" +
         std::to_string(p.rx_bytes);
  }
  return s;
}

std::string cmd_nodes(lt_engine_t* e, Args&) {
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

std::string cmd_node_info(lt_engine_t* e, Args& a) {
  lt_node_info_t info;
  int rc = LT_node_info(e, a.u32(), &info);
  if (rc) return err(rc);
  std::string rank = info.rank == LT_NO_RANK ? "-" : std::to_string(info.rank);
  return "ok " + std::to_string(info.id) + " " + rank + " " + info.name;
}

std::string cmd_node_by_name(lt_engine_t* e, Args& a) {
  std::string name = a.word();
  int64_t timeout_us = a.optional_timeout_us();
  lt_node_t node = 0;
  int rc = LT_node_by_name(e, name.c_str(), timeout_us < 0 ? 0 : timeout_us, &node);
  return rc ? err(rc) : "ok " + std::to_string(node);
}

std::string cmd_node_by_rank(lt_engine_t* e, Args& a) {
  uint32_t rank = a.u32();
  int64_t timeout_us = a.optional_timeout_us();
  lt_node_t node = 0;
  int rc = LT_node_by_rank(e, rank, timeout_us < 0 ? 0 : timeout_us, &node);
  return rc ? err(rc) : "ok " + std::to_string(node);
}

std::string cmd_event(lt_engine_t* e, Args& a) {
  int64_t timeout_us = a.optional_timeout_us();
  lt_member_event_t ev{};
  int rc = LT_member_event(e, timeout_us < 0 ? 0 : timeout_us, &ev);
  if (rc) return err(rc);
  std::string out = std::string("ok ") + LT_event_name(ev.kind) + " " + std::to_string(ev.node);
  return ev.missed ? out + " missed " + std::to_string(ev.missed) : out;
}

// ---------------------------------------------------------------- memory

std::string cmd_malloc(lt_engine_t* e, Args& a) {
  uint64_t node = a.u64(), size = a.u64();
  std::string r = a.word();
  lt_lmr_t h;
  int rc = LT_malloc(e, static_cast<lt_node_t>(node), size, parse_rights(r), &h);
  return rc ? err(rc) : "ok " + std::to_string(h);
}

std::string cmd_free(lt_engine_t* e, Args& a) { return ok_or_err(LT_free(e, a.u64())); }

std::string cmd_unmap(lt_engine_t* e, Args& a) { return ok_or_err(LT_unmap(e, a.u64())); }

std::string cmd_publish(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  std::string name = a.word(), r = a.word();
  return ok_or_err(LT_publish(e, h, name.c_str(), parse_rights(r)));
}

std::string cmd_map(lt_engine_t* e, Args& a) {
  std::string name = a.word(), r = a.word();
  lt_lmr_t h;
  int rc = LT_map(e, name.c_str(), parse_rights(r), &h);
  return rc ? err(rc) : "ok " + std::to_string(h);
}

std::string cmd_write(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64();
  std::string hex = a.word();
  std::vector<unsigned char> b;
  if (!from_hex(hex, &b)) return "err LT_ERR_INVAL";
  return ok_or_err(LT_write(e, h, off, b.data(), b.size()));
}

std::string cmd_fill(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), len = a.u64(), byte = a.u64();
  std::vector<unsigned char> b(len, static_cast<unsigned char>(byte));
  return ok_or_err(LT_write(e, h, off, b.data(), len));
}

// write_pat and check_pat: pattern(LEN, SEED) in CHUNK-byte LT_writes and
// LT_reads, every byte compared on the way back. write_pat with a WINDOW:
// LT_write_asyncs, WINDOW of them in flight.
std::string cmd_write_pat(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), len = a.u64(), seed = a.u64(), chunk = std::max<uint64_t>(1, a.u64());
  std::string w;
  const uint64_t window = a.optional_word(&w) ? std::stoull(w) : 0;
  if (len > (1u << 30) || window > 1024) return "err LT_ERR_INVAL";
  const auto b = pattern(len, static_cast<unsigned>(seed));
  std::vector<lt_req_t> reqs(window);
  uint64_t issued = 0, waited = 0;
  std::string failed;
  for (uint64_t at = 0; at < len; at += chunk) {
    const uint64_t n = std::min(chunk, len - at);
    if (window == 0) {
      if (int rc = LT_write(e, h, off + at, b.data() + at, n); rc) {
        return err(rc) + " at " + std::to_string(at);
      }
      continue;
    }
    if (issued - waited == window) {
      int rc = LT_wait(e, reqs[waited++ % window], -1);
      if (rc != 0 && failed.empty()) failed = err(rc) + " in flight";
    }
    if (int rc = LT_write_async(e, h, off + at, b.data() + at, n, &reqs[issued % window]); rc) {
      failed = err(rc) + " at " + std::to_string(at);
      break;
    }
    ++issued;
  }
  while (waited < issued) {  // b must outlive every write
    int rc = LT_wait(e, reqs[waited++ % window], -1);
    if (rc != 0 && failed.empty()) failed = err(rc) + " in flight";
  }
  return failed.empty() ? "ok" : failed;
}

std::string cmd_check_pat(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), len = a.u64(), seed = a.u64(), chunk = std::max<uint64_t>(1, a.u64());
  if (len > (1u << 30)) return "err LT_ERR_INVAL";
  const auto want = pattern(len, static_cast<unsigned>(seed));
  std::vector<unsigned char> got(std::min(chunk, len));
  for (uint64_t at = 0; at < len; at += chunk) {
    const uint64_t n = std::min(chunk, len - at);
    if (int rc = LT_read(e, h, off + at, got.data(), n); rc) {
      return err(rc) + " at " + std::to_string(at);
    }
    for (uint64_t i = 0; i < n; ++i) {
      if (got[i] != want[at + i]) return "err mismatch at " + std::to_string(at + i);
    }
  }
  return "ok";
}

// read and sum: LT_read of H OFF LEN into *b. Returns the error answer, or
// "" when the read worked.
std::string read_region(lt_engine_t* e, Args& a, std::vector<unsigned char>* b) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), len = a.u64();
  if (len > (1u << 30)) return "err LT_ERR_INVAL";
  b->assign(len, 0xEE);
  int rc = LT_read(e, h, off, b->data(), len);
  return rc ? err(rc) : "";
}

std::string cmd_read(lt_engine_t* e, Args& a) {
  std::vector<unsigned char> b;
  if (std::string bad = read_region(e, a, &b); !bad.empty()) return bad;
  return "ok " + to_hex(b);
}

std::string cmd_sum(lt_engine_t* e, Args& a) {
  std::vector<unsigned char> b;
  if (std::string bad = read_region(e, a, &b); !bad.empty()) return bad;
  uint64_t sum = 0;
  for (unsigned char c : b) sum += c;
  return "ok " + std::to_string(sum);
}

std::string cmd_memset(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), byte = a.u64(), len = a.u64();
  return ok_or_err(LT_memset(e, h, off, static_cast<int>(byte), len));
}

std::string cmd_memcpy(lt_engine_t* e, Args& a) {
  lt_lmr_t d = a.u64();
  uint64_t doff = a.u64();
  lt_lmr_t s = a.u64();
  uint64_t soff = a.u64(), len = a.u64();
  return ok_or_err(LT_memcpy(e, d, doff, s, soff, len));
}

// ---------------------------------------------------------------- atomics

std::string cmd_fadd(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), add = a.u64(), old = 0;
  int rc = LT_fetch_add(e, h, off, add, &old);
  return rc ? err(rc) : "ok " + std::to_string(old);
}

std::string cmd_fadd_async(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), add = a.u64(), old = 0;
  lt_req_t req;
  int rc = LT_fetch_add_async(e, h, off, add, &old, &req);
  if (rc == 0) rc = LT_wait(e, req, -1);
  return rc ? err(rc) : "ok " + std::to_string(old);
}

std::string cmd_cas(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), expected = a.u64(), desired = a.u64(), old = 0;
  int rc = LT_compare_swap(e, h, off, expected, desired, &old);
  return rc ? err(rc) : "ok " + std::to_string(old);
}

std::string cmd_fadd_loop(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64(), n = a.u64(), threads = a.u64();
  if (threads == 0 || threads > 64) return "err LT_ERR_INVAL";
  return ok_or_err(run_threads(threads, n, [&] {
    uint64_t old;
    return LT_fetch_add(e, h, off, 1, &old);
  }));
}

// ---------------------------------------------------------------- locks and barriers

std::string cmd_lock(lt_engine_t* e, Args& a) {
  std::string name = a.word();
  int64_t timeout_us = a.optional_timeout_us();
  return ok_or_err(LT_lock(e, name.c_str(), timeout_us));
}

std::string cmd_unlock(lt_engine_t* e, Args& a) {
  std::string name = a.word();
  // LT_unlock takes no timeout, but a TIMEOUT_MS after the name is accepted
  // as for lock, so it must still be a number.
  (void)a.optional_timeout_us();
  return ok_or_err(LT_unlock(e, name.c_str()));
}

std::string cmd_barrier(lt_engine_t* e, Args& a) {
  std::string name = a.word();
  uint64_t count = a.u64();
  int64_t timeout_us = a.optional_timeout_us();
  return ok_or_err(LT_barrier(e, name.c_str(), static_cast<uint32_t>(count), timeout_us));
}

std::string cmd_lock_loop(lt_engine_t* e, Args& a) {
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64();
  std::string name = a.word();
  uint64_t n = a.u64(), threads = a.u64();
  if (threads == 0 || threads > 64) return "err LT_ERR_INVAL";
  return ok_or_err(run_threads(threads, n, [&] {
    // A deliberately non-atomic read-modify-write: only the lock keeps
    // the count exact.
    uint64_t v = 0;
    int r = LT_lock(e, name.c_str(), -1);
    if (r == 0) r = LT_read(e, h, off, &v, sizeof(v));
    ++v;
    if (r == 0) r = LT_write(e, h, off, &v, sizeof(v));
    int ur = LT_unlock(e, name.c_str());
    return r != 0 ? r : ur;
  }));
}

std::string cmd_barrier_loop(lt_engine_t* e, Args& a) {
  std::string name = a.word();
  uint64_t count = a.u64(), gens = a.u64();
  lt_lmr_t h = a.u64();
  uint64_t off = a.u64();
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

}  // namespace ltier_node
