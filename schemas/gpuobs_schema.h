/*
 * gpuobs schema: the one source of truth for every binary layout gpuobs uses.
 *
 * Read by the device patches (nvcc), the host tool (g++), and Python (cffi's
 * cdef reads the part between the cdef markers; numpy dtypes are derived from
 * cffi's sizeof/offsetof). Change a layout here and nowhere else; then bump
 * GPUOBS_SCHEMA_HASH to the value tests/test_schema.py prints.
 *
 * The file format that carries these structs is described in recording-format.md.
 */
#ifndef GPUOBS_SCHEMA_H
#define GPUOBS_SCHEMA_H

#include <stdint.h>

/* gpuobs:cdef-begin */
#define GPUOBS_FORMAT_VERSION 1
/* FNV-1a 64 of the canonical layout text (see gpuobs/recording_file/schema.py: layout_text). */
#define GPUOBS_SCHEMA_HASH 0x5af4e526fee24ea0
#define GPUOBS_EVENT_SIZE 64
#define GPUOBS_MAX_STRIPES 256
#define GPUOBS_NO_FLUSH 0xFFFFFFFF       /* a launch read before the FLUSH chunk that closes its window */
#define GPUOBS_LAUNCH_TABLE_SIZE 65536   /* launches a flush window holds apart (grid id low bits) */
#define GPUOBS_LAUNCH_COUNTER_STRIPES 15 /* +1: 16 counters, two cache lines */
#define GPUOBS_BLOCK_TABLE_SIZE 262144
#define GPUOBS_FUNCTION_TABLE_SIZE 65536
#define GPUOBS_NAME_LEN 256
#define GPUOBS_WARP_ARRIVALS_PER_EVENT 4 /* block_starts: warp-arrival entries per event record */
#define GPUOBS_CONTROL_MAGIC 0x5342424f

/* What the patches do; each rung adds one cost to the one before it. */
enum gpuobs_mode {
    GPUOBS_MODE_OFF = 0,              /* tool loaded, nothing patched */
    GPUOBS_MODE_BLOCK_NOOP = 1,       /* empty call at block entry */
    GPUOBS_MODE_BLOCK_COUNTER = 2,    /* leader counts its block: one atomic per block */
    GPUOBS_MODE_BLOCK_TRACE = 3,      /* one record per block: start, end, SM */
    GPUOBS_MODE_MEM_NOOP = 4,         /* empty call before every global access */
    GPUOBS_MODE_MEM_SAMPLED = 5,      /* every access counted, 1 in 2^shift captured */
    GPUOBS_MODE_MEM_FULL = 6,         /* every access counted and captured */
    GPUOBS_MODE_BLOCK_TRACE_NOOP = 7, /* empty calls at block entry and exit: block_trace's own floor */
    GPUOBS_MODE_BLOCK_STARTS = 8      /* one record per block at its start, with the hardware warp slots its
                                         warps took; its end is an upper bound, from the next arrivals in
                                         those slots (no exit patch) */
};

/* What each mode does: its row below is the only place a mode's behaviour is
 * decided (the tool reads it with gpuobs_mode_traits(), Python with
 * schema.mode_traits(); the patch functions a mode inserts are in
 * GPUOBS_MODE_PATCHES). A new mode: its enum value, name, traits and patches
 * here, its device code in device_patches/gpuobs_patches.cu. */
