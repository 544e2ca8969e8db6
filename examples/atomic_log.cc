// LITE-Log on ltier: a shared append-only log in one node's memory. Appenders
// reserve space with LT_fetch_add on the log's tail word and write their
// record there with LT_write; after a barrier, rank 0 replays the log and
// checks that every record of every rank is present exactly once.
//
//   build/tools/ltier-run -n 3 -- build/examples/atomic_log [RECORDS_PER_RANK]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ltier/lt.h"

namespace {

constexpr uint64_t kDataOffset = 64;  // the tail word lives at 0
constexpr uint64_t kCapacity = 4u << 20;

struct RecordHeader {
  uint32_t len;   // payload bytes after this header
  uint32_t rank;  // the appender
  uint64_t seq;   // the appender's sequence number
};

int fail(const char* what, int rc) {
  fprintf(stderr, "atomic_log: %s FAILED: %s\n", what, LT_strerror(rc));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* r = getenv("LTIER_RANK");
  const char* n = getenv("LTIER_NPROCS");
  if (r == nullptr || n == nullptr) {
    fprintf(stderr, "atomic_log: run me under ltier-run\n");
    return 2;
  }
  int rank = atoi(r), nprocs = atoi(n);
  uint64_t per_rank = argc > 1 ? strtoull(argv[1], nullptr, 10) : 200;
  lt_engine_t* e;
  if (int rc = LT_join(nullptr, &e)) return fail("join", rc);
  lt_lmr_t log;
  int rc = 0;
  if (rank == 0) {
    rc = LT_malloc(e, LT_node_id(e), kDataOffset + kCapacity, LT_RW | LT_ATOMIC, &log);
    if (rc == 0) rc = LT_publish(e, log, "atomic_log", LT_RW | LT_ATOMIC);
  }
  if (rc == 0) rc = LT_barrier(e, "atomic_log.ready", nprocs, -1);
  if (rc == 0 && rank != 0) rc = LT_map(e, "atomic_log", LT_RW | LT_ATOMIC, &log);
  if (rc != 0) return fail("setup", rc);

  // Append: reserve with fetch_add, then write header + payload.
  auto t0 = std::chrono::steady_clock::now();
  uint64_t appended = 0;
  for (uint64_t i = 0; i < per_rank; ++i) {
    std::string payload = "rank " + std::to_string(rank) + " record " + std::to_string(i);
    RecordHeader h{static_cast<uint32_t>(payload.size()), static_cast<uint32_t>(rank), i};
    std::vector<char> rec(sizeof(h) + payload.size());
    std::memcpy(rec.data(), &h, sizeof(h));
    std::memcpy(rec.data() + sizeof(h), payload.data(), payload.size());
    uint64_t off = 0;
    if ((rc = LT_fetch_add(e, log, 0, rec.size(), &off))) return fail("fetch_add", rc);
    if (off + rec.size() > kCapacity) break;  // full: the reservation is past the end
    if ((rc = LT_write(e, log, kDataOffset + off, rec.data(), rec.size()))) {
      return fail("write", rc);
    }
    ++appended;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("rank %d: appended %llu records (%.0f appends/s)\n", rank,
         static_cast<unsigned long long>(appended), appended / secs);
  fflush(stdout);
  if ((rc = LT_barrier(e, "atomic_log.done", nprocs, -1))) return fail("barrier", rc);

  bool ok = true;
  if (rank == 0) {
    // Replay: walk the log from the start to the tail.
    uint64_t tail = 0;
    if ((rc = LT_fetch_add(e, log, 0, 0, &tail))) return fail("read tail", rc);
    tail = std::min(tail, kCapacity);
    std::vector<char> data(tail);
    if ((rc = LT_read(e, log, kDataOffset, data.data(), tail))) return fail("read", rc);
    std::map<uint32_t, std::set<uint64_t>> seen;
    uint64_t pos = 0, records = 0;
    while (pos + sizeof(RecordHeader) <= tail) {
      RecordHeader h;
      std::memcpy(&h, data.data() + pos, sizeof(h));
      std::string payload(data.data() + pos + sizeof(h), h.len);
      std::string want = "rank " + std::to_string(h.rank) + " record " + std::to_string(h.seq);
      if (payload != want || !seen[h.rank].insert(h.seq).second) {
        fprintf(stderr, "atomic_log: replay FAILED at byte %llu of %llu: record (%u, %llu, %u B)\n",
                static_cast<unsigned long long>(pos), static_cast<unsigned long long>(tail), h.rank,
                static_cast<unsigned long long>(h.seq), h.len);
        ok = false;
        break;
      }
      pos += sizeof(h) + h.len;
      ++records;
    }
    for (int k = 0; k < nprocs; ++k) {
      if (seen[k].size() == per_rank) continue;
      fprintf(stderr, "atomic_log: replay FAILED: rank %d has %zu records\n", k, seen[k].size());
      ok = false;
    }
    printf("atomic_log: replayed %llu records from %d ranks: %s\n",
           static_cast<unsigned long long>(records), nprocs,
           ok ? "every record exactly once" : "CORRUPT");
    fflush(stdout);
  }
  // Rank 0 hosts the log: the others leave first.
  (void)LT_barrier(e, "atomic_log.exit", nprocs, -1);
  LT_leave(e);
  return ok ? 0 : 1;
}
