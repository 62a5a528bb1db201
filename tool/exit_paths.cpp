// _exit and _Exit, interposed (the tool is LD_PRELOADed, so the program's calls reach
// these first): CPython's forkserver and fork children, and any program that leaves
// through os._exit, run no destructor, so without this their recordings end without
// an END chunk and lose what came after the last drain. The file is finished (every
// context flushed, END written: finish_recording), then the real call runs with the
// program's status.
//
// Fail-open and wary of where _exit is called from: nothing is done in a process
// that did not open the file (a forked child, a vfork child whose exec failed), nor
// from inside the tool's own CUDA calls (g_in_tool), nor a second time; a watchdog
// thread ends the process with the program's status if finishing takes longer than
// kFinishLimitS (an _exit from a signal handler that interrupted a thread holding one
// of the tool's locks would otherwise wait on it for ever). Loaded without LD_PRELOAD
// (gpuobs.attach(), CUDA_INJECTION64_PATH alone) these do not interpose: a program
// that leaves through _exit then loses its last window, as before.
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "context_guard.h"
#include "log.h"
#include "tool_state.h"

namespace gpuobs {
namespace {

constexpr int kFinishLimitS = 60;
using ExitFn = void (*)(int);

[[noreturn]] void really_exit(const char* name, int status) {
    auto real = reinterpret_cast<ExitFn>(dlsym(RTLD_NEXT, name));
    if (real != nullptr) real(status);
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

void finish_before_exit(const char* name, int status) {
    const bool mine = g_tool != nullptr && g_tool->active && g_tool->file.opened_here() && !g_in_tool;
    if (std::getenv("GPUOBS_DEBUG"))
        GPUOBS_LOG("pid %d: %s(%d): %s", (int)getpid(), name, status,
                   mine ? "finishing the recording first" : "no recording of this process to finish");
    if (!mine) return;
    try {
        std::thread([name, status] {
            std::this_thread::sleep_for(std::chrono::seconds(kFinishLimitS));
            GPUOBS_LOG("finishing the recording at %s took over %d s; exiting without it", name, kFinishLimitS);
            really_exit(name, status);
        }).detach();
    } catch (...) {  // no thread: finish unguarded, as the destructor does
    }
    finish_recording(name);
}

}  // namespace
}  // namespace gpuobs

extern "C" __attribute__((visibility("default"), noreturn)) void _exit(int status) {
    gpuobs::finish_before_exit("_exit", status);
    gpuobs::really_exit("_exit", status);
}

extern "C" __attribute__((visibility("default"), noreturn)) void _Exit(int status) {
    gpuobs::finish_before_exit("_Exit", status);
    gpuobs::really_exit("_Exit", status);
}