enum gpuobs_trait {
    GPUOBS_TRAIT_PATCHES = 1 << 0,         /* inserts device patches */
    GPUOBS_TRAIT_COUNTS = 1 << 1,          /* counts exactly per launch, in the launch counters */
    GPUOBS_TRAIT_COUNTS_ACCESSES = 1 << 2, /* ... counting global accesses, not blocks */
    GPUOBS_TRAIT_BLOCK_RECORDS = 1 << 3,   /* one record per block: its start and SM */
    GPUOBS_TRAIT_MEASURED_ENDS = 1 << 4,   /* block ends stamped by an exit patch */
    GPUOBS_TRAIT_BOUNDED_ENDS = 1 << 5,    /* block ends bounded by the host from warp-slot reuse */
    GPUOBS_TRAIT_WARP_ARRIVALS = 1 << 6,   /* a ring of warp arrivals beside the events */
    GPUOBS_TRAIT_ACCESS_RECORDS = 1 << 7,  /* records of hash-sampled global accesses */
    GPUOBS_TRAIT_EVERY_ACCESS = 1 << 8,    /* ... every access recorded: the sample shift is 0 */
    GPUOBS_TRAIT_CLAIMS_LOW_HALF = 1 << 9, /* claims on the low 32 bits of the stripe counters */
    GPUOBS_TRAIT_MEMORY_PATCH = 1 << 10    /* patches global memory accesses */
};
enum gpuobs_mode_traits {
    GPUOBS_TRAITS_OFF = 0,
    GPUOBS_TRAITS_BLOCK_NOOP = GPUOBS_TRAIT_PATCHES,
    GPUOBS_TRAITS_BLOCK_COUNTER = GPUOBS_TRAIT_PATCHES | GPUOBS_TRAIT_COUNTS,
    GPUOBS_TRAITS_BLOCK_TRACE = GPUOBS_TRAIT_PATCHES | GPUOBS_TRAIT_COUNTS | GPUOBS_TRAIT_BLOCK_RECORDS |
                                GPUOBS_TRAIT_MEASURED_ENDS | GPUOBS_TRAIT_CLAIMS_LOW_HALF,
    GPUOBS_TRAITS_MEM_NOOP = GPUOBS_TRAIT_PATCHES | GPUOBS_TRAIT_MEMORY_PATCH,
    GPUOBS_TRAITS_MEM_SAMPLED = GPUOBS_TRAIT_PATCHES | GPUOBS_TRAIT_MEMORY_PATCH | GPUOBS_TRAIT_COUNTS |
                                GPUOBS_TRAIT_COUNTS_ACCESSES | GPUOBS_TRAIT_ACCESS_RECORDS,
    GPUOBS_TRAITS_MEM_FULL = GPUOBS_TRAIT_PATCHES | GPUOBS_TRAIT_MEMORY_PATCH | GPUOBS_TRAIT_COUNTS |
                             GPUOBS_TRAIT_COUNTS_ACCESSES | GPUOBS_TRAIT_ACCESS_RECORDS | GPUOBS_TRAIT_EVERY_ACCESS,
    GPUOBS_TRAITS_BLOCK_TRACE_NOOP = GPUOBS_TRAIT_PATCHES,
    GPUOBS_TRAITS_BLOCK_STARTS = GPUOBS_TRAIT_PATCHES | GPUOBS_TRAIT_COUNTS | GPUOBS_TRAIT_BLOCK_RECORDS |
                                 GPUOBS_TRAIT_BOUNDED_ENDS | GPUOBS_TRAIT_WARP_ARRIVALS | GPUOBS_TRAIT_CLAIMS_LOW_HALF
};

enum gpuobs_event_kind {
    GPUOBS_EVENT_EMPTY = 0, /* slot claimed but never completed */
    GPUOBS_EVENT_BLOCK = 1,
    GPUOBS_EVENT_MEMORY = 2
};

/* gpuobs_event.flags bits for block events; memory events carry the
 * sanitizer's SANITIZER_MEMORY_DEVICE_FLAG_* bits instead. */
enum gpuobs_block_flags {
    GPUOBS_BLOCK_END_UNCONFIRMED = 1, /* time_end may be late: another run of the same grid id and
                                         block index (a graph replayed twice between two flushes, a
                                         conditional body run again) stamped it too. Seen as more exits
                                         than the block has threads, or as an end later than the start
                                         of the same block's next run in the window (tool/late_ends.h) */
    GPUOBS_BLOCK_EARLY_EXITS = 2,     /* fewer exits were counted than the block has threads:
                                         threads that left before the leader published the start
                                         (their exits precede the leader's own, so time_end
                                         stands); counted in unmatched_exit_threads */
    GPUOBS_BLOCK_SLOTS_INCOMPLETE = 4 /* block_starts: fewer warp slots are known than the block has
                                         warps (a warp's arrival was dropped, or its slot was past
                                         63), so the slots cannot bound its end */
};

/* One event: exactly one 64-byte cache line. */
typedef struct gpuobs_event {
    uint64_t time_start;    /* %globaltimer ns: block start, or the access */
    uint64_t time_end;      /* %globaltimer ns: block end (last thread's exit); 0 for memory */
    uint64_t grid_id;       /* %gridid of the launch; matched to gpuobs_launch.grid_id */
    uint64_t address;       /* memory: generic address accessed; block_starts: bit i set when one of
                               the block's warps took hardware warp slot i (%warpid) of its SM */
    uint64_t pc;            /* memory: pc of the access as the sanitizer reports it; block: pc of the
                               block entry (the host finds a device-launched grid's function by it) */
    uint32_t function_slot; /* per-context function slot (gpuobs_function_info) */
    uint32_t block_x;
    uint16_t block_y;
    uint16_t block_z;
    uint16_t thread_index; /* memory: flat thread index within the block; block: threads in the block */
    uint16_t sm_id;        /* %smid at block start, or at the access */
    uint16_t sm_id_end;    /* block: %smid of the block (a block never changes SM) */
    uint8_t kind;          /* enum gpuobs_event_kind; written last (commit) */
    uint8_t access_size;   /* memory: bytes */
    uint16_t flags;        /* block: enum gpuobs_block_flags; memory: the sanitizer's access flags */
    uint16_t exit_count;   /* block: threads whose exit stamped this event */
} gpuobs_event;

/* One claim pointer and drop counter per stripe (per SM), on its own line,
 * so that no single address serialises the GPU. A stripe is a ring: claim
 * positions count up for the whole run (never reset), position p lives in
 * record p mod stripe_capacity (a power of two), and a claim at or past the
 * stripe's limit (control.limits: the host raises it as it drains) is a drop.
 * So the host drains while kernels keep writing, and loses nothing it did
 * not count. */
