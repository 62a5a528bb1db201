// A context's device memory: one arena holding the function table, the launch
// counters, the control block (claim counters and limits), the block table and
// the rings the patches write into (layout in the schema). Allocated and
// initialised once by setup; fixed after that, so it needs no lock.
#pragma once
#include <sanitizer.h>

#include <cstdint>
#include <string>

#include "config.h"
#include "duty_cycle.h"
#include "gpuobs_schema.h"

namespace gpuobs {

// Records per stripe for this configuration (context_setup.cpp says how it is chosen).
uint64_t stripe_capacity_for(const Config& config, uint32_t stripes);

struct DeviceArena {
    uint32_t sm_count = 0;
    uint32_t stripe_count = 0;
    uint64_t stripe_capacity = 0;  // event records per stripe, a power of two

    gpuobs_control* ctl = nullptr;
    gpuobs_event* events = nullptr;
    gpuobs_warp_arrival* arrivals = nullptr;  // block_starts only: after the events
    gpuobs_launch_counter* counters = nullptr;
    gpuobs_block_slot* block_table = nullptr;
    gpuobs_function_entry* entries = nullptr;

    // In-stream snapshots (pressure_valve.cpp): the launch counters' totals and the
    // control block, taken by the tool's snapshot kernel on the program's stream
    // after its launches. None in modes that fill no rings, nor
    // when lossless (the program waits for room instead).
    // A slot: a header (the sequence number the snapshot kernel publishes when it is
    // done, its blocks-done count), one total per launch-counter slot, the control block.
    static constexpr uint32_t kSnapshots = 8;
    static constexpr uint64_t kSnapshotHeader = 256, kSnapshotTotals = GPUOBS_LAUNCH_TABLE_SIZE * sizeof(uint64_t);
    static constexpr uint64_t kSnapshotBytes =
        kSnapshotHeader + kSnapshotTotals + (sizeof(gpuobs_control) + 255) / 256 * 256;
    char* snapshots = nullptr;
    uint32_t snapshot_count = 0;
    static bool wants_snapshots(const Config& config) { return fills_rings(config.mode) && !config.lossless; }
    char* snapshot_slot(uint32_t i) const { return snapshots + i * kSnapshotBytes; }
    uint64_t* snapshot_published(uint32_t i) const { return reinterpret_cast<uint64_t*>(snapshot_slot(i)); }
    uint32_t* snapshot_blocks_done(uint32_t i) const { return reinterpret_cast<uint32_t*>(snapshot_slot(i) + 8); }
    uint64_t* snapshot_totals(uint32_t i) const {
        return reinterpret_cast<uint64_t*>(snapshot_slot(i) + kSnapshotHeader);
    }
    gpuobs_control* snapshot_control(uint32_t i) const {
        return reinterpret_cast<gpuobs_control*>(snapshot_slot(i) + kSnapshotHeader + kSnapshotTotals);
    }

    // The context's own NULL stream, for the copies the tool makes in callbacks (the
    // calling thread's current context may be another one, or none).
    Sanitizer_StreamHandle stream = nullptr;

    // Sizes the stripes from the device's SM count (stripe_capacity_for).
    void plan(uint32_t sms, const Config& config);
    // Allocates the arena and initialises every table, the rings empty (free up to
    // one lap ahead), the record gate `gate`, with the context current; false with
    // `error` naming the step.
    bool allocate(CUcontext ctx, const Config& config, uint32_t gate, std::string* error);
    // Sets the record gate (see the schema) and returns once the device has it;
    // only where none of the context's kernels runs. False when the copy failed.
    // clear_block_table: block_trace's slots forgotten first (a window opening).
    bool write_gate(CUcontext ctx, uint32_t gate, bool clear_block_table);

    // block_starts' warp arrivals per stripe.
    uint64_t arrivals_per_stripe() const { return stripe_capacity * GPUOBS_WARP_ARRIVALS_PER_EVENT; }
    // The duty cycle the patches keep on the device's clock, carried in every callback
    // data pointer's top bits (the schema); none where none was asked for, where the
    // mode records nothing, or where the arena does not lie below those bits (the
    // sampler then keeps it from the host). Set by allocate().
    DutyShifts duty;

    // What a patched function's callback data points at: its entry's address plus
    // the sample shift (see gpuobs_function_entry), in both callback scopes, with the
    // duty cycle's bits on top.
    void* callback_data(uint32_t slot, uint32_t sample_shift) const {
        return reinterpret_cast<void*>((reinterpret_cast<uint64_t>(entries + slot) + sample_shift) |
                                       duty.callback_bits());
    }
};

}  // namespace gpuobs
