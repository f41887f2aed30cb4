// The uroce service's daemon (uroced; docs/service.md): one device, its link (a DpdkLink in a
// DPDK primary process with hugepage memory), shared by every process that attaches. Each
// process keeps its own engine (QPs, CQs, MRs, PDs) and is a DPDK secondary that sees the
// daemon's mbufs and four rings of its own (port/service/protocol.hpp). The daemon polls the
// port, unless a process drives it (port/service/pump.hpp: memif, where a DPDK secondary can).
//
// What the daemon decides, frame by frame (deliver()):
//   - a frame to QP n goes to the process whose id tag is n's low bits (kServiceTagBits);
//   - a CM MAD to QP 1 goes by the MAD: REQ and SIDR_REQ to the process that listens on the
//     service ID, every other CM message to the process whose tag the receiver's communication
//     ID (remote comm ID; SIDR_REP: request ID) carries;
//   - a frame a process sends to the device's own MAC comes back in here, not onto the wire
//     (loopback across processes).
// Frames for nobody are counted and freed. ARP, ND and ICMP are the link's (once per device), as
// are the GID table and the neighbours: processes ask the daemon to resolve a peer.
// A process's socket closing (exit, crash, SIGKILL) frees its slot: its rings are emptied and
// reset, its listens end, its QP numbers deliver to nobody from then on.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "port/config.hpp"
#include "port/dpdk_link.hpp"
#include "port/param.hpp"
#include "port/service/access.hpp"
#include "port/service/pump.hpp"

struct rte_ring;

namespace uroce::port::service {

struct Welcome;
struct Gids;

class Daemon {
 public:
  // Opens the link of `cfg` as a DPDK primary (hugepages, --file-prefix uroced-NAME) and the
  // control socket. nullptr and `err` on failure (another daemon for the name, no hugepages).
  static std::unique_ptr<Daemon> open(const EndpointConfig& cfg, std::string& err);
  ~Daemon();

  // Serves until `stop` is set (a signal handler sets it), then tells every process and closes.
  void run(const std::atomic<bool>& stop);
  // Whether the daemon alone polls the port (af_xdp, af_packet, `service_drive = off`): then it is
  // the device's data path, and uroced runs it ahead of the programs (kServiceRtPriority). Where
  // processes may drive the port (memif) it mostly waits on its sockets, and stays as they are.
  bool polls_alone() const { return !(drive_allowed_ && link_->secondaries_can_poll()); }

  DpdkLink& link() { return *link_; }

  struct Counters {
    uint64_t delivered = 0, looped = 0, sent = 0, no_owner = 0, ring_full = 0, cm_unowned = 0;
    uint64_t attached = 0, detached = 0, wills_sent = 0, wills_lost = 0, reclaimed = 0;  // reclaimed: buffers taken back from gone processes
    uint64_t from_drivers = 0, driver_deaths = 0;  // frames drivers handed over; drivers that died holding the port
    uint64_t groups_full = 0;  // multicast joins past param::kServiceMaxGroups (their datagrams not delivered)
    // The pool's buffers, and the fewest of them free when the daemon looked (every
    // kServiceControlNs while it polls; the fill rings it tops up are not free).
    uint64_t pool_size = 0, pool_low = UINT64_MAX;
    // The longest time between two of the daemon's steps (a nap that overslept, the CPU taken
    // by other threads) while it moves the frames: the device stood still that long.
    uint64_t longest_pause_ns = 0;
  };
  // What processes that drove the port did (zero when none could).
  const PumpShared* driving() const { return sh_; }
  const Counters& counters() const { return ctr_; }
  // Frames the port received while the daemon served, by whoever polled it (the device's own
  // count, looked at every kServiceControlNs; a memif link that comes up again counts anew).
  uint64_t port_received() const { return port_rx_before_ + port_rx_now_; }

 private:
  struct Slot {
    int fd = -1;
    int32_t pid = 0;
    std::string comm;
    std::set<uint64_t> listens;
    std::map<uint32_t, std::vector<uint8_t>> wills;  // by CM ID: DREQs to send if the process dies
    uint64_t tx_frames = 0;  // moved by the daemon (frames in: Pump::frames_in)
    bool live() const { return fd >= 0; }
  };
  Daemon() = default;
  bool make_rings(std::string& err);
  bool step(uint64_t now);            // one pass over the port and every slot, begun at `now`; true if busy
  bool from_drivers();                // the frames drivers handed over, sorted as if received
  // Frames to their owners' rx rings (Pump::deliver); those of nobody, or that find the ring
  // full, freed (counted).
  void deliver(void** mbufs, size_t n);
  int owner_of(const uint8_t* frame, uint32_t len);  // slot, or Pump::kNobody
  // The port for the daemon: waits while a live process holds it (a step's time); takes it
  // from one that died holding it. Hold nests.
  struct Hold {
    explicit Hold(Daemon& d);
    ~Hold();
    Daemon& d;
    bool mine;
  };
  void take_port();
  bool holder_gone(uint32_t slot) const;
  void update_drive();
  void count_port_rx();               // port_received()
  void note_pool();                   // Counters::pool_low
  void update_share();                // PumpShared::share, when a process comes or goes
  void control(int wait_ms = 0);      // sockets: attach, messages, detach (waiting up to wait_ms for one)
  void accept_one();
  void on_message(uint32_t i);
  void detach(uint32_t i, const char* why);
  void group(uint32_t i, const uint8_t* gid, bool on);  // Msg::Group (and a process's end)
  void fill_welcome(uint32_t i, Welcome& w) const;
  Gids gids_message() const;          // the link's GID table as sent to processes
  void send_gids();
  size_t execute_wills(Slot& s);  // the DREQs sent

  std::unique_ptr<DpdkLink> link_;
  std::string prefix_;
  Access access_;                     // who may attach besides root and our user (access.hpp)
  std::string runtime_dir_;           // our EAL's runtime directory (sent to processes)
  int listen_fd_ = -1;
  int doorbell_ = -1;                 // eventfd: drivers ring it when they hand us frames
  std::vector<Slot> slots_ = std::vector<Slot>(param::kServiceMaxProcs);
  std::unique_ptr<Pump> pump_;
  PumpShared* sh_ = nullptr;
  bool held_ = false;
  bool drive_allowed_ = true;         // config service_drive
  bool link_was_up_ = false;
  uint64_t port_rx_before_ = 0, port_rx_now_ = 0;  // port_received(): earlier connections', this one's
  Counters ctr_;
  uint64_t last_step_ns_ = 0;  // the last step()'s start (0: processes drive, or none yet)
  Pump::OwnerFn owner_fn_;
  Pump::WireFn wire_fn_;
  void count(const Pump::Counts& c);
  static constexpr uint32_t kOwnerMask = param::kServiceMaxProcs - 1;  // a QPN's or CM ID's slot bits
};

// Makes sure of `mb` MB of free 2 MB hugepages (reserving more if needed; root) and a hugetlbfs
// mount; false and `err` (what to do) when not.
bool ensure_hugepages(uint32_t mb, std::string& err);

}  // namespace uroce::port::service
