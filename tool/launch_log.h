// A context's launch log: the function slots (and each one's code range), the
// launches since the last cut, and which streams have launched since their last
// synchronisation (what makes a quiet point). Fed by the launch callbacks, so its
// one lock is never held across a driver call made from a flush: a launching
// thread may hold the driver's locks.
#pragma once
#include <cuda.h>
#include <sanitizer.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "config.h"
#include "device_arena.h"
#include "graph_table.h"
#include "gpuobs_schema.h"
#include "recording_file.h"
#include "ring_pressure.h"

namespace gpuobs {

class PressureValve;
struct FlushWindow;

// Process-wide launch ids, in launch order across contexts.
uint64_t next_launch_id();

struct LaunchInfo {
    const Sanitizer_LaunchData* data;
    uint64_t stream_key;       // the stream whose synchronisation completes this launch
    uint32_t graph_launch_id;  // graph replays: the replay id, else 0
    bool graph_node;
    bool conditional_body = false;  // a kernel node inside a conditional node's body (GraphTable)
};

class LaunchLog {
public:
    LaunchLog(uint32_t device_index, const Config& config, RecordingFile& file, const DeviceArena& arena,
              PressureValve& valve)
        : device_index_(device_index), config_(config), file_(file), arena_(arena), valve_(valve) {}

    void open();   // after setup: launches are logged from now on
    void close();  // the context is going: nothing is logged or cut after this

    void on_functions_loaded(CUmodule module, const CUfunction* functions, uint32_t count);
    void on_module_unloading(CUmodule module);
    // Each returns true when the rings' plan asks for a measurement or relief.
    bool on_launch(const LaunchInfo& launch, bool paused);
    bool on_graph_replay(const std::vector<LearnedNode>& nodes, uint64_t stream_key, uint32_t replay_id);
    // A graph replay while paused: counted once (the per-node callbacks are off outside windows).
    void on_paused_graph_launch(uint64_t stream_key);
    // Outside a recording window every function's callback data is null, so each
    // patch leaves at its first test, before any load: the disarmed path costs what
    // the bare patch call costs. The record gate stays the rule (a function bound in
    // launch scope, or one the sanitizer refused, still reads it closed). A graph
    // instantiated while unbound records once bound again (tested on an H100).
    void bind_functions(bool armed);

    struct Synced {
        bool marked = false;   // false: the expectation below did not hold, nothing changed
        bool quiet = false;    // no stream is left with launches since its sync, after some were made
        bool pending = false;  // launches (or unrecorded ones) wait for a window
    };
    // expected_in_flight (the tool's own quiet point): the stream is marked only if
    // it still has exactly that many launches in flight, all by expected_launcher.
    Synced stream_synchronized(uint64_t stream_key, uint64_t expected_in_flight = 0, uintptr_t expected_launcher = 0);
    Synced context_synchronized();

    // The cut (Drainer::cut_window): first whether one may be made and the launch
    // count it starts from, then, after the claims are read, the window's launches,
    // unless a launch came in between (a quiet cut is then refused). `raced`: the
    // launches of a cut that is not quiet whose streams had not synchronised.
    bool may_cut(bool require_quiet, uint64_t* launches_before);
    bool take_window(bool require_quiet, uint64_t launches_before, FlushWindow* w, uint64_t* raced);
    // An in-stream snapshot's cut (Drainer::cut_at_snapshot): the launches listed
    // before the snapshot was queued on `stream_key`, the first `launches` of the
    // context, less those cut already; false when a later cut took them, or when a
    // launch on another stream was listed since (its claims may be below the cut).
    bool take_window_upto(uint64_t launches, uint64_t stream_key, FlushWindow* w);
    // Whether an in-stream snapshot queued now on `stream_key` follows every launch
    // listed (it is the only stream with launches in flight, all of them this
    // thread's), and how many have been listed.
    bool snapshot_point(uint64_t stream_key, uint64_t* launches);
    // Whether `stream_key` is the only stream with launches in flight, all the calling thread's.
    bool alone(uint64_t stream_key);
    uint64_t launches_total();

