// The verbs shim's door for liburoce-rdmacm (verbs_shim/rdmacm/): the one engine Device of the
// process, its connection manager (engine/cm.hpp) and its ownership token, shared by the two
// preloaded libraries. liburoce-rdmacm links against liburoce-verbs and calls these; they are
// the only C++ symbols liburoce-verbs exports besides the ibv_* API (docs/rdma_cm.md, "The
// library").
//
// Calls marked "token held" must be made between lock() and unlock(); the others take the token
// themselves. The hook runs inside Runtime::drive() (token held) after every progress step, on
// whichever thread drives: the poller while the application blocks in rdma_get_cm_event.
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>
#include <span>
#include <vector>

#include "engine/cm.hpp"
#include "engine/engine.hpp"

#define CMB_EXPORT __attribute__((visibility("default")))

namespace uroce::shim::cmb {

namespace ecm = engine::cm;

// Loads the config and starts the runtime with the connection manager on (the first call
// decides; later calls return the same answer). False if there is no uroce device (said on stderr).
CMB_EXPORT bool start();
// Asks for the CM before the runtime starts (liburoce-rdmacm's constructor): a program that
// opens the device with ibv_open_device before its first rdma_* call still gets it.
CMB_EXPORT void want_cm();
CMB_EXPORT ibv_device* device();
// The GID table as the application sees it (index 0 link-local, 1 IPv4-mapped, 2.. IPv6);
// an invalid entry is all zero. After start().
CMB_EXPORT std::vector<proto::Ip6> gids();
// The device's configuration (its CM keys: response timeout, resends). After start().
CMB_EXPORT engine::Device::Config device_config();

CMB_EXPORT void lock();
CMB_EXPORT void unlock();
// hook() is called with the token held after each progress step (nullptr: none).
CMB_EXPORT void set_hook(void (*hook)());

// The connection manager's calls (engine/cm.hpp), token held. EIO when the CM is off.
CMB_EXPORT int listen(uint64_t service_id, uint32_t* id);
CMB_EXPORT int connect(const ecm::ConnectParams& p, uint32_t* id);
CMB_EXPORT int accept(uint32_t id, const ecm::AcceptParams& p);
CMB_EXPORT int reject(uint32_t id, uint16_t reason, std::span<const uint8_t> private_data);
CMB_EXPORT int establish(uint32_t id);
CMB_EXPORT int disconnect(uint32_t id);
CMB_EXPORT int sidr_request(const ecm::SidrParams& p, uint32_t* id);
CMB_EXPORT int sidr_reply(uint32_t id, uint8_t status, uint32_t qpn, uint32_t qkey,
                          std::span<const uint8_t> private_data);
CMB_EXPORT int destroy(uint32_t id);
CMB_EXPORT bool find(uint32_t id, ecm::Conn& out);  // a copy of the connection object
CMB_EXPORT bool poll_event(ecm::Event& e);
// Token held: the application's QP number `qpn` (if it still exists) to the error state, as its
// own ibv_modify_qp would (no IBV_EVENT_QP_FATAL): its outstanding work requests complete flushed.
CMB_EXPORT void qp_to_error(uint32_t qpn);

// The peer's MAC for an address vector (link up, then ARP/ND; verbs_shim/qp.cpp resolve_peer):
// 0, EINVAL or ETIMEDOUT. Takes the token step by step itself.
CMB_EXPORT int resolve(const ibv_ah_attr& ah, engine::AddressVector& out);

}  // namespace uroce::shim::cmb
