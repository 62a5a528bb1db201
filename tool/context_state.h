// Everything gpuobs keeps per CUDA context: the device buffers the patches write
// into, the function slots, the launches since the last flush, and the flush
// that moves it all into the recording file.
// Defined by job: context_state.cpp (the host side), context_setup.cpp,
// context_flush.cpp, context_tool_kernels.cpp and patched_code_dump.cpp.
#pragma once
#include <sanitizer.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config.h"
#include "graph_table.h"
#include "gpuobs_schema.h"
#include "recording_file.h"
#include "ring_cut.h"
#include "ring_pressure.h"

namespace gpuobs {

class ContextState;
uint64_t monotonic_ns();
uint64_t stripe_capacity_for(const Config& config, uint32_t stripes);
// crash_drain.cpp: on a crash signal, the drains of the contexts watched finish first.
void install_crash_drain();
void watch_drains_on_crash(ContextState* state);
uint64_t clock_ns(clockid_t id);  // any clock_gettime clock, in ns
// Whether a mode's claims count on the low 32 bits of the stripe counters (the block entries').
inline bool claims_on_low_half(uint32_t mode) {
    return mode == GPUOBS_MODE_BLOCK_TRACE || mode == GPUOBS_MODE_BLOCK_STARTS;
}
// context_flush.cpp: each stripe's claim and drop counters, read on `stream`, the
// claims widened from `drained` where `low_half_only` (ring_cut.h: claims_from_counter); a sum.
bool read_claims(gpuobs_stripe* device, uint32_t count, Sanitizer_StreamHandle stream,
                 const std::vector<uint64_t>& drained, bool low_half_only, std::vector<uint64_t>* claimed,
                 std::vector<uint64_t>* dropped);
uint64_t sum_of(const std::vector<uint64_t>& v);

struct LaunchInfo {
    const Sanitizer_LaunchData* data;
    uint64_t stream_key;       // the stream whose synchronisation completes this launch
    uint32_t graph_launch_id;  // graph replays: the replay id, else 0
    bool graph_node;
};

// One flush window, cut from the device's rings at a quiet point (or by an
// explicit flush): the launches it lists and where each stripe's claims stood
// when it was cut. Everything claimed before the cut belongs to it; the drain
// thread moves it into the file while kernels go on claiming past the cut.
struct FlushWindow {
    const char* reason = "";
    bool quiet = false;
    uint64_t host_time_ns = 0;
    std::vector<gpuobs_launch> launches;
    std::vector<uint8_t> selected;  // by function slot: passes the kernel filter
    uint64_t unrecorded = 0;
    std::vector<uint64_t> claimed, dropped;            // per stripe, positions so far
    std::vector<uint64_t> warp_claimed, warp_dropped;  // block_starts' arrivals
    uint64_t unmatched_exit_threads = 0;               // so far
    uint64_t device_quiet_ns = 0;
};

// One ring of records on the device (the events, or block_starts' warp
// arrivals) and how far the host has drained each stripe of it.
struct RingState {
    std::vector<uint64_t> drained;       // per stripe: positions before this are in the file
    std::vector<uint64_t> dropped_seen;  // per stripe: drops counted into the file so far

    void reset(uint32_t stripes) {
        drained.assign(stripes, 0);
        dropped_seen.assign(stripes, 0);
    }
    // The device's limit for each stripe (ring_cut.h: one lap past what is drained).
    std::vector<uint64_t> limits(uint64_t per_stripe) const {
        std::vector<uint64_t> out;
        for (uint64_t d : drained) out.push_back(ring_limit(d, per_stripe));
        return out;
    }
};

class ContextState {
public:
    ContextState(CUcontext ctx, CUdevice device, const Config& config, RecordingFile& file);

    // Allocates the device buffers and uploads the patches, with the context
    // made current for the duration; false (error names the failing step)
    // leaves this context uninstrumented.
    bool setup(std::string* error);
    CUcontext context() const { return ctx_; }
    bool active() const { return active_.load(); }
    uint32_t device_index() const { return device_index_; }