    // Of `slots`, those where a launch numbered past `launch_number` (listed after the
    // cut that ended there: FlushWindow::launches_end) has been listed, into `out`.
    void listed_after(uint64_t launch_number, const std::vector<uint32_t>& slots, std::unordered_set<uint32_t>* out);
    // The counter slots of the graph-node launches not yet cut: a node's grid id comes
    // back at every replay of its exec, so their totals are read at a quiet cut.
    void pending_graph_slots(std::vector<uint32_t>* slots);
    // Kernels launched from the device appear only in their blocks' records:
    // lists one launch per grid id the host never saw (flagged FROM_DEVICE).
    void list_device_launches(std::vector<gpuobs_event>& events, std::vector<gpuobs_launch>* launches);

    // For ring relief: whether this thread may wait for `stream_key` (the only stream
    // with launches in flight, all of them this thread's, not given up on) and how
    // many launches it has in flight.
    void relief_state(uint64_t stream_key, bool* can_sync, uint64_t* in_flight);
    // Not waited on again until the program synchronises it.
    void give_up_on(uint64_t stream_key);
    std::vector<std::pair<CUfunction, uint32_t>> functions();

    static uintptr_t thread_tag();  // names the calling thread, never 0 or kSharedStream

private:
    uint32_t function_slot_for(CUfunction f, const char* name, CUmodule module);  // under mu_
    void note_launcher(uint64_t stream_key);                                      // under mu_
    uintptr_t launcher_of(uint64_t stream_key) const;                             // under mu_; 0: none since its sync
    // Under mu_: the stream is the only one with launches in flight, all of them this thread's.
    bool alone_in_flight(uint64_t stream_key) const;
    static constexpr uintptr_t kSharedStream = 1;

    const uint32_t device_index_;
    const Config& config_;
    RecordingFile& file_;
    const DeviceArena& arena_;
    PressureValve& valve_;

    std::mutex mu_;
    bool open_ = false;
    struct FunctionSlot {
        uint32_t slot;
        CUmodule module;
    };
    std::unordered_map<CUfunction, FunctionSlot> function_slots_;
    bool armed_ = true;                            // whether functions get their callback data (bind_functions)
    void* callback_data_now(uint32_t slot) const;  // a function's, armed; null outside a window
    // Each slot's code (start -> end, slot), to find a record's function by its pc.
    std::map<uint64_t, std::pair<uint64_t, uint32_t>> code_ranges_;
    uint32_t next_function_slot_ = 0;  // slots are never reused, even when a module unloads
    bool device_launch_noticed_ = false;
    std::vector<uint8_t> function_selected_;  // by slot: passes the kernel filter
    std::vector<gpuobs_launch> pending_launches_;
    void list_launch(const gpuobs_launch& l);  // under mu_: pending, numbered, its slot's last
    // By counter slot: the number (launches_total_ once it was listed) of its last launch.
    std::vector<uint64_t> slot_last_listed_;
    uint64_t launches_total_ = 0;
    uint64_t launches_cut_ = 0;         // of launches_total_, those taken into windows
    uint64_t unrecorded_launches_ = 0;  // while paused, since the last cut
    bool launched_since_quiet_ = false;
    std::unordered_map<uint64_t, uint64_t> unsynced_streams_;  // stream -> launches since its sync
    // stream -> the thread that launched on it since its sync (its tag), or
    // kSharedStream once two have: only a stream of one thread may be cut by the
    // tool's own quiet point (another thread's launch may be begun, not enqueued).
    std::unordered_map<uint64_t, uintptr_t> stream_launchers_;
    // Streams given up on (still busy after 2 s, or the measurement held up): not
    // waited for again until the program synchronises them (their work may wait on
    // the program's thread).
    std::unordered_set<uint64_t> busy_streams_;
};

// GPUOBS_DUMP_PATCHED_CODE (patched_code_dump.cpp): a launched function's code as it runs now.
void dump_patched_code(const std::string& dir, CUmodule module, const std::string& name, uint32_t device_index,
                       uint32_t slot, Sanitizer_StreamHandle stream);

}  // namespace gpuobs