typedef struct gpuobs_stripe {
    uint64_t claimed;     /* attempts so far; the atomic add that counts also claims (the block entries add to
                             its low 32 bits only and compare with the limit's modulo 2^32: the host widens it
                             from what it drained; right while fewer than 2^31 drops wait undrained) */
    uint64_t dropped;     /* attempts so far that found the stripe's limit reached */
    uint64_t sampled_out; /* blocks (or captured accesses) so far counted but, the sample gate closed, not
                             claimed: on the line of stripes[] at the SM id modulo GPUOBS_MAX_STRIPES, whatever
                             the stripe count (the host sums every line) */
    uint64_t pad[5];
} gpuobs_stripe;

/* block_starts: a warp other than its block's first, arriving in its slot. The
 * host folds these into their blocks' events (address) at the flush. Written one
 * 32-bit word at a time, kind's word last, so an entry reads as complete only
 * when all of it is there. */
typedef struct gpuobs_warp_arrival {
    uint64_t grid_id;
    uint64_t time; /* %globaltimer at the warp's entry */
    uint32_t block_x;
    uint16_t block_y;
    uint16_t block_z;
    uint16_t sm_id;
    uint8_t warp_slot; /* %warpid */
    uint8_t kind;      /* 1 once written */
    uint32_t reserved;
} gpuobs_warp_arrival;

/* The record gate (gpuobs_control.record_gate): recording windows turn on the
 * device, so patched code stays in place and CUDA graphs instantiated at any
 * time follow them. GPUOBS_RECORD_GATE_OFF: the patches return at once (nothing
 * counted or recorded, as if unpatched); 0: they count and record. The host
 * writes it only where no kernel of the context runs, or in stream order, so one
 * launch sees one value. Outside a window the tool also takes each function's
 * callback data away (tool/launch_log.h: bind_functions), so most patches leave
 * at their null test before reading the gate; the gate covers the rest. */
#define GPUOBS_RECORD_GATE_OFF 0xFFFFFFFFu

/* The sample gate (gpuobs_control.sample_gate): the data budget and the duty
 * cycle (tool/sampler.h). GPUOBS_SAMPLE_GATE_OUT: a block (or a captured access)
 * is counted as ever but not recorded, and counted in its stripe's sampled_out;
 * 0: recorded. The tool's sampler thread turns it whenever it likes, from a
 * stream of its own: counts stay exact whatever a launch running across a turn
 * sees, and its records are those its blocks took while the gate was open. */
#define GPUOBS_SAMPLE_GATE_OUT 1u

/* The duty cycle on the device's clock (--duty): a period of 2^p ns whose first
 * 2^o ns (o < p) are the on time, carried in the top 12 bits of every callback data
 * pointer, so a patch tests it with no load, and a CUDA graph exec, which keeps the
 * callback data it was instantiated with, carries it whenever it was instantiated.
 * Bits 58-63: 64 - p; bits 52-57: 64 - p + o (the two shifts that make
 * (%globaltimer mod 2^p) >> o). A block (or an access) is counted and recorded only
 * where %globaltimer mod 2^p < 2^o; elsewhere the patches return at once, as
 * outside a window. The device's clock, not the run's start, places the on times.
 * block_trace's exits still stamp through one more on length, so blocks that
 * started inside it end inside the record. Only the patches' _duty twins read the
 * bits; every patch masks them off (GPUOBS_CALLBACK_ADDRESS_MASK) before it uses the
 * pointer. The tool carries them only where the arena lies below 2^52, patching
 * with the _duty twins; elsewhere its sampler turns the sample gate from the host
 * instead (GPUOBS_SAMPLING_DUTY_ON_DEVICE unset). */
#define GPUOBS_DUTY_LEFT_SHIFT_BIT 58
#define GPUOBS_DUTY_RIGHT_SHIFT_BIT 52
#define GPUOBS_CALLBACK_ADDRESS_MASK 0x000FFFFFFFFFFFFFull

/* Per-context control block in device memory. */
typedef struct gpuobs_control {
    uint32_t magic;
    uint32_t mode;                   /* enum gpuobs_mode */
    uint32_t sample_shift;           /* capture when the low sample_shift hash bits are 0 */
    uint32_t stripe_count;           /* stripes in use (SM count), <= GPUOBS_MAX_STRIPES */
    uint64_t stripe_capacity;        /* records per stripe */
    uint64_t events;                 /* device address of gpuobs_event[stripe_count * stripe_capacity] */
    uint64_t launch_counters;        /* device address of gpuobs_launch_counter[GPUOBS_LAUNCH_TABLE_SIZE] */
    uint64_t block_table;            /* device address of gpuobs_block_slot[GPUOBS_BLOCK_TABLE_SIZE] */
    uint64_t unmatched_exit_threads; /* block_trace: exiting threads that did not find their block's slot */
    uint32_t record_gate;            /* read by every patch before it counts or records: see above */
    uint32_t sample_gate;            /* read before a record is claimed: see above */
    gpuobs_stripe stripes[GPUOBS_MAX_STRIPES];
    gpuobs_stripe warp_stripes[GPUOBS_MAX_STRIPES]; /* block_starts: claims of warp arrivals, per SM */
    uint64_t limits[GPUOBS_MAX_STRIPES];            /* per stripe: first position not yet free (drained) */
    uint64_t warp_limits[GPUOBS_MAX_STRIPES];       /* the same for block_starts' warp arrivals */
} gpuobs_control;

