#include "transport/verbs/rc_qp.h"

#include <infiniband/verbs.h>
#include <sodium.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace lt::transport::verbs {

namespace {

ibv_mtu mtu_enum(uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

std::string where(const VerbsDevice& d, const char* step, uint32_t mtu) {
  const Choice& c = d.choice();
  return std::string("ibv_modify_qp to ") + step + " failed on " + c.device + " port " +
         std::to_string(c.port) + " GID index " + std::to_string(c.gid.index) + " (" + c.gid.text +
         "), MTU " + std::to_string(mtu) + ": " + std::strerror(errno) +
         " (check that both ends use RoCE v2 GIDs of the same address family: verbs.gid_index, "
         "LTIER_VERBS_GID_INDEX; ltier-info --devices)";
}

}  // namespace

Result<std::unique_ptr<RcQp>> RcQp::create(VerbsDevice& dev, const RcOptions& o, std::string* why) {
  std::unique_ptr<RcQp> q(new RcQp());
  q->dev_ = &dev;
  q->opts_ = o;
  ibv_qp_init_attr a{};
  a.send_cq = o.send_cq != nullptr ? o.send_cq : dev.cq();
  a.recv_cq = dev.recv_cq();
  a.srq = dev.srq();
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 0;
  a.cap.max_send_wr = o.send_depth;
  a.cap.max_recv_wr = std::max<uint32_t>(o.recv_depth, 1);
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = o.inline_bytes;
  q->qp_ = ibv_create_qp(dev.pd(), &a);
  if (q->qp_ != nullptr) q->max_inline_ = a.cap.max_inline_data;
  if (q->qp_ == nullptr) {
    *why = "ibv_create_qp (RC, " + std::to_string(o.send_depth) + " sends) on " +
           dev.choice().device + ": " + std::strerror(errno);
    return Code::kNoResource;
  }
  uint32_t psn = 0;
  randombytes_buf(&psn, sizeof(psn));
  q->local_.qpn = q->qp_->qp_num;
  q->local_.psn = psn & 0xffffff;
  q->local_.gid = dev.gid();
  q->local_.lid = dev.lid();
  q->local_.mtu = dev.choice().mtu;
  return q;
}

void RcQp::to_error() {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(qp_, &a, IBV_QP_STATE);
}

RcQp::~RcQp() {
  if (qp_ != nullptr) ibv_destroy_qp(qp_);
}

Status RcQp::connect(const QpAddress& remote, std::string* why) {
  const Choice& c = dev_->choice();
  const uint32_t mtu = std::min(local_.mtu, remote.mtu);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(c.port);
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC;
  if (ibv_modify_qp(qp_, &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    *why = where(*dev_, "INIT", mtu);
    return Code::kInvalidArg;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu_enum(mtu);
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = opts_.rd_atomic;
  a.min_rnr_timer = 12;  // 0.64 ms
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(c.gid.index);
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.dlid = remote.lid;
  a.ah_attr.port_num = static_cast<uint8_t>(c.port);
  if (ibv_modify_qp(qp_, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    *why = where(*dev_, "RTR", mtu);
    return Code::kInvalidArg;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = opts_.timeout;
  a.retry_cnt = opts_.retry_cnt;
  a.rnr_retry = opts_.rnr_retry;
  a.sq_psn = local_.psn;
  a.max_rd_atomic = opts_.rd_atomic;
  if (ibv_modify_qp(qp_, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    *why = where(*dev_, "RTS", mtu);
    return Code::kInvalidArg;
  }
  return Status::ok();
}

namespace {

Status post(ibv_qp* qp, ibv_send_wr* wr) {
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qp, wr, &bad);
  if (rc == 0) return Status::ok();
  return rc == ENOMEM ? Code::kNoResource : Code::kInvalidArg;
}

}  // namespace

// One RDMA WRITE or READ of [loff, loff + len) of `local`.
Status RcQp::rdma(int opcode, uint64_t wr_id, const Region& local, uint64_t loff, uint64_t raddr,
                  uint32_t rkey, uint32_t len, bool signaled) {
  if (loff > local.size() || len > local.size() - loff) return Code::kOutOfBounds;
  ibv_sge sge{local.addr() + loff, len, local.lkey()};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = static_cast<ibv_wr_opcode>(opcode);
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  if (opcode == IBV_WR_RDMA_WRITE && len <= max_inline_) wr.send_flags |= IBV_SEND_INLINE;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return post(qp_, &wr);
}

Status RcQp::write(uint64_t wr_id, const Region& local, uint64_t loff, uint64_t raddr,
                   uint32_t rkey, uint32_t len, bool signaled) {
  return rdma(IBV_WR_RDMA_WRITE, wr_id, local, loff, raddr, rkey, len, signaled);
}

Status RcQp::read(uint64_t wr_id, const Region& local, uint64_t loff, uint64_t raddr, uint32_t rkey,
                  uint32_t len, bool signaled) {
  return rdma(IBV_WR_RDMA_READ, wr_id, local, loff, raddr, rkey, len, signaled);
}

namespace {

Status atomic(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, const Region& local, uint64_t loff,
              uint64_t raddr, uint32_t rkey, uint64_t compare_add, uint64_t swap) {
  if (loff % 8 != 0 || raddr % 8 != 0) return Code::kAlign;
  if (loff > local.size() || local.size() - loff < 8) return Code::kOutOfBounds;
  ibv_sge sge{local.addr() + loff, 8, local.lkey()};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = raddr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  return post(qp, &wr);
}

}  // namespace

Status RcQp::fetch_add(uint64_t wr_id, const Region& local, uint64_t loff, uint64_t raddr,
                       uint32_t rkey, uint64_t add) {
  return atomic(qp_, IBV_WR_ATOMIC_FETCH_AND_ADD, wr_id, local, loff, raddr, rkey, add, 0);
}

Status RcQp::compare_swap(uint64_t wr_id, const Region& local, uint64_t loff, uint64_t raddr,
                          uint32_t rkey, uint64_t expect, uint64_t desired) {
  return atomic(qp_, IBV_WR_ATOMIC_CMP_AND_SWP, wr_id, local, loff, raddr, rkey, expect, desired);
}

}  // namespace lt::transport::verbs
