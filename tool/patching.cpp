// Module patching: each module the driver loads is patched once, for the mode's
// patch points, and stays patched: recording windows turn on the device (the
// record gate), so CUDA graphs, which keep the code of the moment they were
// instantiated, follow them.
#include <sanitizer.h>

#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "context_state.h"
#include "gpuobs_schema.h"
#include "log.h"
#include "notice.h"
#include "sanitizer_api.h"
#include "tool_state.h"

namespace gpuobs {
namespace {

struct PatchStep {
    Sanitizer_InstructionId instruction;
    std::string function;
};

// The mode's row of GPUOBS_MODE_PATCHES (the schema): its patch function at each
// patch point; with `duty`, their _duty twins (the schema's duty cycle bits), which
// the modes that record have and the others never need.
std::vector<PatchStep> patch_plan(uint32_t mode, bool duty = false) {
    struct Row {
        const char *entry, *exit, *memory;
    };
#define GPUOBS_PATCH_ROW(traits, entry, exit, memory) Row{entry, exit, memory},
    static const Row rows[] = {GPUOBS_MODE_PATCHES(GPUOBS_PATCH_ROW)};
#undef GPUOBS_PATCH_ROW
    if (mode >= sizeof rows / sizeof rows[0]) return {};
    std::vector<PatchStep> plan;
    const Row& r = rows[mode];
    const char* twin = duty ? "_duty" : "";
    if (r.entry != nullptr) plan.push_back({SANITIZER_INSTRUCTION_BLOCK_ENTER, std::string(r.entry) + twin});
    if (r.exit != nullptr) plan.push_back({SANITIZER_INSTRUCTION_BLOCK_EXIT, std::string(r.exit) + twin});
    if (r.memory != nullptr) plan.push_back({SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, std::string(r.memory) + twin});
    return plan;
}

ModuleRecord* module_record(CUmodule m) {
    std::lock_guard<std::mutex> lock(g_tool->modules_mu);
    auto& slot = g_tool->modules[m];
    if (slot == nullptr) slot = new ModuleRecord();
    return slot;
}

// Marks the mode's patch points in a module and instruments it; holds patch_mu.
bool instrument_module(CUmodule module, bool duty) {
    for (const PatchStep& step : patch_plan(g_tool->config.mode, duty)) {
        SanitizerResult r = sanitizer().patch_instructions(step.instruction, module, step.function.c_str());
        if (r != SANITIZER_SUCCESS) {
            GPUOBS_LOG("cannot patch a module with %s: %s; that module runs unpatched", step.function.c_str(),
                       sanitizer().describe(r));
            return false;
        }
    }
    SanitizerResult r = sanitizer().patch_module(module);
    if (r != SANITIZER_SUCCESS) {
        GPUOBS_LOG("cannot commit the patch of a module: %s; that module runs unpatched", sanitizer().describe(r));
        return false;
    }
    return true;
}

void notice_unpatched(uint32_t device) {
    write_notice(g_tool->file, GPUOBS_NOTICE_MODULE_UNPATCHED, device,
                 "a module could not be patched (see the line above): its kernels run unrecorded");
}

}  // namespace

// Patches a module exactly once, even when several threads load modules at
// once: the compare-and-swap on its status elects one patcher. A module loaded
// while its context is paused is patched too: its kernels find the gate closed.
void patch_module(ContextState* state, const Sanitizer_ResourceModuleData& md) {
    Tool& t = *g_tool;
    ModuleRecord* m = module_record(md.module);
    uint32_t expected = kNew;
    if (!m->status.compare_exchange_strong(expected, kPatching)) return;
    m->context = state;
    gpuobs_module_info info;
    std::memset(&info, 0, sizeof info);
    info.module_id = (uint64_t)md.module;
    info.device_index = state->device_index();
    info.cubin_size = (uint32_t)md.cubinSize;
    info.load_monotonic_ns = monotonic_ns();
    uint32_t status = kNotPatched;
    if (!patch_plan(t.config.mode).empty()) {
        std::lock_guard<std::mutex> lock(t.patch_mu);
        if (instrument_module(md.module, state->duty_on_device())) {
            status = kPatched;
            info.patch_count = 1;
        } else {
            status = kFailed;
            notice_unpatched(state->device_index());
        }
    }
    info.status = status;
    m->status.store(status);
    t.file.write_chunk(GPUOBS_CHUNK_MODULE, {{&info, sizeof info}});
}

}  // namespace gpuobs
