// uroce's XDP program for a netdev shared with the kernel (config key `netdev`, docs/netdev.md).
//
// RoCEv2 frames (UDP destination port 4791 over IPv4 or IPv6, untagged or behind up to two VLAN
// tags) go to the AF_XDP socket of the receive queue they arrived on (the map `xsks_map`, which
// DPDK's af_xdp PMD fills: its devarg xdp_prog= loads this file); every other frame (ARP, ND,
// ICMP, TCP, other UDP) goes on to the kernel. The kernel therefore never sees a RoCE frame while
// uroce is attached, and never answers one with ICMP port unreachable. If no socket is bound on a
// queue, bpf_redirect_map's fallback passes the frame to the kernel (as without uroce).
//
// IPv4 fragments other than the first carry no UDP header: they go to the kernel, as do IPv6
// frames whose UDP header follows extension headers (RoCEv2 sends none).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ROCEV2_PORT 4791
#define MAX_QUEUES 256
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, MAX_QUEUES);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

// Frames handed to uroce and passed to the kernel, per CPU (bpftool map dump name roce_counts).
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} roce_counts SEC(".maps");

struct vlan_hdr {
  __be16 tci;
  __be16 proto;
};

static __always_inline int count(__u32 which, int verdict) {
  __u64* n = bpf_map_lookup_elem(&roce_counts, &which);
  if (n) *n += 1;
  return verdict;
}

SEC("xdp")
int uroce_roce(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* end = (void*)(long)ctx->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end) return count(1, XDP_PASS);
  __u16 proto = eth->h_proto;
  void* l3 = eth + 1;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD)) break;
    struct vlan_hdr* v = l3;
    if ((void*)(v + 1) > end) return count(1, XDP_PASS);
    proto = v->proto;
    l3 = v + 1;
  }
  struct udphdr* udp;
  if (proto == bpf_htons(ETH_P_IP)) {
    struct iphdr* ip = l3;
    if ((void*)(ip + 1) > end || ip->ihl < 5 || ip->protocol != IPPROTO_UDP) return count(1, XDP_PASS);
    if (ip->frag_off & bpf_htons(IP_OFFSET)) return count(1, XDP_PASS);
    udp = (void*)ip + ip->ihl * 4;
  } else if (proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr* ip6 = l3;
    if ((void*)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP) return count(1, XDP_PASS);
    udp = (void*)(ip6 + 1);
  } else {
    return count(1, XDP_PASS);
  }
  if ((void*)(udp + 1) > end || udp->dest != bpf_htons(ROCEV2_PORT)) return count(1, XDP_PASS);
  count(0, 0);
  return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