/* Exact per-launch counts. The slot comes from the grid id alone, so the hot path
 * does no loads; the host resolves slots to the launches it saw (a slot shared
 * by two launches of one flush window is reported as shared, never split).
 * The table holds GPUOBS_LAUNCH_TABLE_SIZE of these, interleaved stripe-major
 * (gpuobs_launch_counter_index): the 16 stripes of one slot sit in 16 different
 * cache lines, so one launch's adds spread over 16 lines of L2, not 2. */
typedef struct gpuobs_launch_counter {
    uint64_t count[GPUOBS_LAUNCH_COUNTER_STRIPES + 1]; /* blocks (block modes) or accesses (memory modes) */
} gpuobs_launch_counter;

/* block_trace: where a running block's exits find its event, in a direct-mapped
 * table (slot: gpuobs_block_table_slot). The leader publishes both words with one
 * 16-byte store at block start. */
typedef struct gpuobs_block_slot {
    uint64_t key;         /* the block index's low 32 bits over the grid id's low 31, then 1; 0 = never used */
    uint64_t event_index; /* the block's event, or ~0 when its claim was dropped */
} gpuobs_block_slot;

/* What each patched function's callback data points to (device memory): the
 * constants a patch may need, one 64-byte line per function. Entries are 64-byte
 * aligned and the callback data pointer is the entry's address plus the sample
 * shift, so the hot path of a memory patch reads its shift without a load. */
typedef struct gpuobs_function_entry {
    uint64_t stripe_capacity; /* records per stripe */
    uint32_t stripe_count;
    uint32_t function_slot;
    uint32_t mode;
    uint32_t sample_shift; /* the same as the pointer's low bits; for readers of the table */
    uint64_t reserved[5];  /* pads the entry to 64 bytes */
} gpuobs_function_entry;

/* ---- Recording file (.gpuobs) ---- */

enum gpuobs_chunk_type {
    GPUOBS_CHUNK_RUN = 1,        /* gpuobs_run_info + argv text */
    GPUOBS_CHUNK_DEVICE = 2,     /* gpuobs_device_info */
    GPUOBS_CHUNK_FUNCTION = 3,   /* gpuobs_function_info + names */
    GPUOBS_CHUNK_LAUNCHES = 4,   /* gpuobs_launch[] */
    GPUOBS_CHUNK_CLOCK = 5,      /* gpuobs_clock_sample[] */
    GPUOBS_CHUNK_FLUSH = 6,      /* gpuobs_flush_info + gpuobs_launch_count[] */
    GPUOBS_CHUNK_EVENTS = 7,     /* gpuobs_events_header + padding + gpuobs_event[] */
    GPUOBS_CHUNK_MODULE = 8,     /* gpuobs_module_info */
    GPUOBS_CHUNK_END = 9,        /* gpuobs_end_info: the run closed cleanly */
    GPUOBS_CHUNK_API_NAMES = 10, /* gpuobs_api_name + name, one per API function first seen */
    GPUOBS_CHUNK_API_CALLS = 11, /* gpuobs_api_call[] (--api-trace) */
    GPUOBS_CHUNK_NOTICE = 12,    /* gpuobs_notice + text: something the tool could not record, and why */
    GPUOBS_CHUNK_SLOTS = 13,     /* gpuobs_slots_info: block_starts, after each FLUSH */
    GPUOBS_CHUNK_SAMPLING = 14   /* gpuobs_sampling_info: after each FLUSH of a mode that records */
};

/* gpuobs_launch.flags bits. */
enum gpuobs_launch_flags {
    GPUOBS_LAUNCH_GRAPH_NODE = 1,       /* a kernel node of a graph replay */
    GPUOBS_LAUNCH_RACED_FLUSH = 2,      /* listed by a flush that was not at a quiet point while its stream had not
                                           synchronised: it may have been running, so its counts and records may
                                           be partial (the rest fall in the next window) */
    GPUOBS_LAUNCH_FROM_DEVICE = 4,      /* launched by a kernel (dynamic parallelism): the host never saw the
                                           launch, so it is listed from its blocks' records at the flush; its
                                           grid and block sizes are what those records show (lower bounds) */
    GPUOBS_LAUNCH_FROM_NODE_TABLE = 8,  /* a graph replay's kernel node, listed from its exec's node table
                                           (learned from one replay) at the replay's launch: no per-node
                                           callback ran for it */
    GPUOBS_LAUNCH_CONDITIONAL_BODY = 16 /* a kernel node inside a conditional node's body (WHILE, IF,
                                           SWITCH): the device decides how often it runs in one replay
                                           (0..n times) and the host is told once, so it is listed once
                                           per replay and its count and records are those of all its runs
                                           (runs = counted / grid blocks) */
};

