// The sampler's rule (sampler.h), apart from any device: given what the rings
// took so far, whether the sample gate should be open. tests/native/sampler_check.cpp
// drives it against a simulated program.
#pragma once
#include <algorithm>
#include <cstdint>

namespace gpuobs {

// The bucket and the duty cycle: when the gate should be open.
class SampleRule {
public:
    SampleRule(uint64_t budget_bytes_per_s, uint64_t burst_bytes, uint64_t duty_on_ns, uint64_t duty_period_ns,
               uint64_t start_ns)
        : budget_(budget_bytes_per_s),
          burst_(burst_bytes),
          duty_on_(duty_on_ns),
          duty_period_(duty_period_ns),
          start_ns_(start_ns),
          tokens_((double)burst_bytes),
          last_ns_(start_ns) {}

    // `recorded` bytes so far (never less than before) at host time `now_ns`:
    // whether the gate should be open from now on.
    bool open_at(uint64_t now_ns, uint64_t recorded);
    // How long the gate may stay as it is before it must be asked again (ns).
    uint64_t next_check_ns(uint64_t now_ns, bool open) const;

    // While the gate is open the recorded bytes are read this often: at 1.8 GB/s (a
    // decode loop's block_trace records on the H200) a millisecond is 1.8 MB past the
    // budget, which the bucket then owes.
    static constexpr uint64_t kOpenPollNs = 1000000, kOpenLongestNs = 10000000;
    // While it is closed, or no budget is set, the thread wakes at least this often.
    static constexpr uint64_t kLongestSleepNs = 100000000;

private:
    bool duty_on(uint64_t now_ns) const { return duty_period_ == 0 || (now_ns - start_ns_) % duty_period_ < duty_on_; }
    uint64_t reopen_at() const { return budget_ < burst_ ? budget_ : burst_; }  // a second's budget

    const uint64_t budget_, burst_, duty_on_, duty_period_, start_ns_;
    double tokens_;
    double rate_ = 0;  // bytes a second the rings took between the last two asks while open
    uint64_t last_ns_, last_recorded_ = 0;
    bool open_ = true;
};

inline bool SampleRule::open_at(uint64_t now_ns, uint64_t recorded) {
    if (budget_ != 0) {
        const uint64_t spent = recorded > last_recorded_ ? recorded - last_recorded_ : 0;
        const double refill = (double)budget_ * (double)(now_ns - last_ns_) / 1e9;
        tokens_ = std::min((double)burst_, tokens_ + refill) - (double)spent;
        if (open_ && now_ns > last_ns_) rate_ = (double)spent * 1e9 / (double)(now_ns - last_ns_);
    }
    last_ns_ = now_ns;
    last_recorded_ = std::max(last_recorded_, recorded);
    bool want = duty_on(now_ns);
    if (want && budget_ != 0) want = open_ ? tokens_ > 0 : tokens_ >= (double)reopen_at();
    open_ = want;
    return want;
}

inline uint64_t SampleRule::next_check_ns(uint64_t now_ns, bool open) const {
    uint64_t wait = kLongestSleepNs;
    // Open: asked again by a quarter of the time the bucket would last at the rate
    // last seen open, between 1 and 10 ms (a program well under its budget is not
    // polled every millisecond; one that starts at 20 GB/s overshoots by 200 MB at most).
    if (open && budget_ != 0) {
        const double lasts_ns = rate_ > 0 ? std::max(tokens_, 0.0) / rate_ * 1e9 : 1e18;
        wait = std::max(kOpenPollNs, std::min<uint64_t>(kOpenLongestNs, (uint64_t)std::min(lasts_ns * 0.25, 1e18)));
    }
    if (!open && budget_ != 0 && tokens_ < (double)reopen_at())
        wait = std::min<uint64_t>(wait, (uint64_t)(((double)reopen_at() - tokens_) / (double)budget_ * 1e9) + 1);
    if (duty_period_ != 0) {  // the next edge of the duty cycle
        const uint64_t phase = (now_ns - start_ns_) % duty_period_;
        wait = std::min(wait, phase < duty_on_ ? duty_on_ - phase : duty_period_ - phase);
    }
    return std::max<uint64_t>(wait, 1);
}

}  // namespace gpuobs
