// The in-process control surface: gpuobs.flush(), pause(), resume() and the rest,
// as the extern "C" functions the tool exports.
#include "control_api.h"

#include "tool_state.h"

// ---- the in-process control surface, bound from Python through cffi ----------

extern "C" int gpuobs_tool_active(void) { return gpuobs::g_tool != nullptr && gpuobs::g_tool->active ? 1 : 0; }

// Synchronises every instrumented context and flushes it; returns how many.
extern "C" int gpuobs_tool_flush(void) {
    if (!gpuobs_tool_active()) return GPUOBS_CONTROL_NOT_RECORDING;
    try {
        return (int)gpuobs::flush_all("explicit flush", true);
    } catch (...) {
        return GPUOBS_CONTROL_NOT_RECORDING;
    }
}

extern "C" const char* gpuobs_tool_output(void) {
    return gpuobs_tool_active() ? gpuobs::g_tool->file.path().c_str() : "";
}

extern "C" unsigned long long gpuobs_tool_launches(void) {
    if (gpuobs::g_tool == nullptr) return 0;
    return gpuobs::g_tool->launch_callbacks.load() + gpuobs::g_tool->node_callbacks.load();
}

// Recording windows: pause closes every context's record gate (kernels run the
// patches' early return, their launches only counted), resume opens it, CUDA
// graphs included. Both return the contexts turned, or a gpuobs_control_status.
static int turn_recording(bool on) {
    if (!gpuobs_tool_active()) return GPUOBS_CONTROL_NOT_RECORDING;
    try {
        return gpuobs::set_recording(on);
    } catch (...) {
        return GPUOBS_CONTROL_NOT_RECORDING;
    }
}

extern "C" int gpuobs_tool_pause(void) { return turn_recording(false); }

extern "C" int gpuobs_tool_resume(void) { return turn_recording(true); }

extern "C" int gpuobs_tool_live_graphs(void) { return gpuobs_tool_active() ? (int)gpuobs::live_graphs() : 0; }

extern "C" int gpuobs_tool_paused(void) { return gpuobs_tool_active() && gpuobs::g_tool->paused ? 1 : 0; }
