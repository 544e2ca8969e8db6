#include "proto/pmix_membership.h"

#include <pmix.h>
#include <unistd.h>

#include <cstring>

#include "common/log.h"
#include "common/mac.h"
#include "common/net.h"

namespace lt::proto {

namespace {

constexpr char kMemberKey[] = "ltier.member";

pmix_proc_t proc_of(const std::string& nspace, pmix_rank_t rank) {
  pmix_proc_t p;
  PMIX_PROC_CONSTRUCT(&p);
  PMIX_LOAD_PROCID(&p, nspace.c_str(), rank);
  return p;
}

// PMIx calls block; a timeout in whole seconds (at least 1) bounds them.
int timeout_s(Deadline d) {
  return static_cast<int>(std::max<uint64_t>(1, (d.remaining_ms() + 999) / 1000));
}

Code code_of(pmix_status_t rc) {
  switch (rc) {
    case PMIX_SUCCESS:
      return Code::kOk;
    case PMIX_ERR_TIMEOUT:
      return Code::kTimedOut;
    case PMIX_ERR_NOT_FOUND:
      return Code::kNotFound;
    case PMIX_ERR_NOT_SUPPORTED:
      return Code::kUnsupported;
    case PMIX_EXISTS:
      return Code::kExists;
    default:
      return Code::kPeerDown;
  }
}

}  // namespace

PmixMembership::~PmixMembership() { leave(); }

Status PmixMembership::join(const JoinInfo& info, Deadline d) {
  pmix_proc_t me;
  PMIX_PROC_CONSTRUCT(&me);
  pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS) {
    LT_ERROR(
        "join: cluster.backend is pmix, but PMIx_Init failed (%s): start the program with a PMIx "
        "launcher (mpirun, srun --mpi=pmix)",
        PMIx_Error_string(rc));
    return Code::kPeerDown;
  }
  initialized_ = true;
  nspace_ = me.nspace;
  rank_ = me.rank;
  pmix_proc_t job = proc_of(nspace_, PMIX_RANK_WILDCARD);
  pmix_value_t* val = nullptr;
  rc = PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &val);
  if (rc != PMIX_SUCCESS || val == nullptr || val->type != PMIX_UINT32) {
    LT_ERROR("join: PMIx does not give the job's size (%s)", PMIx_Error_string(rc));
    if (val) PMIX_VALUE_RELEASE(val);
    return Code::kPeerDown;
  }
  size_ = val->data.uint32;
  PMIX_VALUE_RELEASE(val);
  if (size_ == 0 || size_ > kMaxMembers) {
    LT_ERROR("join: a PMIx job of %u processes; ltier takes at most %u", size_, kMaxMembers);
    return Code::kNoResource;
  }
  self_ = rank_ + 1;
  // The token: the same on every rank of this job, and different for every
  // job; hellos are keyed by the secret and it (proto::hello_key).
  Mac t = hmac(info.cluster.secret, {as_bytes("ltier pmix token"), as_bytes(nspace_)});
  std::memcpy(&token_, t.data(), sizeof(token_));
  if (token_ == 0) token_ = 1;

  Member mine;
  mine.node = self_;
  mine.name = default_node_name(info.cluster.node_name);
  mine.addresses = info.addresses;
  mine.host_id = net::host_id();
  mine.rank = rank_;
  std::string rec;
  wire::Writer w(&rec);
  put_member(w, mine);
  pmix_byte_object_t bo;
  bo.bytes = rec.data();
  bo.size = rec.size();
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  PMIX_VALUE_LOAD(&v, &bo, PMIX_BYTE_OBJECT);
  rc = PMIx_Put(PMIX_GLOBAL, kMemberKey, &v);
  PMIX_VALUE_DESTRUCT(&v);
  if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
  if (rc == PMIX_SUCCESS) {
    pmix_info_t opts[2];
    bool collect = true;
    int secs = timeout_s(d);
    PMIX_INFO_LOAD(&opts[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&opts[1], PMIX_TIMEOUT, &secs, PMIX_INT);
    rc = PMIx_Fence(&job, 1, opts, 2);
    PMIX_INFO_DESTRUCT(&opts[0]);
    PMIX_INFO_DESTRUCT(&opts[1]);
  }
  if (rc != PMIX_SUCCESS) {
    LT_ERROR("join: the PMIx exchange of addresses failed (%s)", PMIx_Error_string(rc));
    return code_of(rc) == Code::kTimedOut ? Code::kTimedOut : Code::kPeerDown;
  }
  for (uint32_t r = 0; r < size_; ++r) {
    pmix_proc_t p = proc_of(nspace_, r);
    val = nullptr;
    rc = PMIx_Get(&p, kMemberKey, nullptr, 0, &val);
    Member m;
    bool ok = rc == PMIX_SUCCESS && val != nullptr && val->type == PMIX_BYTE_OBJECT;
    if (ok) {
      wire::Reader rd(std::span<const std::byte>(
          reinterpret_cast<const std::byte*>(val->data.bo.bytes), val->data.bo.size));
      ok = get_member(rd, &m) && rd.at_end() && m.node == r + 1 && m.rank == r;
    }
    if (val) PMIX_VALUE_RELEASE(val);
    if (!ok) {
      LT_ERROR("join: rank %u's address record is missing or malformed", r);
      return Code::kMalformed;
    }
    members_[m.node] = std::move(m);
  }
  return Status::ok();
}

