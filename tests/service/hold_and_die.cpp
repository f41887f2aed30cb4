// hold_and_die CONFIG: attaches to the uroced that serves CONFIG's device, takes the device's port
// as a driving process does (port/service/pump.hpp) and dies with SIGKILL while holding it, the
// worst moment a driver can die at. Suite service, scenario drive: the daemon must see the death,
// take the port back and keep every other process going.
#include <rte_memzone.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "port/config.hpp"
#include "port/service/client.hpp"
#include "port/service/pump.hpp"

using namespace uroce::port;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hold_and_die CONFIG\n");
    return 2;
  }
  std::string err;
  auto cfg = load_config(argv[1], err);
  if (!cfg) {
    std::fprintf(stderr, "hold_and_die: %s\n", err.c_str());
    return 2;
  }
  auto link = service::ServiceLink::attach(*cfg, err);
  if (!link) {
    std::fprintf(stderr, "hold_and_die: %s\n", err.c_str());
    return 2;
  }
  const rte_memzone* z = rte_memzone_lookup(service::kPumpZone);
  if (!z) {
    std::fprintf(stderr, "hold_and_die: no %s\n", service::kPumpZone);
    return 2;
  }
  auto* sh = static_cast<service::PumpShared*>(z->addr);
  const uint32_t me = link->tag() + 1;
  for (int i = 0; i < 1'000'000; ++i) {
    uint32_t free_now = 0;
    if (sh->holder.compare_exchange_strong(free_now, me)) {
      std::printf("hold_and_die: slot %u holds the port; SIGKILL\n", link->tag());
      std::fflush(stdout);
      ::kill(::getpid(), SIGKILL);
    }
    usleep(1);
  }
  std::fprintf(stderr, "hold_and_die: the port was never free\n");
  return 1;
}
