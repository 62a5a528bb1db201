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

// At the start of a thread of the tool's own (the drain, the ring measurement):
// every CUDA call on it is the tool's, made in the relaxed capture mode. Its
// copies use a non-blocking stream of its own, nothing a graph captured in the
// global mode on another thread can depend on, so they do not invalidate it.
inline void become_tool_thread() {
    g_in_tool = true;
    CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (driver().exchange_capture_mode != nullptr) driver().exchange_capture_mode(&relaxed);
}

// The relaxed stream-capture mode on this thread for a scope, so that the tool's
// own calls never invalidate a graph another thread captures in the global mode.
struct RelaxedCapture {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    bool exchanged = false;
    RelaxedCapture() {
        exchanged = driver().exchange_capture_mode != nullptr && driver().exchange_capture_mode(&mode) == CUDA_SUCCESS;
    }
    ~RelaxedCapture() {
        if (exchanged) driver().exchange_capture_mode(&mode);
    }
    RelaxedCapture(const RelaxedCapture&) = delete;
    RelaxedCapture& operator=(const RelaxedCapture&) = delete;
};

// Whether the tool may queue work on, or wait for, the program's `stream`: not
// while it is being captured (a kernel of the tool's would join the program's
// graph, a wait would end its capture), nor when the driver cannot say.
inline bool stream_not_capturing(CUstream stream) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return driver().stream_is_capturing != nullptr && driver().stream_is_capturing(stream, &status) == CUDA_SUCCESS &&
           status == CU_STREAM_CAPTURE_STATUS_NONE;
}

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