void PmixMembership::leave() {
  if (!initialized_) return;
  initialized_ = false;
  PMIx_Finalize(nullptr, 0);
}

std::optional<transport::PeerInfo> PmixMembership::peer(NodeId n) const {
  return peer_in(members_, n);
}

std::vector<Member> PmixMembership::members() const { return members_in(members_); }

Status PmixMembership::register_name(const std::string& name, Deadline) {
  pmix_info_t info;
  uint32_t node = self_;
  PMIX_INFO_LOAD(&info, name.c_str(), &node, PMIX_UINT32);
  pmix_status_t rc = PMIx_Publish(&info, 1);
  PMIX_INFO_DESTRUCT(&info);
  return code_of(rc);
}

Status PmixMembership::unregister_name(const std::string& name, Deadline) {
  std::string key = name;
  char* keys[] = {key.data(), nullptr};
  return code_of(PMIx_Unpublish(keys, nullptr, 0));
}

Result<NodeId> PmixMembership::lookup_name(const std::string& name, Deadline d) {
  pmix_pdata_t data;
  PMIX_PDATA_CONSTRUCT(&data);
  PMIX_LOAD_KEY(data.key, name.c_str());
  pmix_info_t opt;
  int secs = timeout_s(d);
  PMIX_INFO_LOAD(&opt, PMIX_TIMEOUT, &secs, PMIX_INT);
  pmix_status_t rc = PMIx_Lookup(&data, 1, &opt, 1);
  PMIX_INFO_DESTRUCT(&opt);
  Result<NodeId> out = code_of(rc);
  if (rc == PMIX_SUCCESS) {
    out = data.value.type == PMIX_UINT32 && members_.count(data.value.data.uint32) != 0
              ? Result<NodeId>(data.value.data.uint32)
              : Result<NodeId>(Code::kMalformed);
  }
  PMIX_PDATA_DESTRUCT(&data);
  return out;
}

Status PmixMembership::barrier(const std::string&, uint32_t count, Deadline d) {
  if (count != size_) return Code::kUnsupported;  // only the whole job fences
  pmix_proc_t job = proc_of(nspace_, PMIX_RANK_WILDCARD);
  pmix_info_t opt;
  int secs = timeout_s(d);
  PMIX_INFO_LOAD(&opt, PMIX_TIMEOUT, &secs, PMIX_INT);
  pmix_status_t rc = PMIx_Fence(&job, 1, &opt, 1);
  PMIX_INFO_DESTRUCT(&opt);
  return code_of(rc);
}

}  // namespace lt::proto
