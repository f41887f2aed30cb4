// The boundary between the engine and whatever carries its frames. The engine builds complete
// RoCEv2 Ethernet frames (ICRC included) into buffers the link lends it, and receives frames
// in batches. The DPDK port implements Link over mbufs; FakeLink implements it in memory.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace uroce::engine {

struct PacketBuf {
  uint8_t* data = nullptr;
  uint32_t len = 0;       // bytes of frame
  uint32_t cap = 0;       // bytes available at data
  void* handle = nullptr; // the link's own bookkeeping (an mbuf, a pool slot)
};

class Link {
 public:
  virtual ~Link() = default;
  // Lends a transmit buffer of at least `len` bytes; false when none is free right now.
  virtual bool alloc(PacketBuf& b, uint32_t len) = 0;
  // Sends up to n frames; returns how many it took. The link owns the taken ones; the
  // caller keeps (and must free or retry) the rest.
  virtual size_t send(PacketBuf* bufs, size_t n) = 0;
  // Receives up to max frames. The caller returns each one with release().
  virtual size_t recv(PacketBuf* bufs, size_t max) = 0;
  // Gives back a buffer from alloc() (unsent) or recv() (processed).
  virtual void release(PacketBuf& b) = 0;
  // Largest frame the link carries (Ethernet header included, FCS excluded).
  virtual uint32_t max_frame() const = 0;
  // The device's membership of a multicast group (its GID) begins (its first QP attached) or
  // ends (its last QP gone). A link beside the kernel has the kernel join the group on the
  // interface (IGMP or MLD report, the group's MAC let in), as rdma_cm does for rxe; others
  // need nothing. 0 or an errno, which ibv_attach_mcast returns.
  virtual int join_group(const std::array<uint8_t, 16>& /*group*/, bool /*join*/) { return 0; }
  // Notes for a capture, of what no frame shows: the rate a CNP made a QP's sender take. A link
  // that keeps a capture (key capture) wants them, and the next frame it writes to the capture
  // carries the text as its comment (pcapng opt_comment), which tshark shows as frame.comment
  // and uroce-dissect beside the frame. Others keep nothing, and the engine writes no text.
  virtual bool wants_notes() const { return false; }
  virtual void note(std::string_view /*text*/) {}
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() const = 0;
};

}  // namespace uroce::engine