    // on_launch and on_graph_replay return true when the rings' fill is due a
    // measurement or relief: the caller then calls relieve_ring_pressure once the
    // launch is enqueued (when the launching API call returns).
    bool on_launch(const LaunchInfo& launch);
    // Functions the driver has just loaded (lazy loading): each gets its slot and
    // callback data now, before any launch, so that kernels launched from the
    // device (which the host never sees) write under their own name.
    void on_functions_loaded(CUmodule module, const CUfunction* functions, uint32_t count);
    // A module is being unloaded: its function handles may be reused by a later load.
    void on_module_unloading(CUmodule module);
    // A graph replay begins; while paused it is counted here (once), since the
    // per-node callbacks are off outside windows.
    void on_graph_launch(uint64_t stream_key);
    // A replay of an exec whose kernel nodes are learned: one launch per node,
    // listed from the table (flagged FROM_NODE_TABLE), no per-node callback.
    bool on_graph_replay(const std::vector<LearnedNode>& nodes, uint64_t stream_key, uint32_t replay_id);
    // After a launch on `stream` (context_pressure.cpp): asks for a measurement of
    // the rings' fill when one is due; past three quarters of a stripe, waits for a
    // drain in progress, and when none is left to free room and this stream is the
    // only one with launches in flight, all this thread's, waits (2 s at most) for
    // it to go idle: a quiet point of the tool's own, where the window is cut and
    // released before the program goes on.
    void relieve_ring_pressure(CUstream stream, uint64_t stream_key);
    // A launch whose API call was not seen around it: only a measurement is asked
    // for (waiting inside the launch callback itself hung a storm on the H200).
    void ask_for_measurement();
    // Before the context goes (destroy, process exit): no measurement is started
    // again, and one under way is waited for (up to 0.5 s).
    void stop_measuring();
    // A notice in the file (and on stderr) when the program's threads waited for
    // the rings since the last one (the totals so far), so its timings are read
    // knowingly; under GPUOBS_DEBUG, also what the pressure path did.
    void report_program_waits();
    // Both return true at a quiet point (no launch of this context in flight)
    // that ends an interval with launches in it: where a window may turn.
    bool on_stream_synchronized(uint64_t stream_key);
    bool on_context_synchronized();
    // Moves the device buffer into the file and resets it. With require_quiet,
    // only when every stream that launched since its last sync has synced.
    // Launch callbacks never wait on a flush (a flush calls into the driver,
    // which may hold locks that a launching thread holds).
    // A quiet flush only cuts the window (a read of the claim counters) and leaves
    // the rest to the context's drain thread; any other flush waits until its
    // window is in the file.
    void flush(const char* reason, bool require_quiet = false);
    // Waits (without taking a lock: a crash handler calls it) until every window
    // cut so far is in the file, or until timeout_ms; true when it got there.
    bool wait_for_drains(int timeout_ms) const;
    void on_destroy();

    // Recording windows. While paused, launches run unpatched and are only
    // counted (flush info: unrecorded_launches). The caller patches or unpatches
    // the modules; set_paused(false) rebinds every known function's callback data.
    bool paused() const { return paused_.load(); }
    void set_paused(bool paused);
    // Automatic windows: true when the interval that starts now is recorded.
    bool next_interval_recorded(uint32_t every) { return ++intervals_ % every == 0; }

private:
    uint32_t function_slot_for(CUfunction f, const char* name, CUmodule module);
    // Kernels launched from the device appear only in their blocks' records:
    // lists one launch per grid id the host never saw (flagged FROM_DEVICE).
    void list_device_launches(std::vector<gpuobs_event>& events, std::vector<gpuobs_launch>* launches);
    bool harvest_counts();  // fills counter_staging_ with one total per slot so far (never reset)
    bool load_tool_kernels();
    // What a patched function's callback data points at: its entry's address plus
    // the sample shift (see gpuobs_function_entry), in both callback scopes.
    void* callback_data(uint32_t slot) const { return reinterpret_cast<char*>(entries_ + slot) + config_.sample_shift; }
    void write_device_info();
    void dump_code(const std::string& dir, CUmodule module, const std::string& name, uint32_t slot);
    void sample_clock();
    void write_launch_counts(const std::vector<gpuobs_launch>& launches, bool final,
                             std::vector<gpuobs_launch_count>* out, uint64_t* unattributed);
    // block_starts: the %globaltimer after everything launched so far has run
    // (the caller has seen every stream synchronised); 0 when the probe cannot run.
    uint64_t device_time_now();
    bool run_probe();
    // Ring pressure (context_pressure.cpp). plan_blocks, under launch_mu_: a
    // launch's blocks are planned into the estimate; true when it asks for action.
    bool plan_blocks(const uint32_t grid[3], const uint32_t block[3]);
    void note_program_waits();
    void log_pressure_counts() const;
    bool measure_fill(Sanitizer_StreamHandle stream);
    enum class StreamWait { kIdle, kBusy, kUnknown };  // kUnknown: no query, or it failed
    StreamWait wait_for_stream(CUstream stream, int timeout_ms);
    void give_up_on_stream(uint64_t stream_key, const char* why);
    // expected_in_flight: when not 0, the stream is marked only if it still has
    // exactly that many launches in flight (no other thread launched on it since).
    bool mark_synchronized(uint64_t stream_key, const char* reason, uint64_t expected_in_flight = 0,
                           uintptr_t expected_launcher = 0);
    uint64_t arrivals_per_stripe() const { return stripe_capacity_ * GPUOBS_WARP_ARRIVALS_PER_EVENT; }
    // The flush's steps (context_flush.cpp). cut_window, under cut_mu_: the window's
    // launches and claim positions. drain_window, under flush_mu_ on the drain
    // thread (or the flushing one): its records out of the rings into staging_,
    // classified, written with its counts; the rings' limits raised past it.
    bool cut_window(const char* reason, bool require_quiet, FlushWindow* w);
    void drain_window(FlushWindow& w);
    void drain_loop();
    void start_drain_thread();
    void classify_events(const std::vector<uint8_t>& selected, gpuobs_flush_info& info);
    void write_flush_chunks(const std::vector<gpuobs_launch>& launches, const std::vector<gpuobs_launch_count>& counts,
                            gpuobs_flush_info& info);

