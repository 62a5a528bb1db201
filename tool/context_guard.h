// Scope guards for the tool's own CUDA calls: InTool marks them, so that the
// tool's callbacks ignore them; CurrentContext makes a context current for them.
#pragma once
#include <cuda.h>

#include "cuda_driver.h"

namespace gpuobs {

// Set while the tool itself calls CUDA, so its own callbacks ignore those calls.
extern thread_local bool g_in_tool;

struct InTool {
    bool saved;
    InTool() : saved(g_in_tool) { g_in_tool = true; }
    ~InTool() { g_in_tool = saved; }
};

// Makes a context current on this thread for a scope. Callbacks run on the
// program's threads, whose current context may be another one or none (a
// driver-API program's context is created before it is made current).
struct CurrentContext {
    bool pushed = false;
    explicit CurrentContext(CUcontext ctx) { pushed = driver().ctx_push(ctx) == CUDA_SUCCESS; }
    ~CurrentContext() {
        CUcontext popped;
        if (pushed) driver().ctx_pop(&popped);
    }
};

}  // namespace gpuobs
