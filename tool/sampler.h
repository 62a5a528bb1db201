// A context's sampler: keeps what the rings take within the data budget
// (`--budget`, bytes a second with a burst it may spend at once) and, where the
// patches cannot keep it on the device's clock (duty_cycle.h), the duty cycle
// (`--duty ON/PERIOD`), without making the program wait. Its own thread
// reads the rings' claim counters every millisecond or so while the sample gate
// is open, and turns the gate (the schema's sample_gate) with a small copy on a
// stream of its own: closed, blocks (or captured accesses) are counted as ever
// and, instead of being recorded, counted as sampled out. The gate turns while
// kernels run, CUDA graphs included: counts stay exact, and a launch running
// across a turn keeps the records its blocks took while the gate was open.
//
// The rule, written in every flush's SAMPLING chunk: a token bucket of
// `burst_bytes` filled at `budget` bytes a second; the gate closes when it is
// empty and opens again once it holds a second of budget (so a run over its
// budget records whole stretches of about budget / rate of every second), and
// only within the first ON of every PERIOD of the run when a duty cycle is set.
#pragma once
#include <cuda.h>
#include <sanitizer.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "config.h"
#include "device_arena.h"
#include "gpuobs_schema.h"
#include "sample_rule.h"

namespace gpuobs {

class Drainer;

class Sampler {
public:
    Sampler(CUcontext ctx, uint32_t device_index, const Config& config, Drainer& drainer)
        : ctx_(ctx), device_index_(device_index), config_(config), drainer_(drainer) {}
    ~Sampler() { stop(); }

    // After the arena is set up (the gate starts open): starts the thread when the
    // mode records and a budget or a duty cycle limits it.
    void start(const DeviceArena& arena);
    // Before the context goes: the thread ends (the gate is left as it is).
    void stop();
    // What a flush window's SAMPLING chunk says of the rule and of the gate since
    // the last flush of this context (its closed time and turns, then reset).
    void fill_window(gpuobs_sampling_info* info);

private:
    void loop();
    bool recorded_bytes(Sanitizer_StreamHandle stream, uint64_t* bytes);
    bool write_gate(Sanitizer_StreamHandle stream, uint32_t value);

    const CUcontext ctx_;
    const uint32_t device_index_;
    const Config& config_;
    Drainer& drainer_;
    const DeviceArena* arena_ = nullptr;
    uint64_t budget_ = 0, burst_ = 0;
    uint64_t duty_on_ns_ = 0, duty_period_ns_ = 0;  // the duty cycle this thread keeps (none: the device's)

    // The thread's stop request and the gate's history since the last flush (mu_, a leaf).
    std::mutex mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
    bool closed_ = false;  // the gate as last written (only the sampler's thread writes it)
    uint64_t closed_since_ns_ = 0, closed_ns_ = 0;
    uint32_t turns_ = 0;
    std::thread thread_;
};

}  // namespace gpuobs
