// Work completions as verbs reports them: the one place a Wc is filled in.
#pragma once
#include "engine/qp.hpp"

namespace uroce::engine {

inline WcOpcode wc_opcode(WrOpcode o) {
  switch (o) {
    case WrOpcode::RdmaWrite:
    case WrOpcode::RdmaWriteWithImm: return WcOpcode::RdmaWrite;
    case WrOpcode::RdmaRead: return WcOpcode::RdmaRead;
    case WrOpcode::AtomicCmpSwp: return WcOpcode::CompSwap;
    case WrOpcode::AtomicFetchAdd: return WcOpcode::FetchAdd;
    case WrOpcode::LocalInv: return WcOpcode::LocalInv;
    case WrOpcode::BindMw: return WcOpcode::BindMw;
    case WrOpcode::Flush: return WcOpcode::Flush;
    case WrOpcode::AtomicWrite: return WcOpcode::AtomicWrite;
    default: return WcOpcode::Send;
  }
}

// A send WQE's completion: byte_len is the message length on success, 0 otherwise.
inline Wc send_wc(const Qp& qp, const SendWqe& w, WcStatus st) {
  Wc wc;
  wc.wr_id = w.wr.wr_id;
  wc.status = st;
  wc.opcode = wc_opcode(w.wr.opcode);
  wc.qp_num = qp.qpn();
  wc.byte_len = st == WcStatus::Success ? w.length : 0;
  return wc;
}

// A receive WQE's completion (success: the caller adds byte_len, imm, flags).
inline Wc recv_wc(const Qp& qp, uint64_t wr_id, WcStatus st, WcOpcode op = WcOpcode::Recv) {
  Wc wc;
  wc.wr_id = wr_id;
  wc.status = st;
  wc.opcode = op;
  wc.qp_num = qp.qpn();
  if (st == WcStatus::Success) wc.src_qp = qp.attrs.dest_qp_num;
  return wc;
}

}  // namespace uroce::engine