/* gpuobs_module_info.status values. */
enum gpuobs_module_status {
    GPUOBS_MODULE_NEW = 0, /* never stored in a recording */
    GPUOBS_MODULE_PATCHED = 1,
    GPUOBS_MODULE_PATCH_FAILED = 2,
    GPUOBS_MODULE_NOT_PATCHED = 3, /* mode off */
    GPUOBS_MODULE_PATCHING = 4,    /* never stored in a recording */
    GPUOBS_MODULE_DEFERRED = 5     /* loaded while recording was paused: patched when it resumes */
};

/* gpuobs_notice.code: why something that ran on the GPU is missing from the recording. */
enum gpuobs_notice_code {
    GPUOBS_NOTICE_CONTEXT_UNINSTRUMENTED = 1, /* a context could not be set up: nothing of it is recorded */
    GPUOBS_NOTICE_MODULE_UNPATCHED = 2,       /* a module could not be patched: its kernels run unrecorded */
    GPUOBS_NOTICE_FUNCTION_UNBOUND = 3,       /* a function's callback data could not be bound */
    GPUOBS_NOTICE_CONTEXT_SETUP_RETRIED = 4,  /* the first setup of a context failed and a later one worked */
    GPUOBS_NOTICE_DEVICE_LAUNCHES = 5,        /* grids were launched from the device: what is and is not known */
    GPUOBS_NOTICE_PROGRAM_WAITED = 6,         /* ring pressure: how often and how long the tool made the program's
                                                 launching threads wait for drains, so that nothing was dropped */
    GPUOBS_NOTICE_CONDITIONAL_BODIES = 7      /* a graph with conditional nodes was replayed: which kernels run in
                                                 their bodies, listed once per replay for all their runs */
};

typedef struct gpuobs_file_header {
    char magic[8]; /* "GPUOBS\r\n" */
    uint32_t format_version;
    uint32_t header_size;
    uint64_t schema_hash;
    char tool_version[32];
} gpuobs_file_header;

/* gpuobs_chunk_header.flags bits. A reader refuses a bit it does not know. */
enum gpuobs_chunk_flags {
    GPUOBS_CHUNK_SHUFFLED_ZLIB = 1 /* the payload is a gpuobs_packed_header, its head_size bytes as they are,
                                      then a zlib stream of the rest byte-shuffled (byte k of every row_size
                                      row together, as Blosc does): LAUNCHES, FLUSH and API_CALLS only */
};

/* At the start of a GPUOBS_CHUNK_SHUFFLED_ZLIB payload: what it unpacks to. */
typedef struct gpuobs_packed_header {
    uint64_t raw_length; /* payload bytes unpacked: head_size, then whole rows of row_size */
    uint32_t row_size;   /* the table's row (gpuobs_launch, gpuobs_launch_count, gpuobs_api_call) */
    uint32_t head_size;  /* bytes stored as they are before the stream (FLUSH: its gpuobs_flush_info) */
} gpuobs_packed_header;

typedef struct gpuobs_chunk_header {
    uint32_t type;   /* enum gpuobs_chunk_type */
    uint32_t flags;  /* enum gpuobs_chunk_flags */
    uint64_t length; /* payload bytes after this header */
    uint32_t crc32;  /* CRC-32 of type, flags, length, then the payload */
    uint32_t reserved;
} gpuobs_chunk_header;

typedef struct gpuobs_run_info {
    uint32_t pid;
    uint32_t mode;
    uint32_t sample_shift;
    uint32_t callback_scope; /* 0 function, 1 launch */
    uint64_t capacity;       /* records per context */
    uint64_t start_realtime_ns;
    uint64_t start_monotonic_ns;
    uint32_t argv_len;     /* bytes of NUL-separated argv after this struct */
    uint32_t window_every; /* automatic windows: 1 of this many intervals between quiet
                              synchronisations recorded (0 = none) */
} gpuobs_run_info;

typedef struct gpuobs_device_info {
    uint32_t device_index; /* CUDA ordinal in this process */
    uint32_t sm_count;
    uint32_t cc_major;
    uint32_t cc_minor;
    uint64_t context_id;
    uint8_t uuid[16];
    char name[GPUOBS_NAME_LEN];
} gpuobs_device_info;

typedef struct gpuobs_function_info {
    uint32_t function_slot;
    uint32_t device_index;
    uint64_t module_id;
    uint32_t mangled_len;   /* bytes of mangled name after this struct */
    uint32_t demangled_len; /* then bytes of demangled name */
} gpuobs_function_info;

typedef struct gpuobs_module_info {
    uint64_t module_id;
    uint32_t device_index;
    uint32_t status;      /* enum gpuobs_module_status */
    uint32_t patch_count; /* times the tool committed a patch for it: must be 1 */
    uint32_t cubin_size;
    uint64_t load_monotonic_ns;
} gpuobs_module_info;

