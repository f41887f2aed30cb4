// One message size of a uroce-perf run, both sides: the server prepares its buffers, the
// client runs the loop, then both verify the data (WRITE/SEND: the target equals the client's
// pattern; READ: CRCs agree; atomics: the counter and the last fetched value) and print a row.
#pragma once
#include <cstdint>

namespace uroce::perf {

struct Ctx;

// Returns false on a verification failure (either side's).
bool run_size(Ctx& c, uint64_t size);

}  // namespace uroce::perf
