// DpdkLink: the engine's Link over one DPDK ethdev port and queue (any vdev or PCI NIC the EAL
// arguments name), and the small control plane an endpoint with its own IP and MAC needs:
// ARP and IPv6 neighbour discovery (answering for our address, a small neighbour cache filled
// from replies and advertisements, bounded resolution), ICMP/ICMPv6 echo so `ping` works.
// recv() hands the engine only UDP 4791 frames for our MAC and IP; everything else is
// answered here or counted and dropped.
//
// Single-threaded like the engine: one thread calls everything. No DPDK type appears in this
// header, so code that includes it does not need the DPDK include flags. The class is written
// in files by concern: dpdk_link.cpp (open, set-up, teardown), eal.cpp (EAL start-up, thread
// registration), flow_rules.cpp (rte_flow isolation), burst.cpp (the data path and its hooks),
// memif.cpp (link waits, memif specifics), resolve.cpp (neighbour resolution); what they share
// is in dpdk_link_impl.hpp.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/link.hpp"
#include "port/clock.hpp"  // TscClock, the Clock that goes with a DpdkLink
#include "port/capture.hpp"
#include "port/config.hpp"
#include "port/fault_stage.hpp"
#include "port/groups.hpp"
#include "port/link_counters.hpp"
#include "port/neigh.hpp"
#include "port/netlink.hpp"
#include "port/param.hpp"
#include "port/port_link.hpp"

struct rte_mempool;  // DPDK's, declared only
struct rte_eth_dev_info;

namespace uroce::port {

class DpdkLink : public PortLink {
 public:
  // Starts the EAL (once per process) with cfg.eal plus `extra_eal`, then configures and starts
  // the port. nullptr and `err` on failure.
  static std::unique_ptr<DpdkLink> open(const EndpointConfig& cfg, std::string& err,
                                        const std::vector<std::string>& extra_eal = {});
  ~DpdkLink() override;

  bool alloc(engine::PacketBuf& b, uint32_t len) override;
  // The software backlog still holds param::kTxBacklogHigh frames or more after a try to send
  // them (back-pressure): alloc lends no buffer, and the service daemon moves no frames here.
  bool tx_backed_up();
  // The congestion point's record (keys bottleneck_*), for uroce-perf --flow-log: the queue each
  // admitted frame found (TscClock ns, bytes) and when frames were dropped; off until asked for,
  // at most param::kBottleneckLogMax entries.
  struct BottleneckLog {
    bool on = false;
    std::vector<std::pair<uint64_t, uint32_t>> queue;
    std::vector<uint64_t> drops;
  };
  void log_bottleneck(bool on) { bn_log_.on = on; }
  const BottleneckLog& bottleneck_log() const { return bn_log_; }
  size_t send(engine::PacketBuf* bufs, size_t n) override;
  size_t recv(engine::PacketBuf* bufs, size_t max) override;
  void release(engine::PacketBuf& b) override;
  uint32_t max_frame() const override { return max_frame_; }
  // On a netdev: the kernel joins or leaves the group on the interface (port/groups.hpp).
  int join_group(const std::array<uint8_t, 16>& group, bool join) override;

  // Makes the calling thread, if it is not one of the EAL's, a registered DPDK thread with an
  // lcore id of its own (once per thread; released when the thread ends), so that its mbuf
  // allocations and frees go through its own mempool cache instead of the pool's shared ring.
  // For a library that drives the link from whichever application thread holds its token (the
  // verbs shim). false if no lcore id is free (it then works as before, without a cache).
  static bool register_thread();
  // Waits (bounded) until the port reports link up.
  bool wait_link_up(uint32_t timeout_ms) override { return wait_link(true, timeout_ms); }
  // The link's state now, without waiting (`last` if the driver cannot say).
  bool link_up_now(bool last) const override;
  // The EAL's runtime directory of this process (its --file-prefix), empty before the EAL runs.
  static std::string eal_runtime_dir();
  std::string runtime_dir() const override { return eal_runtime_dir(); }
  // Call when this process polls the port no more and will close it. memif's PMD unmaps the
  // shared rings in its interrupt thread when the peer disconnects, even while the peer is
  // inside rte_eth_rx_burst() on them (SIGSEGV): so on memif this waits (bounded) for the peer
  // to disconnect first, and for our interrupt thread to finish handling that, before we
  // close. Other drivers return at once. See docs/port.md "Shutting down a memif pair".
  void await_peer_close(uint32_t timeout_ms) override;

