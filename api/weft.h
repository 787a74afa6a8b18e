// api/weft.h: weft's public facade, one include for an application: the runtime (fibers,
// join handles, task groups, blocking work, fiber-local storage), the sync primitives that park
// fibers (timers among them), stackless tasks (C++20 coroutines) beside fibers, fiber I/O with
// the TCP and UDP types, files, and signal waits.
// Bazel target: //api:weft. docs/api.md has the tour.

#ifndef WEFT_API_WEFT_H_
#define WEFT_API_WEFT_H_

#include "weft/api/fs.h"                // IWYU pragma: export
#include "weft/api/io.h"                // IWYU pragma: export
#include "weft/api/net.h"               // IWYU pragma: export
#include "weft/api/signals.h"           // IWYU pragma: export
#include "weft/base/result.h"           // IWYU pragma: export
#include "weft/scheduler/runtime.h"     // IWYU pragma: export
#include "weft/scheduler/simulation.h"  // IWYU pragma: export
#include "weft/scheduler/task.h"        // IWYU pragma: export
#include "weft/scheduler/task_group.h"  // IWYU pragma: export
#include "weft/sync/cancellation.h"     // IWYU pragma: export
#include "weft/sync/channel.h"          // IWYU pragma: export
#include "weft/sync/coordination.h"     // IWYU pragma: export
#include "weft/sync/mutex.h"            // IWYU pragma: export
#include "weft/sync/timer.h"            // IWYU pragma: export

#endif  // WEFT_API_WEFT_H_
