// Conversions between the ibv_* structures and the engine's types: the device and port
// attribute tables, work requests, work completions, QP attributes and access flags.
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

#include "engine/engine.hpp"

namespace uroce::shim {

// The attribute tables of ibv_query_device and ibv_query_port (runtime started).
void fill_device_attr(ibv_device_attr* a);
void fill_port_attr(ibv_port_attr* a);
uint64_t device_cap_flags();                  // device_cap_flags, also over RDMA netlink
uint32_t port_cap_flags();                    // port_cap_flags, also over RDMA netlink
enum ibv_mtu mtu_limit_enum();                // the largest path MTU the link carries
uint64_t guid_from_mac(const proto::Mac& m);  // node GUID: EUI-64, network byte order

// Work requests and completions. The engine's SGE has ibv_sge's layout: sg_list is shared.
engine::SendWr to_engine(const ibv_send_wr& wr, ibv_qp_type type);
engine::RecvWr to_engine(const ibv_recv_wr& wr);
void to_ibv_wc(const engine::Wc& s, ibv_wc& d);

// QP attributes. The address vector is not converted here: its MAC is resolved on the link
// (qp.cpp, resolve_peer).
engine::QpAttr to_engine(const ibv_qp_attr& a);
void to_ibv_qp_attr(const engine::QpAttr& e, const engine::QpInitAttr& init, ibv_qp_attr* a);
ibv_qp_cap to_ibv(const engine::QpCap& c, bool srq);   // with an SRQ, max_recv_wr is 0

// Memory registration access flags: the flags the engine gets, or false if the set is refused
// (EINVAL). Optional-range flags other than relaxed ordering are dropped.
bool mr_access(unsigned access, unsigned& out);

// The sender's address from the 40-byte GRH area in front of a UD receive's payload, into
// `ah`'s GRH fields (is_global, dgid, flow_label, hop_limit, traffic_class, sgid_index; the
// caller sets port, SL, rate). RoCEv2 over IPv6: the area is the IPv6 header (dgid = source
// address; flow label, hop limit and traffic class from it). Over IPv4: 20 bytes (zero) then the
// IPv4 header (dgid = ::ffff:source; traffic class = TOS, hop limit = TTL, flow label 0).
// sgid_index: the entry of `gids` (valid where `valid`) equal to the packet's destination.
// Returns 0, or EINVAL (neither header) or ENOENT (the destination is not one of our GIDs).
int grh_to_ah_attr(const uint8_t* grh, const std::vector<proto::Ip6>& gids, const std::vector<bool>& valid,
                   ibv_ah_attr& ah);

}  // namespace uroce::shim
