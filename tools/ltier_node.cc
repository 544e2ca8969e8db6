// ltier-node: a node process that joins the cluster and serves the memory it
// hosts. It reads commands on stdin, one per line, and answers one line each:
// "ok [values...]" or "err LT_ERR_NAME". Used by the tour, the integration
// tests and people poking at a cluster by hand. EOF on stdin (or "quit")
// leaves the cluster; with --serve it ignores stdin and serves until killed.
// "rejoin" leaves and joins again (a node that was expelled comes back under
// a new id) and answers "ok NEW_ID".
// kCommands, near the end, lists the commands with their arguments and
// answers; docs/API.md describes them in full.
//
// Every node serves RPC functions 1 (echo), 2 (reply of the length given as
// a decimal string: bytes i*7+1), 3 (sleeps 300 ms, then echoes: for timeout
// tests only; handlers must not block), 4 (blocks until function 5 is called
// or 30 s pass; with engine.rpc_workers only) and 5; function 6 is a server
// loop (LT_regRPC_loop) answered by the rpc_loop command; function 7 reads
// an LMR of this node's with LT_read from inside the handler (a handler doing
// a one-sided op on another node) and answers the bytes; function 8 takes
// the messages waiting on a port with LT_recv from inside the handler.
#include "ltier_node/node.h"

