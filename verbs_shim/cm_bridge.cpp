// The shim's door for liburoce-rdmacm: the engine's connection manager and the ownership token
// (verbs_shim/cm_bridge.hpp).
#include "verbs_shim/cm_bridge.hpp"

#include <algorithm>
#include <cerrno>

#include "verbs_shim/api.hpp"

namespace uroce::shim::cmb {

namespace {
ecm::Manager* cm() { return rt().engine ? rt().engine->cm() : nullptr; }
}  // namespace

bool start() {
  want_cm();
  return load_cfg() && start_runtime() && cm();
}

void want_cm() { rt().dcfg.cm = true; }

ibv_device* device() { return &rt().identity.dev; }

std::vector<proto::Ip6> gids() {
  Runtime& r = rt();
  std::vector<proto::Ip6> out = r.identity.gids;
  for (size_t i = 0; i < out.size(); ++i)
    if (!r.identity.gid_valid[i]) out[i] = proto::Ip6{};
  return out;
}

engine::Device::Config device_config() {
  Guard g;
  return rt().dcfg;
}

void lock() { rt().token.lock(); }
void unlock() { rt().token.unlock(); }
void set_hook(void (*hook)()) {
  Guard g;
  rt().cm_hook = hook;
}

int listen(uint64_t service_id, uint32_t* id) { return cm() ? cm()->listen(service_id, id) : EIO; }
int connect(const ecm::ConnectParams& p, uint32_t* id) { return cm() ? cm()->connect(p, id) : EIO; }
int accept(uint32_t id, const ecm::AcceptParams& p) { return cm() ? cm()->accept(id, p) : EIO; }
int reject(uint32_t id, uint16_t reason, std::span<const uint8_t> pd) {
  return cm() ? cm()->reject(id, reason, pd) : EIO;
}
int establish(uint32_t id) { return cm() ? cm()->establish(id) : EIO; }
int disconnect(uint32_t id) { return cm() ? cm()->disconnect(id) : EIO; }
int sidr_request(const ecm::SidrParams& p, uint32_t* id) { return cm() ? cm()->sidr_request(p, id) : EIO; }
int sidr_reply(uint32_t id, uint8_t status, uint32_t qpn, uint32_t qkey, std::span<const uint8_t> pd) {
  return cm() ? cm()->sidr_reply(id, status, qpn, qkey, pd) : EIO;
}
int destroy(uint32_t id) { return cm() ? cm()->destroy(id) : EIO; }
bool find(uint32_t id, ecm::Conn& out) {
  const ecm::Conn* c = cm() ? cm()->find(id) : nullptr;
  if (c) out = *c;
  return c != nullptr;
}
bool poll_event(ecm::Event& e) { return cm() && cm()->poll_event(e); }

void qp_to_error(uint32_t qpn) {
  Runtime& r = rt();
  if (!r.engine) return;
  // By number, among the QPs still registered (the token held): the application may be
  // destroying this one on another thread (rdma_destroy_qp while the peer's DREQ arrives).
  auto it = std::find_if(r.registry.qps.begin(), r.registry.qps.end(), [qpn](UQp* q) { return q->e->qpn() == qpn; });
  if (it == r.registry.qps.end()) return;
  UQp* u = *it;
  engine::QpAttr a{};
  a.qp_state = engine::QpState::Err;
  note_qp_state(u);  // an error the engine found before this is reported as such
  // (ibv_qp's own state field is the application's: ibv_query_qp reads the engine's.)
  if (r.engine->modify_qp(u->e, a, engine::kAttrState) == 0) qp_state_set(u, u->e->state());
}

int resolve(const ibv_ah_attr& ah, engine::AddressVector& out) { return resolve_peer(ah, out); }

}  // namespace uroce::shim::cmb