    // Lock order: cut_mu_, then flush_mu_, then launch_mu_ (see the order in tool_state.h).
    std::mutex launch_mu_;  // host launch state below; never held across a driver call from a flush
    std::mutex flush_mu_;   // serialises drains and owns the staging buffers, rings and probe
    std::mutex cut_mu_;     // serialises cuts, so windows reach the drain queue in order

    // The drain thread and its queue of cut windows (queue_mu_).
    std::mutex queue_mu_;
    std::condition_variable queue_cv_;
    std::deque<FlushWindow> queue_;
    std::atomic<uint64_t> windows_cut_{0}, windows_drained_{0};  // read without the lock by wait_for_drains
    // Windows whose ring positions are free again (limits raised), which comes
    // before their records are classified and written: what a relief waits for.
    // release_target_ (flush_mu_): the count the drain under way releases.
    std::atomic<uint64_t> windows_released_{0};
    uint64_t release_target_ = 0;
    bool wait_for_release(int timeout_ms) const;
    bool drain_thread_started_ = false;
    std::atomic<bool> drain_thread_failed_{false};
    CUcontext ctx_;
    CUdevice device_;
    uint32_t device_index_;
    const Config& config_;
    RecordingFile& file_;
    std::atomic<bool> active_{false};
    std::atomic<bool> paused_{false};
    uint64_t intervals_ = 0;  // automatic windows: intervals ended at quiet points
    bool destroyed_ = false;
    bool raced_reported_ = false;
    uint32_t sm_count_ = 0;
    uint32_t stripe_count_ = 0;
    uint64_t stripe_capacity_ = 0;

    // device memory
    gpuobs_control* ctl_ = nullptr;
    gpuobs_event* events_ = nullptr;
    gpuobs_warp_arrival* arrivals_ = nullptr;  // block_starts only: after the events
    gpuobs_launch_counter* counters_ = nullptr;
    gpuobs_block_slot* block_table_ = nullptr;
    gpuobs_function_entry* entries_ = nullptr;

