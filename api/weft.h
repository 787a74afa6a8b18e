// api/weft.h: weft's public facade, one include for an application: the runtime (fibers,
// join handles, blocking work, fiber-local storage), the sync primitives that park fibers, and
// fiber I/O with the TCP types. Bazel target: //api:weft. docs/api.md has the tour.

#ifndef WEFT_API_WEFT_H_
#define WEFT_API_WEFT_H_

#include "api/io.h"             // IWYU pragma: export
#include "api/net.h"            // IWYU pragma: export
#include "base/result.h"        // IWYU pragma: export
#include "scheduler/runtime.h"  // IWYU pragma: export
#include "sync/cancellation.h"  // IWYU pragma: export
#include "sync/channel.h"       // IWYU pragma: export
#include "sync/coordination.h"  // IWYU pragma: export
#include "sync/mutex.h"         // IWYU pragma: export

#endif  // WEFT_API_WEFT_H_
