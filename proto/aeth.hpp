// AETH syndrome: ACK (with credit count), RNR NAK (with the RNR timer code) or NAK (with
// its kind). IBA 9.7.5.1, tables 41-43.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace uroce::proto {

enum class AckKind : uint8_t { Ack, RnrNak, Nak, Reserved };
enum class NakCode : uint8_t {
  PsnSequenceError = 0,
  InvalidRequest = 1,
  RemoteAccessError = 2,
  RemoteOperationalError = 3,
  InvalidRdRequest = 4,
};

inline constexpr uint8_t kCreditsUnlimited = 0x1F;  // what rxe sends on every ACK

struct Syndrome {
  AckKind kind = AckKind::Ack;
  uint8_t value = 0;  // credit count, RNR timer code or NAK code (5 bits)

  static constexpr Syndrome ack(uint8_t credits = kCreditsUnlimited) { return {AckKind::Ack, uint8_t(credits & 0x1F)}; }
  static constexpr Syndrome rnr(uint8_t timer) { return {AckKind::RnrNak, uint8_t(timer & 0x1F)}; }
  static constexpr Syndrome nak(NakCode c) { return {AckKind::Nak, uint8_t(c)}; }

  constexpr uint8_t encode() const {
    switch (kind) {
      case AckKind::Ack: return uint8_t(0x00 | value);
      case AckKind::RnrNak: return uint8_t(0x20 | value);
      case AckKind::Nak: return uint8_t(0x60 | value);
      case AckKind::Reserved: return uint8_t(0x40 | value);
    }
    return 0;
  }
  static constexpr Syndrome decode(uint8_t s) {
    uint8_t v = s & 0x1F;
    switch (s >> 5) {
      case 0: return {AckKind::Ack, v};
      case 1: return {AckKind::RnrNak, v};
      case 3: return {AckKind::Nak, v};
      default: return {AckKind::Reserved, v};
    }
  }
  constexpr NakCode nak_code() const { return NakCode(value); }
  constexpr bool operator==(const Syndrome&) const = default;
};

constexpr std::string_view nak_name(uint8_t code) {
  switch (code) {
    case 0: return "PSN sequence error";
    case 1: return "invalid request";
    case 2: return "remote access error";
    case 3: return "remote operational error";
    case 4: return "invalid RD request";
    default: return "reserved NAK code";
  }
}

// RNR NAK timer codes to microseconds (IBA table 45). Code 0 is the longest, 655.36 ms.
inline constexpr std::array<uint32_t, 32> kRnrTimerUs = {
    655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,    320,
    480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240,  15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

constexpr uint32_t rnr_timer_us(uint8_t code) { return kRnrTimerUs[code & 0x1F]; }

// Local ACK timeout: 4.096 us * 2^timeout; 0 means no timeout. Returned in nanoseconds.
constexpr uint64_t local_ack_timeout_ns(uint8_t timeout) {
  if (timeout == 0) return 0;
  return 4096ull << (timeout & 0x1F);
}

static_assert(Syndrome::decode(0x1f) == Syndrome::ack());
static_assert(Syndrome::decode(0x2e) == Syndrome::rnr(14) && rnr_timer_us(14) == 1280);
static_assert(Syndrome::decode(0x62) == Syndrome::nak(NakCode::RemoteAccessError));
static_assert(Syndrome::nak(NakCode::PsnSequenceError).encode() == 0x60);

}  // namespace uroce::proto