namespace ltier_node {
namespace {

// ---------------------------------------------------------------- the table

struct Command {
  const char* name;
  const char* usage;  // arguments -> answer (what it does)
  std::string (*run)(lt_engine_t* e, Args& a);
};

constexpr Command kCommands[] = {
    {"id", "-> ok NODE_ID", cmd_id},
    {"nodes", "-> ok ID ID ...", cmd_nodes},
    {"node_info", "NODE -> ok ID RANK NAME (LT_node_info; RANK '-' when none)", cmd_node_info},
    {"node_by_name", "NAME [TIMEOUT_MS] -> ok ID (LT_node_by_name; no timeout: look once)",
     cmd_node_by_name},
    {"node_by_rank", "RANK [TIMEOUT_MS] -> ok ID (LT_node_by_rank; no timeout: look once)",
     cmd_node_by_rank},
    {"event",
     "[TIMEOUT_MS] -> ok KIND NODE [missed N] (LT_member_event; KIND up, down, expelled, "
     "manager_lost, rejoined; no timeout: look once)",
     cmd_event},
    {"transport", "NODE -> ok NAME WHY (LT_peer_transport: shm, rc, ud, tcp or self)",
     cmd_transport},
    {"stats",
     "-> ok served=N malformed=N late=N ring_calls=N ring_replies=N split_recvs=N "
     "NAME:conns=N,qps=N,spare=N,regs=N,rexmit=N,cuts=N,resets=N ... (LT_stats, one "
     "NAME: per transport)",
     cmd_stats},
    {"peers",
     "-> ok NODE:TRANSPORT:tx=N/BYTES,rx=N/BYTES ... (LT_peer_stats, by node; a first call "
     "with too little room is retried)",
     cmd_peers},
    {"address", "-> ok HOST:PORT (this node's tcp transport)", cmd_address},
    {"class", "NAME -> ok (LT_set_class for the command thread; '-': back to the process's)",
     cmd_class},
    {"qos",
     "-> ok "
     "NAME:prio=N,ops=N,bytes=N,in_flight=N,delayed=N,throttles=N,p50_ns=N,p99_ns=N,throttled_"
     "peers=N ... "
     "(LT_class_stats, in priority order)",
     cmd_qos},
    {"metrics", "-> ok HOST:PORT (LT_metrics_address: where metrics.listen serves)", cmd_metrics},
    {"malloc", "NODE SIZE RIGHTS -> ok HANDLE (RIGHTS: r, w, rw)", cmd_malloc},
    {"free", "H -> ok", cmd_free},
    {"unmap", "H -> ok", cmd_unmap},
    {"publish", "H NAME RIGHTS -> ok", cmd_publish},
    {"map", "NAME RIGHTS -> ok HANDLE", cmd_map},
    {"write", "H OFF HEX -> ok", cmd_write},
    {"fill", "H OFF LEN BYTE -> ok (LT_write of LEN copies of BYTE)", cmd_fill},
    {"read", "H OFF LEN -> ok HEX", cmd_read},
    {"write_pat",
     "H OFF LEN SEED CHUNK [WINDOW] -> ok (a pattern of SEED, in LT_writes of CHUNK bytes; "
     "with WINDOW, LT_write_asyncs, WINDOW in flight)",
     cmd_write_pat},
    {"check_pat",
     "H OFF LEN SEED CHUNK -> ok|err mismatch at I (LT_reads of CHUNK bytes, every byte "
     "compared with write_pat's pattern)",
     cmd_check_pat},
    {"sum", "H OFF LEN -> ok SUM (LT_read, byte sum: cheap to print)", cmd_sum},
    {"memset", "H OFF BYTE LEN -> ok", cmd_memset},
    {"memcpy", "DST DOFF SRC SOFF LEN -> ok", cmd_memcpy},
    {"fadd", "H OFF ADD -> ok OLD (LT_fetch_add)", cmd_fadd},
    {"fadd_async", "H OFF ADD -> ok OLD (LT_fetch_add_async, then LT_wait)", cmd_fadd_async},
    {"cas", "H OFF EXPECTED NEW -> ok OLD (LT_compare_swap)", cmd_cas},
    {"fadd_loop", "H OFF N THREADS -> ok (THREADS threads, N fetch_add(1) each)", cmd_fadd_loop},
    {"lock", "NAME [TIMEOUT_MS] -> ok (LT_lock; default timeout from config)", cmd_lock},
    {"unlock", "NAME -> ok", cmd_unlock},
    {"barrier", "NAME COUNT [TIMEOUT_MS] -> ok", cmd_barrier},
    {"lock_loop",
     "H OFF NAME N THREADS -> ok (THREADS threads, N x {lock; read the u64 at OFF; write it + 1; "
     "unlock})",
     cmd_lock_loop},
    {"barrier_loop",
     "NAME COUNT GENS H OFF -> ok (each generation: fetch_add the u64 at OFF; barrier; check it "
     "is >= gen*COUNT; barrier)",
     cmd_barrier_loop},
    {"rpc", "NODE FUNC HEX [CAP] -> ok HEX (LT_RPC; CAP defaults to 1 MiB)", cmd_rpc},
    {"rpc_sizes", "NODE MAX -> ok COUNT (echo every size 0..MAX in steps, byte-checked)",
     cmd_rpc_sizes},
    {"rpc_async",
     "NODE COUNT SIZE [FUNC] -> ok (COUNT async echo calls outstanding at once; FUNC 1, the "
     "default, or 3, the slow echo)",
     cmd_rpc_async},
    {"rpc_timeout", "NODE MS -> ok|err (the slow function, waited MS then cancelled)",
     cmd_rpc_timeout},
    {"rpc_timeout_func", "NODE FUNC MS -> ok|err (the same with function FUNC)",
     cmd_rpc_timeout_func},
    {"rpc_loop",
     "FUNC COUNT THREADS CAP -> ok SERVED TRUNCATED (THREADS threads answer COUNT requests to "
     "server-loop FUNC with LT_recvRPC (buffer CAP, grown on LT_ERR_TRUNCATED) and LT_replyRPC: "
     "the bytes reversed; a request starting with 0xEE gets LT_ERR_PERM. Each token is then "
     "replied to again, which must fail with LT_ERR_BAD_HANDLE)",
     cmd_rpc_loop},
    {"rpc_loop_self",
     "FUNC COUNT -> ok COUNT TRUNCATED (a thread answers as rpc_loop does while this one calls "
     "FUNC on its own node COUNT times, then once with a request it denies)",
     cmd_rpc_loop_self},
    {"rpc_queue_take",
     "FUNC -> ok done|waited (a call to the own server-loop FUNC, then LT_recvRPC_async: 'done' "
     "when it took the waiting call at once; then a call too large for a 2-byte receive)",
     cmd_rpc_queue_take},
    {"rpc_gate",
     "NODE -> ok (async call of the gate function 4, then a blocking call of 5, which opens the "
     "gate, then waits for 4: completes only if the server runs handlers on >= 2 workers)",
     cmd_rpc_gate},
    {"rpc_threads", "NODE THREADS COUNT -> ok (THREADS x COUNT LT_RPC echoes, checked)",
     cmd_rpc_threads},
    {"rpc_read_threads",
     "NODE H LEN BYTE THREADS COUNT -> ok (THREADS x COUNT calls of function 7: NODE's "
     "handler LT_reads LEN bytes of its handle H; each answer must be LEN bytes of BYTE)",
     cmd_rpc_read_threads},
    {"send_then_take",
     "NODE PORT ROUNDS -> ok (each round: three 64-byte send_seq messages to PORT, then a call "
     "of function 8, whose handler LT_recvs the waiting ones; each answer must be its round's "
     "three, in order)",
     cmd_send_then_take},
    {"mixed_threads",
     "NODE THREADS ROUNDS [PORT] -> ok (an LMR on NODE; each thread, each round: an LT_RPC "
     "echo, an LT_write and LT_read back, a fetch_add, and with PORT a send_seq-style message "
     "there; sizes 0 B to 1 MiB, all checked)",
     cmd_mixed_threads},
    {"recv_mixed", "PORT COUNT -> ok (COUNT messages of mixed_threads, any size, each checked)",
     cmd_recv_mixed},
    {"send", "NODE PORT HEX -> ok (LT_send; HEX '-' is an empty message)", cmd_send},
    {"recv", "PORT CAP [TIMEOUT_MS] -> ok SRC HEX (LT_recv; err LT_ERR_TRUNCATED NEEDED)",
     cmd_recv},
    {"recv_async",
     "PORT CAP [TIMEOUT_MS] -> ok done|waited SRC HEX (LT_recv_async, then LT_wait: 'done' when "
     "it completed at the call)",
     cmd_recv_async},
    {"send_seq",
     "NODE PORT COUNT SIZE -> ok (COUNT messages of SIZE bytes: sequence number, then a pattern "
     "of it)",
     cmd_send_seq},
    {"recv_seq",
     "PORT COUNT SIZE -> ok (COUNT such messages from any senders; checks content and "
     "per-sender order)",
     cmd_recv_seq},
    {"send_async_n",
     "NODE PORT COUNT [SIZE] -> ok SENT [again] (SIZE-byte, default 8, LT_send_async until COUNT "
     "or LT_ERR_AGAIN, then waits for them)",
     cmd_send_async_n},
    {"send_threads", "NODE PORT THREADS COUNT -> ok (THREADS x COUNT 8-byte LT_send)",
     cmd_send_threads},
    {"recv_n", "PORT N -> ok (N receives of up to 8 bytes)", cmd_recv_n},
    {"recv_ordered",
     "PORT N -> ok SENDERS (N receives of send_threads messages, each sending thread's in order)",
     cmd_recv_ordered},
    {"send_async",
     "NODE PORT SIZE -> ok (one send_seq-style message, number 0, submitted; wait_sends waits "
     "for them)",
     cmd_send_async},
    {"wait_sends", "-> ok", cmd_wait_sends},
    {"recv_pat", "PORT SIZE [TIMEOUT_MS] -> ok SRC SEQ (one send_seq-style message, checked)",
     cmd_recv_pat},
};

std::string run(lt_engine_t* e, const std::string& line) {
  std::istringstream in(line);
  std::string cmd;
  in >> cmd;
  const Command* c = std::find_if(std::begin(kCommands), std::end(kCommands),
                                  [&](const Command& k) { return cmd == k.name; });
  if (c == std::end(kCommands)) return "err LT_ERR_INVAL unknown command '" + cmd + "'";
  Args args(&in);
  try {
    return c->run(e, args);
  } catch (const std::exception&) {
    return "err LT_ERR_INVAL";
  }
}

// The RPC functions every node serves (see the header).
void serve_functions(lt_engine_t* e) {
  for (auto [id, fn] : {std::pair<uint32_t, lt_rpc_fn>{1, rpc_echo},
                        {2, rpc_sized},
                        {3, rpc_slow},
                        {4, rpc_gate_wait},
                        {5, rpc_gate_open}}) {
    if (int r = LT_regRPC(e, id, fn, nullptr); r != 0) {
      fprintf(stderr, "ltier-node: LT_regRPC(%u): %s\n", id, LT_strerror(r));
    }
  }
  if (int r = LT_regRPC(e, 7, rpc_read_lmr, e); r != 0) {
    fprintf(stderr, "ltier-node: LT_regRPC(7): %s\n", LT_strerror(r));
  }
  if (int r = LT_regRPC(e, 8, rpc_take_msgs, e); r != 0) {
    fprintf(stderr, "ltier-node: LT_regRPC(8): %s\n", LT_strerror(r));
  }
  if (int r = LT_regRPC_loop(e, 6); r != 0) {
    fprintf(stderr, "ltier-node: LT_regRPC_loop(6): %s\n", LT_strerror(r));
  }
}

}  // namespace
}  // namespace ltier_node

using namespace ltier_node;  // the commands and RPC functions

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
  if (rc == 0) serve_functions(e);
  if (rc != 0) {
    printf("err %s\n", LT_errname(rc));
    fflush(stdout);
    fprintf(stderr, "ltier-node: join failed: %s\n", LT_strerror(rc));
    return 1;
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
      std::string out;
      if (line == "rejoin") {
        LT_leave(e);
        e = nullptr;
        rc = LT_join(&opts, &e);
        if (rc == 0) serve_functions(e);
        out = rc ? "err " + std::string(LT_errname(rc)) : "ok " + std::to_string(LT_node_id(e));
      } else {
        out = run(e, line);
      }
      printf("%s\n", out.c_str());
      fflush(stdout);
    }
  }
  LT_leave(e);
  return 0;
}
