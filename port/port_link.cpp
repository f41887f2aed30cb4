// PortLink's one shared function (port/port_link.hpp).
#include "port/port_link.hpp"

#include <chrono>
#include <thread>

namespace uroce::port {

void PortLink::sleep_ms(uint32_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace uroce::port
