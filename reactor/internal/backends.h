// reactor/internal/backends.h: the backend factories that Reactor::create chooses between.

#ifndef WEFT_REACTOR_INTERNAL_BACKENDS_H_
#define WEFT_REACTOR_INTERNAL_BACKENDS_H_

#include <memory>

#include "base/result.h"
#include "reactor/reactor.h"

namespace weft::reactor_internal {

Result<std::unique_ptr<Reactor>> MakeEpollReactor(const ReactorOptions& options);
// Defined only when the io_uring backend is compiled in (see reactor/BUILD.bazel).
Result<std::unique_ptr<Reactor>> MakeIoUringReactor(const ReactorOptions& options);

}  // namespace weft::reactor_internal

#endif  // WEFT_REACTOR_INTERNAL_BACKENDS_H_
