// A context's setup: its device arena allocated and initialised, the device
// patches loaded, its parts started, and the device described in the recording.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "context_guard.h"
#include "context_state.h"
#include "cuda_driver.h"
#include "log.h"
#include "ring_capacity.h"
#include "ring_cut.h"
#include "sanitizer_api.h"

namespace gpuobs {
namespace {

template <typename T>
bool device_alloc(CUcontext ctx, T** out, size_t bytes, const char* what, std::string* error) {
    void* p = nullptr;
    SanitizerResult r = sanitizer().alloc(ctx, &p, bytes);
    if (r != SANITIZER_SUCCESS) {
        *error = std::string("cannot allocate ") + std::to_string(bytes) + " bytes of device memory for " + what +
                 ": " + sanitizer().describe(r);
        return false;
    }
    *out = static_cast<T*>(p);
    return true;
}

}  // namespace

// Records per stripe (ring_capacity.h): at least --capacity N in all, or the most
// that fit the device memory budget.
uint64_t stripe_capacity_for(const Config& config, uint32_t stripes) {
    if (config.capacity != 0) return stripe_capacity_asked(config.capacity, stripes);
    const uint64_t record_bytes =
        sizeof(gpuobs_event) + (gpuobs_mode_has(config.mode, GPUOBS_TRAIT_WARP_ARRIVALS)
                                    ? GPUOBS_WARP_ARRIVALS_PER_EVENT * sizeof(gpuobs_warp_arrival)
                                    : 0);
    const uint64_t budget = config.device_memory_mib << 20,
                   fixed = GPUOBS_ARENA_EVENTS + GPUOBS_ARENA_ALIGN +
                           (DeviceArena::wants_snapshots(config) ? DeviceArena::kSnapshots * DeviceArena::kSnapshotBytes
                                                                 : 0);
    return stripe_capacity_fitting(budget > fixed ? (budget - fixed) / record_bytes : 0, stripes);
}

void DeviceArena::plan(uint32_t sms, const Config& config) {
    sm_count = sms;
    stripe_count = std::min<uint32_t>(sm_count, GPUOBS_MAX_STRIPES);
    stripe_capacity = stripe_capacity_for(config, stripe_count);
}

bool DeviceArena::allocate(CUcontext ctx, const Config& config, uint32_t gate, std::string* error) {
    // Every step says which one failed and why: a context that cannot be set up
    // runs uninstrumented, and the user is told exactly what went wrong.
    auto step = [&](const std::string& what, SanitizerResult r) {
        if (r == SANITIZER_SUCCESS) return true;
        *error = "cannot " + what + ": " + sanitizer().describe(r);
        return false;
    };
    if (sanitizer().get_stream_handle != nullptr &&
        !step("get the context's stream handle", sanitizer().get_stream_handle(ctx, nullptr, &stream)))
        return false;
    if (!step("load the device patches " + config.patches,
              sanitizer().add_patches_from_file(config.patches.c_str(), ctx)))
        return false;
    const size_t events_bytes = stripe_count * stripe_capacity * sizeof(gpuobs_event);
    const size_t arrivals_bytes = gpuobs_mode_has(config.mode, GPUOBS_TRAIT_WARP_ARRIVALS)
                                      ? stripe_count * arrivals_per_stripe() * sizeof(gpuobs_warp_arrival)
                                      : 0;
    const size_t counters_bytes = GPUOBS_LAUNCH_TABLE_SIZE * sizeof(gpuobs_launch_counter);
    const size_t table_bytes = (size_t)GPUOBS_BLOCK_TABLE_SIZE * sizeof(gpuobs_block_slot);
    const size_t entries_bytes = (size_t)GPUOBS_FUNCTION_TABLE_SIZE * sizeof(gpuobs_function_entry);
    // One arena (layout in the schema), aligned so that a patch finds every
    // table from its callback data pointer without a load.
    char* raw = nullptr;
    if (!device_alloc(ctx, &raw, GPUOBS_ARENA_EVENTS + events_bytes + arrivals_bytes + GPUOBS_ARENA_ALIGN,
                      "the event buffer", error))
        return false;
    char* base = reinterpret_cast<char*>(((uint64_t)raw + GPUOBS_ARENA_ALIGN - 1) & ~(GPUOBS_ARENA_ALIGN - 1));
    entries = reinterpret_cast<gpuobs_function_entry*>(base);
    counters = reinterpret_cast<gpuobs_launch_counter*>(base + GPUOBS_ARENA_COUNTERS);
    ctl = reinterpret_cast<gpuobs_control*>(base + GPUOBS_ARENA_CONTROL);
    block_table = reinterpret_cast<gpuobs_block_slot*>(base + GPUOBS_ARENA_BLOCK_TABLE);
    events = reinterpret_cast<gpuobs_event*>(base + GPUOBS_ARENA_EVENTS);
    arrivals = reinterpret_cast<gpuobs_warp_arrival*>(events + stripe_count * stripe_capacity);
    // The duty cycle rides in the callback data's top bits where nothing of the arena
    // needs them (on x86-64 device addresses stay below 2^47).
    const uint64_t arena_end = (uint64_t)events + events_bytes + arrivals_bytes;
    if (writes_records(config.mode) && !config.duty_on_host && arena_end <= GPUOBS_CALLBACK_ADDRESS_MASK)
        duty = duty_shifts_for(config.duty_on_ns, config.duty_period_ns);

    gpuobs_control init;
    std::memset(&init, 0, sizeof init);
    // Every ring starts empty: free up to one lap ahead.
    for (uint32_t s = 0; s < stripe_count; ++s) {
        init.limits[s] = ring_limit(0, stripe_capacity);
        init.warp_limits[s] = ring_limit(0, arrivals_per_stripe());
    }
    init.magic = GPUOBS_CONTROL_MAGIC;
    init.mode = config.mode;
    init.sample_shift = config.sample_shift;
    init.stripe_count = stripe_count;
    init.stripe_capacity = stripe_capacity;
    init.events = (uint64_t)events;
    init.launch_counters = (uint64_t)counters;
    init.block_table = (uint64_t)block_table;
    init.record_gate = gate;
    // Every function entry is written now, so a function first seen inside a
    // graph replay never reads an unwritten entry.
    std::vector<gpuobs_function_entry> table(GPUOBS_FUNCTION_TABLE_SIZE);
    for (uint32_t i = 0; i < GPUOBS_FUNCTION_TABLE_SIZE; ++i) {
        gpuobs_function_entry& e = table[i];
        std::memset(&e, 0, sizeof e);
        e.stripe_capacity = stripe_capacity;
        e.stripe_count = stripe_count;
        e.sample_shift = config.sample_shift;
        e.function_slot = i;
        e.mode = config.mode;
    }
    if (wants_snapshots(config) &&
        device_alloc(ctx, &snapshots, kSnapshots * kSnapshotBytes, "the counters' in-stream snapshots", error) &&
        sanitizer().memset(snapshots, 0, kSnapshots * kSnapshotBytes, stream) == SANITIZER_SUCCESS)
        snapshot_count = kSnapshots;
    error->clear();  // without snapshots, rings that fill drop what they cannot hold
    uint32_t check = 0;
    // block_trace events are stamped by atomics on zeroed ends and exit counts.
    // The blocking copy at the end returns once the writes before it are done.
    bool ok =
        step("initialise the device buffers (control block)",
             sanitizer().memcpy_htod_async(ctl, &init, sizeof init, stream)) &&
        step("initialise the device buffers (function table)",
             sanitizer().memcpy_htod_async(entries, table.data(), entries_bytes, stream)) &&
        step("initialise the device buffers (launch counters)",
             sanitizer().memset(counters, 0, counters_bytes, stream)) &&
        step("initialise the device buffers (block table)", sanitizer().memset(block_table, 0, table_bytes, stream)) &&
        step("initialise the device buffers (events)", sanitizer().memset(events, 0, events_bytes, stream)) &&
        (arrivals_bytes == 0 || step("initialise the device buffers (warp arrivals)",
                                     sanitizer().memset(arrivals, 0, arrivals_bytes, stream))) &&
        step("initialise the device buffers (read back)", sanitizer().memcpy_dtoh(&check, ctl, sizeof check, stream));
    if (!ok) return false;
    if (check != GPUOBS_CONTROL_MAGIC) {
        *error = "cannot initialise the device buffers: the control block read back wrong";
        return false;
    }
    return true;
}

bool DeviceArena::write_gate(CUcontext ctx, uint32_t gate, bool clear_block_table) {
    if (ctl == nullptr) return true;  // nothing patched in this mode: no gate to turn
    InTool guard;
    CurrentContext current(ctx);
    uint32_t back = ~gate;
    // A window that opens forgets every block slot of the last one: a graph replay's
    // grid ids come back, so a replayed block's exits that run before its leader
    // publishes would find the slot of the same block in the last recorded replay,
    // whose event has been drained since, and stamp a position the ring has reused.
    // Cleared, they find no key and are counted as unmatched (nothing runs here).
    if (clear_block_table && block_table != nullptr &&
        sanitizer().memset(block_table, 0, GPUOBS_BLOCK_TABLE_SIZE * sizeof(gpuobs_block_slot), stream) !=
            SANITIZER_SUCCESS)
        return false;
    return sanitizer().memcpy_htod_async(&ctl->record_gate, &gate, sizeof gate, stream) == SANITIZER_SUCCESS &&
           sanitizer().memcpy_dtoh(&back, &ctl->record_gate, sizeof back, stream) == SANITIZER_SUCCESS && back == gate;
}

// What `--duty` became on this device, said once: the rounding (duty_cycle.h) changes
// what is recorded, and the host's fallback changes what is counted.
void ContextState::report_duty_cycle() const {
    if (config_.duty_period_ns == 0 || !writes_records(config_.mode)) return;
    if (arena_.duty.period != 0)
        GPUOBS_LOG("device %u: --duty kept on the device's clock as %.6g ms of every %.6g ms (powers of two of ns)",
                   device_index_, arena_.duty.on_ns() / 1e6, arena_.duty.period_ns() / 1e6);
    else
        GPUOBS_LOG("device %u: --duty kept by the tool's thread from the host (%s): every block is counted",
                   device_index_, config_.duty_on_host ? "GPUOBS_DUTY_ON_HOST" : "device memory above 2^52");
}

bool ContextState::setup(std::string* error) {
    InTool guard;
    CudaDriver& d = driver();
    int sms = 0;
    if (!d.load() || d.device_get_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_) != CUDA_SUCCESS ||
        sms <= 0) {
        *error = "cannot query the device's SM count through libcuda";
        return false;
    }
    arena_.plan((uint32_t)sms, config_);
    if (config_.patches_needed()) {
        CurrentContext current(ctx_);
        if (!current.pushed) {
            *error = "cannot make the context current to set it up";
            return false;
        }
        if (!arena_.allocate(ctx_, config_, paused_ ? GPUOBS_RECORD_GATE_OFF : 0, error)) return false;
        report_duty_cycle();
    }
    valve_.start(arena_);
    drainer_.start(arena_);
    sampler_.start(arena_);
    launches_.open();
    write_device_info();
    active_ = true;
    return true;
}

void ContextState::write_device_info() {
    gpuobs_device_info info;
    std::memset(&info, 0, sizeof info);
    info.device_index = device_index_;
    info.sm_count = arena_.sm_count;
    info.context_id = (uint64_t)ctx_;
    CudaDriver& d = driver();
    int major = 0, minor = 0;
    d.device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
    d.device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
    info.cc_major = (uint32_t)major;
    info.cc_minor = (uint32_t)minor;
    d.device_get_name(info.name, sizeof info.name - 1, device_);
    CUuuid uuid;
    if (d.device_get_uuid != nullptr && d.device_get_uuid(&uuid, device_) == CUDA_SUCCESS)
        std::memcpy(info.uuid, uuid.bytes, 16);
    file_.write_chunk(GPUOBS_CHUNK_DEVICE, {{&info, sizeof info}});
}

}  // namespace gpuobs
