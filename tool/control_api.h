// The in-process control surface that gpuobs.flush(), pause(), resume() and the rest
// call: the one declaration that tool/control_api.cpp includes and that cffi reads
// (exporter/gpuobs/record/runtime.py: the part between the cdef markers).
#pragma once

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)  // exported from the tool, whose other symbols are hidden

/* gpuobs:cdef-begin */
/* What the calls below return besides a count. */
enum gpuobs_control_status {
    GPUOBS_CONTROL_NOT_RECORDING = -1 /* the tool is not recording (or the call failed) */
};
int gpuobs_tool_active(void);                  /* 1 while the tool records, else 0 */
int gpuobs_tool_flush(void);                   /* contexts synchronised and flushed */
const char* gpuobs_tool_output(void);          /* the recording's path; "" when not recording */
unsigned long long gpuobs_tool_launches(void); /* launches and graph-node launches seen */
int gpuobs_tool_pause(void);                   /* contexts turned (their record gates closed) */
int gpuobs_tool_resume(void);                  /* contexts turned (their record gates opened) */
int gpuobs_tool_paused(void);                  /* 1 while paused */
int gpuobs_tool_live_graphs(void);             /* CUDA graphs instantiated now */
/* gpuobs:cdef-end */

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
