// The golden captures (../shared/golden, which the build names in UROCE_GOLDEN_DIR) for the
// engine tests that hold our frames next to those of rxe, the kernel CM or a ConnectX NIC.
#pragma once
#include <string>

#ifndef UROCE_GOLDEN_DIR
#error "UROCE_GOLDEN_DIR must be defined by the build"
#endif

namespace uroce::test {

// The path of capture `rel` (as "rxe/write_small.pcap") in the golden folder.
inline std::string golden_path(const std::string& rel) { return std::string(UROCE_GOLDEN_DIR) + "/" + rel; }

}  // namespace uroce::test
