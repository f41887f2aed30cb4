// ServiceLink: this process's share of a device the uroce service owns (docs/service.md; the
// daemon: port/service/daemon.hpp). The process is a DPDK secondary of the daemon: it sees the
// daemon's mbufs at the same addresses and moves them through four rings of its own (frames in,
// frames out, empty buffers in, used buffers out), each with one producer and one consumer.
// Where the daemon allows it (memif), the process drives the port itself whenever it is free
// (port/service/pump.hpp): it then moves every process's frames for that step, and only then
// touches the mbuf pool. Control (attach, listens, resolution, GID changes, the daemon's end)
// goes over a unix socket.
//
// Single-threaded like the engine (the shim's token serialises its callers).
#pragma once
#include <map>
#include <memory>
#include <string>

#include "port/port_link.hpp"
#include "port/service/protocol.hpp"
#include "port/service/pump.hpp"

struct rte_ring;

namespace uroce::port::service {

class ServiceLink : public PortLink {
 public:
  // Whether a daemon serves device `name` in this network namespace.
  static bool available(const std::string& name);
  // Attaches: hello and welcome on the socket, then the EAL as the daemon's secondary.
  static std::unique_ptr<ServiceLink> attach(const EndpointConfig& cfg, std::string& err);
  ~ServiceLink() override;

  bool alloc(engine::PacketBuf& b, uint32_t len) override;
  size_t send(engine::PacketBuf* bufs, size_t n) override;
  size_t recv(engine::PacketBuf* bufs, size_t max) override;
  void release(engine::PacketBuf& b) override;
  uint32_t max_frame() const override { return max_frame_; }

  bool wait_link_up(uint32_t) override { return alive_; }
  bool link_up_now(bool) const override { return alive_; }
  bool lookup(const proto::Ip6& gid, proto::Mac& out) const override;
  bool resolve(const proto::Ip6& gid, proto::Mac& out, const std::function<void()>& pump = {}) override;
  bool poll_addresses() override;
  bool alive() const override { return alive_; }
  std::string describe() const override;
  std::string counters_text() const override;

  std::string runtime_dir() const override { return runtime_dir_; }
  uint32_t tag() const { return slot_; }
  uint8_t tag_bits() const { return uint8_t(tag_bits_); }
  // The engine's CM started (true) or stopped (false) listening on `service_id`.
  void announce_listen(uint64_t service_id, bool on);
  // The frame to send for CM connection `id` if this process dies (empty: none any more).
  void leave_will(uint32_t id, const std::vector<uint8_t>& frame);
  // The engine's first QP joined multicast group `gid`, or its last left: the daemon hands the
  // group's datagrams to this process (and has the kernel join the group on a netdev).
  int join_group(const std::array<uint8_t, 16>& gid, bool join) override;

 private:
  ServiceLink() = default;
  void read_control();          // every message waiting; the daemon's end
  void take_gids(const Gids& g);
  void flush_free();
  void start_telemetry();
  bool set_up_driving(const Welcome& w);  // false: this process goes through the rings only
  bool may_drive();             // the daemon lets processes drive, in the link's epoch we began in
  size_t drive_step(void** mine, size_t cap);  // one step of the port's, holding it (pump.hpp)
  std::string runtime_dir_;  // this process's telemetry socket's directory (empty: none)

  int fd_ = -1;
  bool alive_ = true;
  bool gids_changed_ = false;
  uint32_t slot_ = 0, tag_bits_ = 0, max_frame_ = 0;
  std::string describe_;
  rte_ring *rx_ = nullptr, *tx_ = nullptr, *fill_ = nullptr, *free_ = nullptr;
  void* stash_[param::kServiceBurst] = {};   // empty buffers from the fill ring
  uint32_t stash_n_ = 0;
  void* used_[param::kServiceUsed] = {};     // buffers done with: to the pool while driving, else the free ring
  uint32_t used_n_ = 0;
  std::map<proto::Ip6, std::pair<proto::Mac, uint8_t>> neigh_;  // the daemon's answers
  bool have_answer_ = false;
  Resolved answer_;
  uint64_t rx_frames_ = 0, tx_frames_ = 0, alloc_failed_ = 0, tx_full_ = 0;
  // Driving the port (empty pump_: never).
  std::unique_ptr<Pump> pump_;
  PumpShared* sh_ = nullptr;
  uint16_t port_ = 0;
  uint32_t epoch_ = UINT32_MAX;  // the link's epoch this process first drove in
  bool mapped_ = false;          // the memif regions mapped into this process (may_drive)
  Pump::OwnerFn owner_;
  Pump::WireFn wire_;
  Pump::Counts drive_counts_;
  uint64_t drives_ = 0;
  uint64_t marked_tsc_ = 0, mark_every_ = 0;  // the driving time marked (TSC cycles)
  int doorbell_ = -1;           // the daemon's eventfd (Welcome)
};

}  // namespace uroce::port::service