typedef struct gpuobs_launch {
    uint64_t launch_id; /* process-wide, in launch order */
    uint64_t grid_id;   /* the sanitizer's gridId (== device %gridid) */
    uint64_t stream_id;
    uint64_t host_begin_ns; /* CLOCK_MONOTONIC at the launch callback */
    uint32_t function_slot;
    uint32_t device_index;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t graph_launch_id; /* graph replays: the replay's launch id, else 0 */
    uint32_t flags;           /* enum gpuobs_launch_flags */
    uint64_t api_call_id;     /* --api-trace: the innermost API call open on the launching thread, else 0 */
} gpuobs_launch;

/* The device %globaltimer read between two readings of each host clock. */
typedef struct gpuobs_clock_sample {
    uint32_t device_index;
    uint32_t method; /* 1 = probe kernel between host readings */
    uint64_t device_ns;
    uint64_t monotonic_before;
    uint64_t monotonic_after;
    uint64_t boottime_before;
    uint64_t boottime_after;
    uint64_t realtime_before;
    uint64_t realtime_after;
} gpuobs_clock_sample;

typedef struct gpuobs_flush_info {
    uint32_t device_index;
    /* numbered per GPU for the whole process: (device_index, flush_seq) names one window */
    uint32_t flush_seq;
    uint64_t attempted;              /* sum of stripe claims */
    uint64_t recorded;               /* claims that got a slot: attempted - dropped */
    uint64_t dropped;                /* claims that found the stripe full: counted, never silent */
    uint64_t filtered;               /* recorded events left out by the host kernel filter (or by gpuobs trim) */
    uint64_t host_time_ns;           /* CLOCK_MONOTONIC at the flush */
    uint64_t unattributed;           /* counts in launch-counter slots of no known launch */
    uint64_t unmatched_exit_threads; /* block_trace: exiting threads that found no event to stamp */
    uint64_t unconfirmed_ends;       /* block_trace: events flagged GPUOBS_BLOCK_END_UNCONFIRMED */
    uint64_t unrecorded_launches;    /* kernel launches and graph replays (one each) while recording was
                                        paused (outside windows): not in the launch table */
    uint32_t launch_count_len;       /* gpuobs_launch_count entries after this struct */
    uint32_t incomplete;             /* slots claimed but never committed (kernel aborted) */
} gpuobs_flush_info;

/* block_starts: what one flush learned about warp slots (after its FLUSH chunk). */
typedef struct gpuobs_slots_info {
    uint32_t device_index;
    uint32_t flush_seq;
    uint64_t warp_arrivals;         /* arrivals of warps other than their block's first, attempted */
    uint64_t warp_arrivals_dropped; /* of those, found their stripe full (their blocks are flagged
                                       GPUOBS_BLOCK_SLOTS_INCOMPLETE) */
    uint64_t unmatched_arrivals;    /* recorded arrivals whose block has no event in this window */
    uint64_t device_quiet_ns;       /* %globaltimer read by a tool kernel after every stream of the
                                       window was synchronised: each block of a launch listed in this
                                       window ended before it; 0 when the flush was not at a quiet point */
} gpuobs_slots_info;

/* What the sampler left out of one flush window, and the rule it kept
 * (tool/sampler.h): records of the window's blocks (or captured accesses) were
 * taken only while the sample gate was open. Written after each FLUSH in the
 * modes that record. */
typedef struct gpuobs_sampling_info {
    uint32_t device_index;
    uint32_t flush_seq;
    uint64_t sampled_out;        /* counted in this window but not recorded: the gate was closed */
    uint64_t budget_bytes_per_s; /* the data budget (0: none) */
    uint64_t burst_bytes;        /* what may be recorded at once above it (the bucket's depth) */
    uint64_t duty_on_ns;         /* the duty cycle: the first ON of every PERIOD (0: none) */
    uint64_t duty_period_ns;
    uint64_t gate_closed_ns; /* host time the gate was closed since the last flush of this device */
    uint32_t gate_turns;     /* times the gate closed since then */
    uint32_t flags;          /* enum gpuobs_sampling_flags */
} gpuobs_sampling_info;

/* gpuobs_sampling_info.flags bits. */
enum gpuobs_sampling_flags {
    GPUOBS_SAMPLING_DUTY_ON_DEVICE = 1 /* the duty cycle is kept on the device's clock (see the callback data's
                                          duty bits): duty_on_ns and duty_period_ns are powers of two, its on
                                          times are where %globaltimer mod duty_period_ns < duty_on_ns, and
                                          outside them nothing was counted or recorded (a launch run wholly
                                          there is settled as unrecorded; gate_closed_ns and gate_turns are
                                          the data budget's alone). Unset: the sampler turned the sample gate
                                          from the host, counting every block. */
};

typedef struct gpuobs_launch_count {
    uint64_t grid_id;
    uint64_t count;            /* exact blocks or accesses counted in this flush window */
    uint32_t launches_sharing; /* launches of this window whose counts share the slot (1 = exact) */
    uint32_t pad;
} gpuobs_launch_count;

