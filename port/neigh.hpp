// The control plane of one endpoint, on frame bytes only (no DPDK): sorting received frames
// (RoCEv2 for us, ARP, ICMP, ICMPv6, the rest), answering ARP requests and IPv6 neighbour
// solicitations for our address and ICMP / ICMPv6 echo requests in place, a small neighbour
// cache filled from ARP and ND, and the ARP request / neighbour solicitation frames that ask
// for a peer's MAC. DpdkLink (dpdk_link.hpp) owns one and moves the mbufs.
//
// Headers are found with proto::locate() (so VLAN-tagged frames are handled like untagged
// ones; an answer keeps the request's tags) and read and written through proto's views.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "port/param.hpp"

#include "proto/packet.hpp"

namespace uroce::port {

struct LinkCounters;  // port/link_counters.hpp

// The IPv4-mapped IPv6 address ::ffff:a.b.c.d (how the cache and the GIDs hold IPv4 addresses).
proto::Ip6 v4mapped(const uint8_t ip[4]);

// The MACs of up to kNeighbours neighbours by address (IPv4 as v4-mapped IPv6), oldest
// replaced first, with the kernel's defaults against poisoning (docs/security.md): an entry is
// created only by an answer to a request of ours still outstanding or by a request addressed
// to us; an unsolicited reply or advertisement only refreshes an existing entry; entries age
// out after kNeighbourTtlMs and are resolved again. Times are in ms (any monotonic clock).
class Neighbours {
 public:
  enum class Learnt : uint8_t { Added, Refreshed, Changed, Ignored };
  // A request of ours for `ip` went out (an answer within kNeighbourPendingMs may create).
  void asked(const proto::Ip6& ip, uint64_t now_ms);
  // `may_create`: a request addressed to us (as the kernel, which learns the asker).
  Learnt learn(const proto::Ip6& ip, const uint8_t* mac, uint64_t now_ms, bool may_create = false);
  bool lookup(const proto::Ip6& ip, proto::Mac& out, uint64_t now_ms) const;

 private:
  struct Entry {
    proto::Ip6 ip{};
    proto::Mac mac{};
    uint64_t at_ms = 0;
    bool valid = false;
  };
  struct Pending {
    proto::Ip6 ip{};
    uint64_t at_ms = 0;
    bool valid = false;
  };
  std::array<Entry, param::kNeighbours> entries_{};
  std::array<Pending, param::kNeighbours> pending_{};
  uint32_t next_ = 0, next_pending_ = 0;
};

// What to do with a received frame.
struct Verdict {
  enum Kind : uint8_t { Drop, Deliver, Reply };
  Kind kind = Drop;
  uint32_t len = 0;           // Reply: the answer's length, written over the frame
  uint64_t* sent = nullptr;   // Reply: the counter to bump once the answer is sent
};

class ControlPlane {
 public:
  // Our addresses (ip4 nullptr: no IPv4 address) and the counters sort() updates.
  // Our IPv6 addresses: the link-local one first (it sends our neighbour solicitations). IPv4-mapped
  // entries among them are more IPv4 addresses (a netdev's after its first): RoCE to them is ours,
  // ARP and ping are answered for `ip4` only (on a netdev the kernel answers them all).
  void init(const proto::Mac& mac, const uint8_t* ip4, const std::vector<proto::Ip6>& ip6s, LinkCounters* ctr);

  // Sorts one received frame of `len` bytes in a buffer of `cap` bytes: RoCEv2 to our MAC and
  // IP is Deliver; ARP, ND and echo requests for us are answered over the frame (Reply);
  // everything else is counted and Drop. Replies and advertisements are learnt.
  Verdict sort(uint8_t* f, uint32_t len, uint32_t cap);

  // The time (ms, monotonic) that sort(), the requests and lookup() go by.
  void set_time_ms(uint64_t now_ms) { now_ms_ = now_ms; }
  bool lookup(const proto::Ip6& ip, proto::Mac& out) const { return neigh_.lookup(ip, out, now_ms_); }

  // Writes an ARP request for `ip` / a neighbour solicitation for `target` at `f` (room for 86
  // bytes) and returns its length.
  // The request is remembered as outstanding (its answer may create an entry).
  uint32_t arp_request(uint8_t* f, const uint8_t ip[4]);
  uint32_t neighbour_solicit(uint8_t* f, const proto::Ip6& target);

  Neighbours& neighbours() { return neigh_; }
  const Neighbours& neighbours() const { return neigh_; }

 private:
  Verdict on_arp(uint8_t* f, uint32_t len, size_t l3);
  Verdict on_icmp4(uint8_t* f, uint32_t len, size_t l3);
  Verdict on_icmp6(uint8_t* f, uint32_t len, uint32_t cap, size_t l3);
  void learn(const proto::Ip6& ip, const uint8_t* mac, bool may_create);
  // The Ethernet header of an answer: to `dst`, from us (VLAN tags stay as they were).
  void answer_to(uint8_t* f, const uint8_t* dst) const;

  proto::Mac mac_{};
  bool have_ip4_ = false;
  uint8_t ip4_[4] = {};
  std::vector<proto::Ip6> ip6s_;
  std::vector<std::array<uint8_t, 4>> more4_;  // IPv4 addresses after ip4_
  bool own4(const uint8_t* a) const;
  LinkCounters* ctr_ = nullptr;
  // Is `a` (16 bytes) one of our IPv6 addresses?
  const proto::Ip6* own6(const uint8_t* a) const;
  Neighbours neigh_;
  uint64_t now_ms_ = 0;
};

}  // namespace uroce::port