  // Resolves a peer's MAC from its GID (ARP for IPv4-mapped, neighbour solicitation for IPv6),
  // re-asking every 200 ms until cfg.arp_timeout_ms. `pump` is called while waiting: it must
  // call recv() (Device::progress does); without one, recv() is called here and any RoCE
  // frames received meanwhile are dropped.
  bool resolve(const proto::Ip6& gid, proto::Mac& out, const std::function<void()>& pump = {}) override;
  bool lookup(const proto::Ip6& gid, proto::Mac& out) const override;
  // Why the last resolve() failed, when it knows more than "no answer" (a netdev: no route, a
  // route through another interface, the kernel's resolution failed).
  // On a netdev: the hop limit the kernel's route gives the last peer resolve() found (0 on
  // uroce's own link, where the config's hop_limit applies).
  // On a netdev: takes in address changes of the interface (read again when rtnetlink says one
  // was added or removed), keeping each GID at its index as rxe's table does (a removed one
  // becomes zero, an added one takes the first free index from 2). True when gids() changed.
  // Cheap when nothing changed (one non-blocking read); call it now and then, not per burst.
  bool poll_addresses() override;

  // Writes what the capture buffer holds to its file. For programs that end without closing
  // the link (the verbs shim at exit); the destructor does it too.
  void flush_capture() override { cap_.flush(); }
  // The engine's notes (engine::Link::note) go on the next frame the capture keeps, as its
  // comment; without a capture there are none.
  bool wants_notes() const override { return cap_.on(); }
  void note(std::string_view text) override;
  // A netdev shared with the kernel: removes our XDP program, so that the kernel gets back every
  // frame, for programs that end without closing the link (the verbs shim at exit; closing does
  // it too). Nothing may poll the link afterwards.
  void release_netdev() override;

  // Frames another process received from this port (a process of the uroce service that drove
  // it: port/service/pump.hpp), sorted as recv() sorts its own: ARP, ND and ICMP answered, the
  // RoCE frames for us left in `out` (returned: how many), the rest freed.
  size_t take_received(void** mbufs, size_t n, engine::PacketBuf* out);
  // Whether a DPDK secondary process may poll this port instead of us: a memif port, while
  // nothing here sees frames on the way (capture, fault stages).
  bool secondaries_can_poll() const { return is_memif_ && !cap_.on() && !rx_fault_.on() && !tx_fault_.on(); }
  const LinkCounters& counters() const { return ctr_; }
  uint16_t port_id() const { return port_; }
  // Frames the port received, by whoever polled it (the device's own count: rte_eth_stats).
  uint64_t port_rx_frames() const;
  std::string describe() const override;   // driver, port, MAC, addresses
  std::string counters_text() const override;

 private:
  DpdkLink() = default;
  bool wait_link(bool up, uint32_t timeout_ms);
  uint64_t now_ms() const;
  // Set-up (dpdk_link.cpp), step by step; flow rules in flow_rules.cpp.
  bool setup(std::string& err);
  bool pick_port(std::string& err);
  bool create_pool(std::string& err);
  void touch_pool();
  bool configure_port(const rte_eth_dev_info& info, std::string& err);
  void set_mtu(const rte_eth_dev_info& info);
  bool start_port(std::string& err);
  bool start_hooks(std::string& err);
  void set_addresses();
  bool install_flows(std::string& err);
  int socket() const;  // the port's NUMA socket (0 if unknown)
  void classify(void* mbuf, engine::PacketBuf* out, size_t& k);
  bool tx_one(void* m);
  void ask(const proto::Ip6& gid);  // an ARP request or a neighbour solicitation
  void wait_step(const std::function<void()>& pump);
  bool resolve_by_kernel(const proto::Ip6& gid, proto::Mac& out, const std::function<void()>& pump);
  bool claim_netdev(std::string& err);  // netdev.cpp's interface for us alone (netdev_claim.cpp)
  bool share_packet_socket(std::string& err);  // netdev_link = af_packet: the filters (netdev_claim.cpp)