typedef struct gpuobs_events_header {
    uint32_t device_index;
    uint32_t flush_seq;
    uint32_t count;   /* events after the padding */
    uint32_t padding; /* bytes of zeros so the events start 64-byte aligned */
} gpuobs_events_header;

/* --api-trace: one CUDA driver or runtime API call, on the host clock. */
typedef struct gpuobs_api_call {
    uint64_t call_id;   /* process-wide, in order of entry; launches refer to it */
    uint64_t enter_ns;  /* CLOCK_MONOTONIC at the call's entry */
    uint64_t exit_ns;   /* CLOCK_MONOTONIC at its exit */
    uint32_t thread_id; /* Linux thread id */
    uint32_t api_id;    /* callback domain << 16 | callback id: see gpuobs_api_name */
    uint32_t depth;     /* calls open on the thread at entry (0 = outermost) */
    int32_t result;     /* CUresult or cudaError_t returned */
} gpuobs_api_call;

typedef struct gpuobs_api_name {
    uint32_t api_id;
    uint32_t name_len; /* bytes of the function's name after this struct */
} gpuobs_api_name;

/* Something the tool could not record, and why (also printed on stderr). */
typedef struct gpuobs_notice {
    uint32_t device_index; /* CUDA ordinal, or 0xFFFFFFFF when it concerns no one device */
    uint32_t code;         /* enum gpuobs_notice_code */
    uint64_t monotonic_ns; /* CLOCK_MONOTONIC when it happened */
    uint32_t text_len;     /* bytes of text after this struct */
    uint32_t reserved;
} gpuobs_notice;

typedef struct gpuobs_end_info {
    uint64_t end_monotonic_ns;
    uint64_t flushes;
    uint64_t launches;
    uint64_t events;
} gpuobs_end_info;
/* gpuobs:cdef-end */

#define GPUOBS_FILE_MAGIC "GPUOBS\r\n"

/* Each mode's traits and patch functions (block entry, block exit, global memory
 * access; 0 where none), in enum gpuobs_mode value order (tests/test_schema.py
 * checks the order and the names against the enums). */
#define GPUOBS_MODE_PATCHES(ROW)                                                             \
    ROW(GPUOBS_TRAITS_OFF, 0, 0, 0)                                                          \
    ROW(GPUOBS_TRAITS_BLOCK_NOOP, "gpuobs_block_noop", 0, 0)                                 \
    ROW(GPUOBS_TRAITS_BLOCK_COUNTER, "gpuobs_block_counter", 0, 0)                           \
    ROW(GPUOBS_TRAITS_BLOCK_TRACE, "gpuobs_block_trace_enter", "gpuobs_block_trace_exit", 0) \
    ROW(GPUOBS_TRAITS_MEM_NOOP, 0, 0, "gpuobs_mem_noop")                                     \
    ROW(GPUOBS_TRAITS_MEM_SAMPLED, 0, 0, "gpuobs_mem_access")                                \
    ROW(GPUOBS_TRAITS_MEM_FULL, 0, 0, "gpuobs_mem_access")                                   \
    ROW(GPUOBS_TRAITS_BLOCK_TRACE_NOOP, "gpuobs_block_noop", "gpuobs_block_exit_noop", 0)    \
    ROW(GPUOBS_TRAITS_BLOCK_STARTS, "gpuobs_block_starts_enter", 0, 0)

/* The name of each enum gpuobs_mode value, in value order: what GPUOBS_MODE and
 * `gpuobs record --mode` take (tests/test_schema.py checks it against the enum). */
#define GPUOBS_MODE_NAMES                                                                           \
    {                                                                                               \
        "off", "block_noop", "block_counter", "block_trace", "mem_noop", "mem_sampled", "mem_full", \
            "block_trace_noop", "block_starts"                                                      \
    }

/* The per-context arena in device memory: the function entries at its start,
 * which is aligned to GPUOBS_ARENA_ALIGN, so a patch finds the arena's base by
 * masking its callback data pointer, and every table at a fixed offset from it:
 * no load stands between a patch and its first atomic. */
#define GPUOBS_ARENA_ALIGN 0x400000ull
#define GPUOBS_ARENA_COUNTERS 0x400000ull    /* gpuobs_launch_counter[GPUOBS_LAUNCH_TABLE_SIZE] */
#define GPUOBS_ARENA_CONTROL 0xC00000ull     /* gpuobs_control */
#define GPUOBS_ARENA_BLOCK_TABLE 0xC10000ull /* gpuobs_block_slot[GPUOBS_BLOCK_TABLE_SIZE] */
#define GPUOBS_ARENA_EVENTS \
    (GPUOBS_ARENA_BLOCK_TABLE + GPUOBS_BLOCK_TABLE_SIZE * 16ull) /* gpuobs_event[], to the end */

/* Hashing shared by the device patches and the host tool: the host must find the
 * launch-counter slot the device wrote, so both use these very functions. */
