// Writes the seed corpus of every fuzz target (tests/fuzz/corpus/<target>/)
// from valid encodings made with ltier's own encoders, plus a few near misses.
// The files are checked in; run this after a wire format changes:
//   build/tests/fuzz/fuzz_corpus_gen tests/fuzz/corpus
// Regression inputs (a bug a fuzzer found) are added by hand next to these,
// named regress-<what>; this program never removes files.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/wire.h"
#include "proto/control.h"
#include "proto/msg.h"

namespace lt {
namespace {

std::string g_root;
int g_files = 0;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  std::string dir = g_root + "/" + target;
  ::mkdir(g_root.c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  std::ofstream f(dir + "/" + name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ++g_files;
}

template <typename T>
std::string raw(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

std::string frame(wire::FrameKind kind, const std::string& body, uint32_t imm = 0) {
  return raw(wire::make_frame(kind, static_cast<uint32_t>(body.size()), imm)) + body;
}

std::string u8(uint8_t v) { return std::string(1, static_cast<char>(v)); }
std::string u16(uint16_t v) { return raw(v); }
std::string u32(uint32_t v) { return raw(v); }

// ---------------------------------------------------------------- wire

void wire_seeds() {
  // [n ops][ops][buffer]; ops: 0 u8, 1 u16, 2 u32, 3 u64, 4 i32, 5 str, 6 bytes, 7 rest, 8 at_end.
  std::string b;
  wire::Writer w(&b);
  w.u8(7);
  w.u16(0x1234);
  w.u32(0xdeadbeef);
  w.u64(0x0102030405060708ull);
  w.i32(-5);
  w.str("hello");
  w.bytes("xyz", 3);
  // 0x17: str up to 1024 bytes; 0x21: bytes(3).
  put("wire", "reader-all-ops", u8(8) + std::string("\x00\x01\x02\x03\x04\x17\x21\x08", 8) + b);
  // 0x0e: str up to 7 bytes; 0x05: str up to 0 bytes.
  const std::string str_buf = u16(3) + "abc" + u16(9) + "too long!" + u16(0);
  put("wire", "reader-str-limits", u8(3) + std::string("\x0e\x17\x05", 3) + str_buf);
  put("wire", "reader-str-too-long", u8(3) + std::string("\x0e\x0e\x08", 3) + str_buf);
  put("wire", "reader-past-end", u8(3) + std::string("\x03\x03\x00", 3) + "\x01\x02\x03");
  put("wire", "reader-rest", u8(2) + std::string("\x00\x07", 2) + "tail bytes");
  for (auto k : {wire::FrameKind::kHello, wire::FrameKind::kData, wire::FrameKind::kControl,
                 wire::FrameKind::kWrite}) {
    put("wire", "header-kind-" + std::to_string(static_cast<int>(k)),
        u8(0) + raw(wire::make_frame(k, 16)));
  }
  put("wire", "header-imm", u8(0) + raw(wire::make_frame(wire::FrameKind::kDataImm, 0, 0xabcd)));
  put("wire", "header-max", u8(0) + raw(wire::make_frame(wire::FrameKind::kData, 0xffffffffu)));
  auto bad = wire::make_frame(wire::FrameKind::kData, 1);
  bad.reserved = 1;
  put("wire", "header-reserved", u8(0) + raw(bad));
}

// ---------------------------------------------------------------- msg

void msg_seeds() {
  using namespace proto;
  auto h = [](MsgOp op, uint64_t req = 0x100000002ull) { return make_header(op, req); };
  LmrRef ref{0x1122334455667788ull, 0x99aabbccddeeff00ull, kAllRights, 0};
  put("msg", "read-req", raw(RangeReq{h(MsgOp::kReadReq), ref, 64, 128, 0, 0}));
  put("msg", "write-req", raw(RangeReq{h(MsgOp::kWriteReq), ref, 0, 5, 0, 0}) + "hello");
  put("msg", "memset-req", raw(RangeReq{h(MsgOp::kMemsetReq), ref, 8, 8, 0xab, 0}));
  put("msg", "memcpy-req", raw(MemcpyReq{h(MsgOp::kMemcpyReq), ref, ref, 0, 64, 64}));
  put("msg", "alloc-req", raw(AllocReq{h(MsgOp::kAllocReq), 4096}));
  put("msg", "free-req", raw(FreeReq{h(MsgOp::kFreeReq), ref}));
  put("msg", "revoke-req", raw(RevokeReq{h(MsgOp::kRevokeReq), 1, 0, ref.key}));
  put("msg", "map-req", raw(MapReq{h(MsgOp::kMapReq), kRightRead, 4}) + "name");
  put("msg", "atomic-req",
      raw(AtomicReq{h(MsgOp::kAtomicReq), ref, 8, 1, 0,
                    static_cast<uint32_t>(AtomicKind::kFetchAdd), 0}));
  put("msg", "rpc-req", raw(RpcReq{h(MsgOp::kRpcReq), 7, 3}) + "request");
  put("msg", "msg-eager", raw(MsgEager{h(MsgOp::kMsgEager, 0), 5, 2}) + "payload");
  put("msg", "msg-rts", raw(MsgRts{h(MsgOp::kMsgRts), 5, 0, 1 << 20, 0, 0, 0, 0}));
  put("msg", "msg-rts-split",
      raw(MsgRts{h(MsgOp::kMsgRts), 5, 0, 1 << 20, 0, 0, 0x7f0000200000ull, 0x54321}));
  put("msg", "msg-rts-staged", raw(MsgRts{h(MsgOp::kMsgRts), 5, 1, 4096, 0x77, 4096, 0, 0}));
  put("msg", "msg-pull", raw(MsgPull{h(MsgOp::kMsgPull), 0x300000004ull, 0, 0, 0}));
  put("msg", "msg-pull-placed",
      raw(MsgPull{h(MsgOp::kMsgPull), 0x300000004ull, 0x7f0000001000ull, 0x12345, 0}));
  put("msg", "msg-pull-split",
      raw(MsgPull{h(MsgOp::kMsgPull), 0x300000004ull, 0x7f0000001000ull, 0x12345, 1 << 19}));
  put("msg", "msg-pulled", raw(h(MsgOp::kMsgPulled)));
  put("msg", "msg-credit", raw(MsgCredit{h(MsgOp::kMsgCredit, 0), 3, 0}));
  put("msg", "msg-staged", raw(MsgStaged{h(MsgOp::kMsgStaged, 0), 4096}));
  put("msg", "rpc-ring-req", raw(RpcRingMsg{h(MsgOp::kRpcRingReq, 0), 0x1234, 32, 4096}));
  put("msg", "rpc-ring-offer", raw(RpcRingMsg{h(MsgOp::kRpcRingOffer, 0), 0x5678, 32, 4096}));
  put("msg", "reply", raw(h(MsgOp::kReply)));
  put("msg", "reply-data", raw(h(MsgOp::kReply)) + "read data");
  put("msg", "reply-error", raw(make_header(MsgOp::kReply, 9, Code::kPerm)));
  put("msg", "alloc-reply", raw(AllocReply{h(MsgOp::kAllocReply), 1, 2, 3, 4096, 0, 0}));
  put("msg", "map-reply", raw(MapReply{h(MsgOp::kMapReply), 3, kRightRead, 4096, ref, 0, 0}));
  put("msg", "atomic-reply", raw(AtomicReply{h(MsgOp::kAtomicReply), 41}));
  put("msg", "rpc-reply", raw(h(MsgOp::kRpcReply)) + "response");
  put("msg", "rpc-reply-error", raw(make_header(MsgOp::kRpcReply, 9, Code::kNoHandler)));
  put("msg", "msg-data", raw(h(MsgOp::kMsgData)) + "rendezvous data");
  put("msg", "msg-data-withdrawn", raw(make_header(MsgOp::kMsgData, 9, Code::kTimedOut)));
  put("msg", "msg-placed", raw(MsgPlaced{h(MsgOp::kMsgPlaced), 1 << 20}));
}

// ---------------------------------------------------------------- control

std::string ctl(proto::CtlType t, const std::string& body) {
  std::string f = proto::begin_ctl(t);
  f += body;
  proto::finish_ctl(&f);
  return f;
}

std::string member(uint32_t node, const std::string& name, const std::string& addr) {
  std::string s;
  wire::Writer w(&s);
  proto::put_member(w, proto::Member{node, name, addr, "boot:netns"});
  return s;
}

// A kJoinOk with room for its MAC (membership_fuzz seals it).
std::string join_ok(uint32_t self, std::initializer_list<std::string> members) {
  std::string b(kMacBytes, '\0');
  wire::Writer w(&b);
  w.u32(self);
  w.u64(0x1234567890abcdefull);
  w.u32(200);
  w.u32(1500);
  w.u32(static_cast<uint32_t>(members.size()));
  for (const auto& m : members) b += m;
  return ctl(proto::CtlType::kJoinOk, b);
}

std::string name_req(proto::CtlType t, uint64_t req, const std::string& name) {
  std::string b;
  wire::Writer w(&b);
  w.u64(req);
  w.str(name);
  return ctl(t, b);
}

std::string lock_req(proto::CtlType t, uint64_t req, const std::string& name, uint64_t owner) {
  std::string b;
  wire::Writer w(&b);
  w.u64(req);
  w.str(name);
  w.u64(owner);
  return ctl(t, b);
}

std::string barrier_req(uint64_t req, const std::string& name, uint32_t count) {
  std::string b;
  wire::Writer w(&b);
  w.u64(req);
  w.str(name);
  w.u32(count);
  return ctl(proto::CtlType::kBarrier, b);
}

std::string name_reply(uint64_t req, Code code, uint32_t node) {
  std::string b;
  wire::Writer w(&b);
  w.u64(req);
  w.u8(static_cast<uint8_t>(code));
  w.u32(node);
  return ctl(proto::CtlType::kNameReply, b);
}

void control_seeds() {
  using proto::CtlType;
  proto::JoinRequest j;
  j.name = "node";
  j.addresses = "tcp=127.0.0.1:1";
  Nonce n{};
  const std::string join = proto::seal_join("s", n, n, proto::join_body(j));
  put("control", "join", u8(0) + join);
  put("control", "join-ok",
      u8(1) + join_ok(2, {member(2, "b", "tcp=127.0.0.1:2"), member(1, "a", "127.0.0.1:1")}));
  put("control", "member-up", u8(2) + ctl(CtlType::kMemberUp, member(3, "c", "tcp=h:3 shm=x")));
  put("control", "member-down", u8(3) + ctl(CtlType::kMemberDown, u32(3)));
  put("control", "heartbeats",
      u8(4) + ctl(CtlType::kHeartbeat, "") + ctl(CtlType::kHeartbeat, "") +
          ctl(CtlType::kLeave, ""));
  put("control", "names",
      u8(5) + name_req(CtlType::kNameRegister, 1, "lmr") + name_reply(1, Code::kOk, 2) +
          name_req(CtlType::kNameLookup, 2, "lmr"));
  put("control", "lock-barrier",
      u8(6) + lock_req(CtlType::kLockAcquire, 1, "l", 77) + barrier_req(2, "b", 3));
  put("control", "bad-type", u8(7) + ctl(static_cast<CtlType>(99), "x"));
  put("control", "data-kind",
      u8(8) + frame(wire::FrameKind::kData, "not control") + ctl(CtlType::kLeave, ""));
}

// ---------------------------------------------------------------- manager

// Records: u8 flags (bit 0: connection, bit 1: sync after, bit 2: a join
// body to seal, bit 3: with a wrong secret), u16 n, n bytes.
std::string rec(int conn, bool sync, const std::string& bytes, int seal = 0) {
  return u8(static_cast<uint8_t>(conn | (sync ? 2 : 0) | seal)) +
         u16(static_cast<uint16_t>(bytes.size())) + bytes;
}

void manager_seeds() {
  using proto::CtlType;
  auto body = [](const std::string& name, uint32_t claim = 0) {
    proto::JoinRequest j;
    j.name = name;
    j.addresses = "tcp=127.0.0.1:1";
    j.host_id = "host";
    j.tenant = "tenant";
    j.claim_node = claim;
    if (claim != 0) j.seen = {claim};
    if (claim != 0) {
      j.locks = {{"l", 7}};
      j.names = {"x"};
    }
    return proto::join_body(j);
  };
  // A sealed join on connection `conn`, then a sync.
  auto join = [&](int conn, const std::string& name) { return rec(conn, true, body(name), 4); };
  put("manager", "join-leave",
      u8(0) + join(0, "a") + rec(0, false, ctl(CtlType::kHeartbeat, "")) +
          rec(0, false, ctl(CtlType::kLeave, "")));
  put("manager", "wrong-secret", u8(1) + rec(0, true, body("a"), 4 | 8));
  put("manager", "unsealed-join", u8(9) + rec(0, true, ctl(CtlType::kJoin, body("a"))));
  put("manager", "claim-back",
      u8(10) + rec(0, true, body("a", 5), 4) + join(1, "b") +
          rec(1, true, lock_req(CtlType::kLockAcquire, 1, "l", 8)) +
          rec(0, true, lock_req(CtlType::kLockRelease, 2, "l", 7)));
  put("manager", "speak-before-join", u8(2) + rec(1, false, ctl(CtlType::kHeartbeat, "")));
  put("manager", "names",
      u8(3) + join(0, "a") + join(1, "b") + rec(0, true, name_req(CtlType::kNameRegister, 1, "x")) +
          rec(1, true, name_req(CtlType::kNameRegister, 2, "x")) +
          rec(1, true, name_req(CtlType::kNameLookup, 3, "x")) +
          rec(1, true, name_req(CtlType::kNameUnregister, 4, "x")) +
          rec(0, true, name_req(CtlType::kNameUnregister, 5, "x")));
  put("manager", "lock-handoff",
      u8(4) + join(0, "a") + join(1, "b") +
          rec(0, true, lock_req(CtlType::kLockAcquire, 1, "l", 7)) +
          rec(1, true, lock_req(CtlType::kLockAcquire, 2, "l", 8)) +
          rec(0, true, lock_req(CtlType::kLockAcquire, 3, "l", 7)) +
          rec(0, true, lock_req(CtlType::kLockRelease, 4, "l", 7)) +
          rec(1, true, lock_req(CtlType::kLockRelease, 5, "l", 8)) +
          rec(1, true, lock_req(CtlType::kLockRelease, 6, "l", 8)));
  put("manager", "lock-holder-leaves",
      u8(5) + join(0, "a") + join(1, "b") +
          rec(0, true, lock_req(CtlType::kLockAcquire, 1, "l", 7)) +
          rec(1, true, lock_req(CtlType::kLockAcquire, 2, "l", 8)) +
          rec(0, true, ctl(CtlType::kLeave, "")));
  put("manager", "barrier",
      u8(6) + join(0, "a") + join(1, "b") + rec(0, true, barrier_req(1, "b", 2)) +
          rec(0, true, barrier_req(2, "b", 3)) + rec(1, true, barrier_req(3, "b", 2)) +
          rec(0, true, barrier_req(4, "c", 2)) + rec(0, true, barrier_req(4, "c", 0)));
  put("manager", "malformed-lock",
      u8(7) + join(0, "a") + rec(0, true, ctl(CtlType::kLockAcquire, "xx")));
  put("manager", "two-joins", u8(8) + join(0, "a") + join(0, "a"));
}

// ---------------------------------------------------------------- membership

void membership_seeds() {
  using proto::CtlType;
  // Byte 0: seal the first frame (see membership_fuzz).
  put("membership", "join-ok",
      u8(1) + join_ok(2, {member(2, "self", "tcp=127.0.0.1:1 shm=shm:1:x"),
                          member(1, "other", "tcp=127.0.0.1:9 shm=shm:2:y")}));
  put("membership", "join-ok-pushes",
      u8(1) + join_ok(1, {member(1, "self", "127.0.0.1:1")}) +
          ctl(CtlType::kMemberUp, member(2, "b", "tcp=10.0.0.2:7 shm=shm:3:z")) +
          ctl(CtlType::kMemberUp, member(3, "c", "10.0.0.3:7")) +
          ctl(CtlType::kMemberDown, u32(2)) + name_reply(1, Code::kOk, 3) +
          ctl(CtlType::kHeartbeat, ""));
  std::string refused;
  wire::Writer w(&refused);
  w.u8(static_cast<uint8_t>(Code::kAuth));
  w.str("wrong cluster secret");
  put("membership", "join-refused", u8(0) + ctl(CtlType::kJoinRefused, refused));
  put("membership", "join-ok-unsealed", u8(0) + join_ok(1, {member(1, "self", "127.0.0.1:1")}));
  std::string full;
  wire::Writer wf(&full);
  wf.u8(static_cast<uint8_t>(Code::kNoResource));
  wf.str("cluster is full");
  put("membership", "join-refused-full", u8(0) + ctl(CtlType::kJoinRefused, full));
  put("membership", "not-a-join-reply", u8(1) + ctl(CtlType::kHeartbeat, ""));
  put("membership", "empty", "");
}

// ---------------------------------------------------------------- tcp

// tcp_fuzz records (see its header comment).
std::string hello_rec(uint8_t variant) { return u8(1) + u8(variant); }
std::string data_rec(const std::string& body, bool with_imm = false, uint32_t imm = 0) {
  std::string s = u8(2) + u8(with_imm ? 1 : 0);
  if (with_imm) s += u32(imm);
  return s + u16(static_cast<uint16_t>(body.size())) + body;
}
std::string write_rec(uint8_t target, int16_t off, const std::string& data, int8_t delta = 0) {
  return u8(3) + u8(target) + u16(static_cast<uint16_t>(off)) +
         u16(static_cast<uint16_t>(data.size())) + u8(static_cast<uint8_t>(delta)) + data;
}
std::string big_rec(uint8_t flags, uint32_t n, uint8_t fill) {
  return u8(4) + u8(flags) + u16(static_cast<uint16_t>(n)) + u8(static_cast<uint8_t>(n >> 16)) +
         u8(fill);
}
std::string raw_rec(const std::string& bytes) {
  return u8(0) + u8(static_cast<uint8_t>(bytes.size())) + bytes;
}
std::string header_rec(uint8_t flags, uint8_t kind, uint32_t length, uint32_t imm) {
  return u8(5) + u8(flags) + u8(kind) + u32(length) + u32(imm);
}

void tcp_seeds() {
  // [split seed][completion array size][records]
  const std::string hello = hello_rec(0);  // node 1, the right token
  put("tcp", "hello-data", u8(0) + u8(31) + hello + data_rec("message one") + data_rec(""));
  put("tcp", "hello-imm", u8(1) + u8(31) + hello + data_rec("with imm", true, 0xfeed));
  put("tcp", "split-small",
      u8(2) + u8(0) + hello + data_rec("a") + data_rec("bb") + data_rec("ccc") +
          data_rec(std::string(300, 'd')));
  put("tcp", "write-w",
      u8(3) + u8(7) + hello + write_rec(0, 100, "placed bytes") + data_rec("after the write"));
  put("tcp", "write-w-end",
      u8(4) + u8(7) + hello + write_rec(0, 0, std::string(64, 'e')) +
          write_rec(4, 1024 - 8, "12345678"));
  put("tcp", "write-empty-region", u8(5) + u8(7) + hello + write_rec(2, 0, ""));
  put("tcp", "write-read-only", u8(6) + u8(7) + hello + write_rec(1, 0, "nope"));
  put("tcp", "write-deregistered", u8(7) + u8(7) + hello + write_rec(3, 0, "gone"));
  put("tcp", "write-out-of-bounds", u8(8) + u8(7) + hello + write_rec(4, 1000, "past the end!!!!"));
  put("tcp", "write-below", u8(9) + u8(7) + hello + write_rec(0, -1, "x"));
  put("tcp", "write-other-region", u8(10) + u8(7) + hello + write_rec(6, 0, "cross"));
  put("tcp", "write-no-rkey", u8(11) + u8(7) + hello + write_rec(7, 0, "zero"));
  put("tcp", "write-short-desc", u8(12) + u8(7) + hello + write_rec(0, 0, "", -1));
  put("tcp", "write-length-longer",
      u8(13) + u8(7) + hello + write_rec(0, 0, "abc", 5) + data_rec("swallowed"));
  put("tcp", "write-big", u8(14) + u8(7) + hello + big_rec(1, 70000, 0x42) + data_rec("marker"));
  put("tcp", "data-big", u8(15) + u8(3) + hello + big_rec(0, 65536, 0x43));
  put("tcp", "data-too-big", u8(16) + u8(3) + hello + big_rec(0, 65537, 0x44));
  put("tcp", "no-hello", u8(17) + u8(31) + data_rec("who are you"));
  put("tcp", "hello-self", u8(18) + u8(31) + hello_rec(4) + data_rec("x"));
  put("tcp", "hello-node0", u8(19) + u8(31) + hello_rec(8) + data_rec("x"));
  put("tcp", "hello-bad-token", u8(20) + u8(31) + hello_rec(16) + data_rec("x"));
  put("tcp", "hello-reserved", u8(21) + u8(31) + hello_rec(32) + data_rec("x"));
  put("tcp", "hello-twice", u8(22) + u8(31) + hello + hello_rec(1));
  // Node 77, the keeper, is connected already: a redundant connection.
  put("tcp", "hello-keeper", u8(29) + u8(31) + hello_rec(2) + data_rec("from a second connection"));
  put("tcp", "control-kind", u8(23) + u8(31) + hello + header_rec(0, 4, 1, 0) + raw_rec("x"));
  put("tcp", "imm-on-data", u8(24) + u8(31) + hello + header_rec(0, 2, 0, 5));
  put("tcp", "bad-magic", u8(25) + u8(31) + header_rec(1, 1, 16, 0));
  put("tcp", "garbage", u8(26) + u8(31) + raw_rec("GET / HTTP/1.1\r\nHost: ltier\r\n\r\n"));
  put(
      "tcp", "many-small", u8(27) + u8(0) + hello + [] {
        std::string s;
        for (int i = 0; i < 40; ++i)
          s += data_rec(std::string(1 + i % 5, static_cast<char>('a' + i)));
        return s;
      }());
  put("tcp", "partial-header", u8(28) + u8(31) + hello + raw_rec(std::string("\x4c\x54\x01", 3)));
}

// ---------------------------------------------------------------- config

void config_seeds() {
  put("config", "full",
      "transports: shm,tcp\n"
      "cluster:\n  manager: 127.0.0.1:7700\n  secret: s3cret\n  node_name: n1\n"
      "  join_timeout_ms: 5000\n"
      "tcp:\n  listen: 0.0.0.0:0\n  advertise: 10.0.0.1\n  connect_timeout_ms: 2000\n"
      "  eager_max_bytes: 65536\n  max_msg_bytes: 67108864\n  sndbuf_bytes: 0\n"
      "  rcvbuf_bytes: 0\n  max_queued_bytes: 268435456\n"
      "shm:\n  ring_bytes: 4194304\n  max_msg_bytes: 1048576\n  eager_max_bytes: 65536\n"
      "  spin_us: 20\n  stage_bytes: 0\n  cma: 1\n"
      "engine:\n  spin_us: 50\n  progress_spin_us: 30\n  op_timeout_ms: 10000\n"
      "  max_outstanding: 4096\n  max_lmr_bytes: 17179869184\n  rpc_ring_slots: 1024\n"
      "  msg_credits: 64\n  rpc_workers: 2\n"
      "qos:\n  tenant: t1\n  max_outstanding_ops: 4096\n");
  put("config", "flow", "{tcp: {listen: '127.0.0.1:9', max_msg_bytes: 4096}, qos: {tenant: x}}\n");
  put("config", "empty", "");
  put("config", "comment", "# nothing but a comment\n");
  put("config", "unknown-key", "tcp:\n  lisen: 127.0.0.1:0\n");
  put("config", "unknown-section", "tpc:\n  listen: 127.0.0.1:0\n");
  put("config", "not-a-map", "- a\n- b\n");
  put("config", "sequence-value", "tcp:\n  listen: [a, b]\n");
  put("config", "negative", "engine:\n  spin_us: -1\n");
  put("config", "hex", "engine:\n  spin_us: 0x10\n");
  put("config", "u32-overflow", "tcp:\n  max_msg_bytes: 4294967296\n");
  put("config", "u64-max", "engine:\n  max_lmr_bytes: 18446744073709551615\n");
  put("config", "u64-overflow", "engine:\n  max_lmr_bytes: 18446744073709551616\n");
  put("config", "syntax-error", "tcp:\n  listen: [127.0.0.1\n");
  put("config", "tabs", "tcp:\n\tlisten: x\n");
  put("config", "anchors", "tcp: &t\n  listen: a:1\nqos: *t\n");
  put("config", "quoted", "cluster:\n  secret: \"a \\\"quoted\\\" \\\\ secret\"\n");
  put("config", "host-port", "127.0.0.1:7700");
  put("config", "number", "12345");
}

}  // namespace
}  // namespace lt

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_ROOT (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  lt::g_root = argv[1];
  lt::wire_seeds();
  lt::msg_seeds();
  lt::control_seeds();
  lt::manager_seeds();
  lt::membership_seeds();
  lt::tcp_seeds();
  lt::config_seeds();
  std::printf("wrote %d seed files under %s\n", lt::g_files, lt::g_root.c_str());
  return 0;
}
