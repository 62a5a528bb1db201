// Time-based recording windows (`gpuobs record --duty ON/PERIOD`): the first ON
// of every PERIOD of the run is recorded, the rest not, for a server that never
// stops. The windows turn in the program's own stream (the tool's gate kernel
// between two of its launches, ContextState::follow_duty_cycle) where that stream
// alone has work in flight, or at a quiet point; so a loop of graph replays that
// never synchronises still turns, a turn late by at most one launch's API call.
#pragma once
#include <cstdint>

namespace gpuobs {

struct DutyCycle {
    uint64_t on_ns = 0, period_ns = 0, start_ns = 0;
    bool enabled() const { return period_ns != 0; }
    bool recording_at(uint64_t now_ns) const { return !enabled() || (now_ns - start_ns) % period_ns < on_ns; }
};

}  // namespace gpuobs
