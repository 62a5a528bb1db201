// The duty cycle on the device's clock (the schema's callback data bits): `--duty
// ON/PERIOD` rounded to powers of two of nanoseconds, so a patch tells the on time
// from %globaltimer with two shifts and no load (a gate word read from memory cost
// the decode loop 0.06 of a step, the clock 0.02; sampler.h turns the sample gate
// from the host where the bits cannot be carried).
#pragma once
#include <cstdint>

#include "gpuobs_schema.h"

namespace gpuobs {

struct DutyShifts {
    uint32_t period = 0, on = 0;  // shifts: 2^period ns, the first 2^on ns of it; period 0: none

    uint64_t period_ns() const { return period != 0 ? 1ull << period : 0; }
    uint64_t on_ns() const { return period != 0 ? 1ull << on : 0; }
    // The callback data's top bits (or'ed into every function's pointer): the two
    // shifts that make (clock mod 2^period) >> on.
    uint64_t callback_bits() const {
        return period != 0 ? ((uint64_t)(64 - period) << GPUOBS_DUTY_LEFT_SHIFT_BIT) |
                                 ((uint64_t)(64 - period + on) << GPUOBS_DUTY_RIGHT_SHIFT_BIT)
                           : 0;
    }
};

// ON rounded up (at least what was asked is recorded), PERIOD to the nearer power
// of two on a log scale (5 s -> 2^32 ns, 4.29 s), at least twice ON: 50ms/5s is
// 67.1 ms of every 4.29 s. {0, 0} where no duty cycle is asked for.
inline DutyShifts duty_shifts_for(uint64_t on_ns, uint64_t period_ns) {
    DutyShifts d;
    if (period_ns == 0 || on_ns == 0) return d;
    uint32_t on = 0;
    while (on < 62 && (1ull << on) < on_ns) ++on;
    uint32_t period = 1;
    while (period < 63 && (1ull << period) < period_ns) ++period;  // the power at or above
    // the one below is nearer where PERIOD < 2^(period - 1) * sqrt(2)
    if (period > 1 && (double)period_ns < (double)(1ull << (period - 1)) * 1.4142135623730951) --period;
    if (period <= on) period = on + 1;
    d.period = period;
    d.on = on;
    return d;
}

// Whether a device time lies in the on time: the patches' test (duty_off_at) from
// callback data bits, for the host's checks.
inline bool duty_on_at(uint64_t callback_bits, uint64_t device_ns) {
    const uint32_t left = (uint32_t)(callback_bits >> GPUOBS_DUTY_LEFT_SHIFT_BIT);
    const uint32_t right = (uint32_t)(callback_bits >> GPUOBS_DUTY_RIGHT_SHIFT_BIT) & 63;
    return left == 0 || right >= 64 || ((device_ns << left) >> right) == 0;
}

}  // namespace gpuobs