#if defined(__CUDACC__)
#define GPUOBS_HD static __host__ __device__ __forceinline__
#else
#define GPUOBS_HD static inline
#endif

/* The launch-counter slot of a grid. Grid ids count up per context, so their
 * low bits keep up to GPUOBS_LAUNCH_TABLE_SIZE consecutive launches apart (a
 * hash would let two of them collide) and cost the patches no arithmetic. */
/* A mode's traits (enum gpuobs_trait bits); 0 for a value past the table. */
GPUOBS_HD uint32_t gpuobs_mode_traits(uint32_t mode) {
#define GPUOBS_TRAITS_OF(traits, entry, exit, memory) (uint32_t)(traits),
    const uint32_t table[] = {GPUOBS_MODE_PATCHES(GPUOBS_TRAITS_OF)};
#undef GPUOBS_TRAITS_OF
    return mode < sizeof table / sizeof table[0] ? table[mode] : 0;
}
GPUOBS_HD int gpuobs_mode_has(uint32_t mode, uint32_t trait) { return (gpuobs_mode_traits(mode) & trait) != 0; }

GPUOBS_HD uint32_t gpuobs_launch_slot(uint64_t grid_id) { return (uint32_t)grid_id & (GPUOBS_LAUNCH_TABLE_SIZE - 1); }

/* A grid launched by a kernel (dynamic parallelism) rather than by the host:
 * device-side launches get %gridid values with the top bit set (seen on the
 * H200: values near 2^64), host launches and graph nodes count up from 1. */
GPUOBS_HD int gpuobs_grid_from_device(uint64_t grid_id) { return (grid_id >> 63) != 0; }

/* block_trace: the block-table slot of a block. Consecutive blocks of a grid get
 * consecutive slots, so the blocks one grid has in flight never share one; and
 * each of 64 consecutive grid ids (grids that run at once have nearby ids: they
 * count up per context) starts its own range of GPUOBS_BLOCK_TABLE_SIZE / 64, so
 * the blocks of concurrent small grids never share one either. (A hashed start
 * let them: 0-41 of 512,000 block ends lost in an 8-thread launch storm.) */
GPUOBS_HD uint32_t gpuobs_block_table_slot(uint64_t grid_id, uint64_t block) {
    return (uint32_t)(((grid_id & 63) * (GPUOBS_BLOCK_TABLE_SIZE / 64) + block) & (GPUOBS_BLOCK_TABLE_SIZE - 1));
}

/* Where count `stripe` of slot `slot` lives, in uint64 units from the table's start. */
GPUOBS_HD uint32_t gpuobs_launch_counter_index(uint32_t slot, uint32_t stripe) {
    return stripe * GPUOBS_LAUNCH_TABLE_SIZE + slot;
}

#if defined(__cplusplus)
#define GPUOBS_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define GPUOBS_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif
GPUOBS_STATIC_ASSERT(sizeof(gpuobs_event) == GPUOBS_EVENT_SIZE, "an event fills one 64-byte cache line");
GPUOBS_STATIC_ASSERT(sizeof(gpuobs_stripe) == 64, "one stripe per cache line");
GPUOBS_STATIC_ASSERT(sizeof(gpuobs_chunk_header) == 24, "chunk header is 24 bytes");
GPUOBS_STATIC_ASSERT(sizeof(gpuobs_packed_header) == 16, "packed header is 16 bytes");
GPUOBS_STATIC_ASSERT(sizeof(gpuobs_file_header) == 56, "file header is 56 bytes");
GPUOBS_STATIC_ASSERT(sizeof(gpuobs_events_header) == 16, "events header is 16 bytes");
GPUOBS_STATIC_ASSERT(sizeof(gpuobs_launch_counter) == 128, "launch counter is two lines");
GPUOBS_STATIC_ASSERT(sizeof(gpuobs_block_slot) == 16, "block slot is one 16-byte store");
GPUOBS_STATIC_ASSERT(sizeof(gpuobs_warp_arrival) == 32, "a warp arrival is 32 bytes");
GPUOBS_STATIC_ASSERT(sizeof(gpuobs_function_entry) == 64, "a function entry is one 64-byte line");
GPUOBS_STATIC_ASSERT(GPUOBS_FUNCTION_TABLE_SIZE * sizeof(gpuobs_function_entry) <= GPUOBS_ARENA_COUNTERS,
                     "function entries fit before the launch counters");
GPUOBS_STATIC_ASSERT(GPUOBS_ARENA_COUNTERS + GPUOBS_LAUNCH_TABLE_SIZE * sizeof(gpuobs_launch_counter) <=
                         GPUOBS_ARENA_CONTROL,
                     "launch counters fit before the control block");
GPUOBS_STATIC_ASSERT(GPUOBS_ARENA_CONTROL + sizeof(gpuobs_control) <= GPUOBS_ARENA_BLOCK_TABLE,
                     "control block fits before the block table");

#endif /* GPUOBS_SCHEMA_H */