  uint16_t port_ = 0;
  void* pool_ = nullptr;     // rte_mempool*
  uint32_t max_frame_ = 1514;
  bool is_memif_ = false;
  bool memif_client_ = false;   // a memif client: wait_link connects again while the link is down
  uint64_t reconnect_at_ = 0;   // TSC cycles; 0: not waiting yet
  proto::Ip6 ip6_{};         // our first IPv6 address (explicit, else link-local)
  bool have_ip4_ = false;
  uint8_t ip4_[4] = {};
  LinkCounters ctr_;
  ControlPlane ctl_;          // ARP, ND, ICMP and the neighbour cache (port/neigh.hpp)
  // A netdev shared with the kernel (key netdev): the kernel's routes and neighbours instead of
  // ctl_'s cache; the socket that marks the interface ours while we live (netdev_claim.cpp).
  std::unique_ptr<KernelNeighbours> kernel_;  // its requests change no state of ours
  std::unique_ptr<AddressWatch> addr_watch_;
  std::unique_ptr<KernelGroups> groups_;    // multicast groups the kernel joined for us (port/groups.hpp)
  int claim_fd_ = -1;
  std::vector<int> port_guard_fds_;  // af_packet: UDP 4791 held, its datagrams dropped
  std::vector<void*> flows_;  // rte_flow* (flow isolation rules)
  // Capture (key capture): the frames at the wire, received (before the receive fault stage)
  // and sent (after the transmit one). RoCE only unless capture_all.
  Capture cap_;
  bool cap_all_ = false;
  std::string note_;  // notes for the next frame captured (at most param::kCaptureNoteMax bytes)
  void capture(const uint8_t* f, uint32_t len, Capture::Dir dir);
  // Fault injection (keys fault_*): one stage per direction, off unless configured.
  FaultStage rx_fault_, tx_fault_;
  TscClock clock_;            // the held frames' time
  size_t rx_faults(void** ms, size_t fresh, size_t first, size_t cap);
  size_t send_with_faults(engine::PacketBuf* bufs, size_t n);
  void to_wire(void* m);      // capture, then behind the backlog
  void release_tx_held();
  // The congestion point (keys bottleneck_*, engine/bottleneck.hpp): a frame admitted waits
  // here, marked CE or not, until its departure time, then goes to the wire; the rest is dropped.
  engine::Bottleneck bn_;
  struct BnHeld {
    void* m;
    uint64_t depart_ns;
  };
  std::deque<BnHeld> bn_q_;
  BottleneckLog bn_log_;
  void egress(void* m, uint64_t now_ns);  // through the bottleneck when there is one, then to_wire
  void release_bottleneck();
  // Frames the port's queue did not take yet, oldest first (a software extension of the tx
  // ring): sent before anything new, so a momentarily full ring does not become a loss.
  static constexpr uint32_t kBacklog = param::kTxBacklog;
  std::vector<void*> backlog_ = std::vector<void*>(kBacklog);
  uint32_t bl_head_ = 0, bl_n_ = 0;
  bool drain_backlog();
  // Transmit mbufs taken from the pool in bulk (one mempool access per kTxStash frames).
  void* stash_[param::kTxStash] = {};
  uint32_t stash_n_ = 0;

 public:
  // The port's mbuf pool, for tools that build and burst their own frames (uroce-pktgen).
  rte_mempool* mempool() const { return static_cast<rte_mempool*>(pool_); }
};

}  // namespace uroce::port