    // host state (launch_mu_)
    struct FunctionSlot {
        uint32_t slot;
        CUmodule module;
    };
    std::unordered_map<CUfunction, FunctionSlot> function_slots_;
    // Each slot's code (start -> end, slot), to find a record's function by its pc.
    std::map<uint64_t, std::pair<uint64_t, uint32_t>> code_ranges_;
    bool device_launch_noticed_ = false;
    std::vector<uint8_t> function_selected_;  // by slot: passes the kernel filter
    std::vector<gpuobs_launch> pending_launches_;
    std::unordered_map<uint64_t, uint64_t> unsynced_streams_;  // stream -> launches since its sync
    // stream -> the thread that launched on it since its sync (its tag), or
    // kSharedStream once two have: only a stream of one thread may be cut by the
    // tool's own quiet point (another thread's launch may be begun, not enqueued).
    std::unordered_map<uint64_t, uintptr_t> stream_launchers_;
    static constexpr uintptr_t kSharedStream = 1;
    static uintptr_t thread_tag();                     // names the calling thread, never 0 or kSharedStream
    void note_launcher(uint64_t stream_key);           // under launch_mu_
    uintptr_t launcher_of(uint64_t stream_key) const;  // under launch_mu_; 0: none since its sync
    std::vector<gpuobs_event> staging_;
    std::vector<uint64_t> counter_staging_;  // one total per launch-counter slot
    // block_starts: this window's warp arrivals and the SLOTS chunk
    std::vector<gpuobs_warp_arrival> arrival_staging_;
    gpuobs_slots_info slots_info_{};
    // The rings' drain state, each counter slot's total at its last harvest, the
    // unmatched exits counted so far (flush_mu_).
    RingState event_ring_, arrival_ring_;
    std::vector<uint64_t> counter_baseline_;
    uint64_t unmatched_seen_ = 0;
    uint32_t flush_seq_ = 0;
    uint32_t next_function_slot_ = 0;  // slots are never reused, even when a module unloads
    uint64_t launches_total_ = 0;
    uint64_t unrecorded_launches_ = 0;  // while paused, since the last flush
    bool launched_since_quiet_ = false;
    // Ring pressure (context_pressure.cpp), under launch_mu_: blocks (and
    // block_starts' warp arrivals) listed since the last cut and all stripes' claims
    // at that cut; the estimate of the fullest stripe's fill (ring_pressure.h).
    uint64_t blocks_since_cut_ = 0, warps_since_cut_ = 0;
    uint64_t claims_at_cut_ = 0, warp_claims_at_cut_ = 0;
    FillEstimate fill_;
    // Streams given up on (still busy after 2 s, or the measurement held up): not
    // waited for again until the program synchronises them (their work may wait on
    // the program's thread).
    std::unordered_set<uint64_t> busy_streams_;
    std::atomic<uint64_t> waits_noted_{0};        // the waits the last PROGRAM_WAITED notice counted
    std::atomic<bool> measuring_broken_{false};   // no thread or no stream to measure with: relief is off
    std::atomic<bool> measuring_stopped_{false};  // the context is going (stop_measuring)
    // A wait for a drain's release that ran out: not waited for again until the
    // rings are released past this window count.
    std::atomic<uint64_t> stuck_release_{0};
    // The measuring thread: asked (measure_mu_), it reads the claim counters on its
    // own stream, so that no launching thread calls the driver for it (one that did,
    // inside its launch, hung an 8-thread storm) and a long drain does not delay it.
    std::mutex measure_mu_;
    std::condition_variable measure_cv_;
    bool measure_requested_ = false, measuring_ = false, measure_thread_started_ = false;
    uint64_t measures_done_ = 0;
    uint64_t measure_began_ns_ = 0;  // when the measurement under way began (measuring_)
    uint32_t failed_measures_ = 0;   // in a row; the measuring thread's own
    Sanitizer_StreamHandle measure_stream_ = nullptr;
    void request_measure();
    Sanitizer_StreamHandle create_own_stream();  // context_flush.cpp
    void remeasure_after_drain();                // once measuring has begun
    bool measure_now(int timeout_ms);            // asks, and waits for the answer
    bool measurement_stuck(uint64_t for_ns);     // one under way for longer than that
    void measure_loop();
    // One relief at a time (pressure_mu_, only ever tried); the rings' drained
    // positions as of the last drain (drained_mu_, a leaf lock).
    std::mutex pressure_mu_;
    std::mutex drained_mu_;
    std::vector<uint64_t> drained_view_, warp_drained_view_;
    // What the pressure path did: the first synchronisation is said, the rest
    // are in GPUOBS_DEBUG's line at the end.
    struct PressureCounts {
        std::atomic<uint64_t> asked{0}, measured{0}, relieve{0}, waited{0}, other_streams{0}, capturing{0}, synced{0},
            gave_up{0}, waits{0}, waited_ns{0};
    } pressure_counts_;

    // The context's own NULL stream, for the copies the tool makes in callbacks (the
    // calling thread's current context may be another one, or none).
    Sanitizer_StreamHandle stream_ = nullptr;
    // The drain's own non-blocking stream (flush_mu_): its copies never wait for, or
    // join, the program's streams (a graph capture in progress among them).
    Sanitizer_StreamHandle drain_stream_ = nullptr;
    bool drain_stream_tried_ = false;
    Sanitizer_StreamHandle cut_stream_ = nullptr;  // cut_mu_
    bool cut_stream_tried_ = false;
    Sanitizer_StreamHandle drain_stream();
    Sanitizer_StreamHandle cut_stream();  // cut_window and what it calls, under cut_mu_

    // the tool's own kernels: clock probe, counter harvest. Their output buffers are
    // shared by the cut (quiet time) and the drain (clock, counts): tool_kernels_mu_.
    std::recursive_mutex tool_kernels_mu_;
    bool tool_kernels_tried_ = false;
    std::atomic<bool> tool_kernels_done_{false};  // set once the first load has finished, either way
    CUfunction probe_fn_ = nullptr;
    CUfunction gather_fn_ = nullptr;
    uint64_t* totals_ = nullptr;  // device: one total per launch-counter slot
    CUstream probe_stream_ = nullptr;
    uint64_t* probe_out_ = nullptr;
    uint64_t last_clock_sample_ns_ = 0;
};

// Process-wide launch ids, in launch order across contexts.
uint64_t next_launch_id();

}  // namespace gpuobs
