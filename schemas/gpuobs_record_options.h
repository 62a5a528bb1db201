/*
 * gpuobs record options: the one table of what `gpuobs record` and gpuobs.attach()
 * hand the tool, through its environment. A row per option: its name, the variable
 * the tool reads, what values it takes, its default and the help `gpuobs record
 * --help` shows.
 *
 * Read by the tool (tool/config.cpp: every row is read and checked there, the same
 * way for every option of a kind) and by Python (gpuobs/record/options.py: cffi
 * reads the declarations between the cdef markers, the rows are read as text; from
 * them come RecordOptions, the environment, gpuobs.attach()'s keywords and the
 * `record` command's options). tests/test_record_options.py holds the two views equal.
 *
 * A new option: a row here (its fields in the order of gpuobs_record_option below),
 * then its use in the tool (Config::number/text, or a Config member filled in
 * Config::load) and a case in tests/test_cli_walkthrough.py.
 */
#ifndef GPUOBS_RECORD_OPTIONS_H
#define GPUOBS_RECORD_OPTIONS_H

#include <stdint.h>

/* gpuobs:cdef-begin */
enum gpuobs_option_kind {
    GPUOBS_OPTION_WHOLE = 0,  /* a whole number in [lo, hi] */
    GPUOBS_OPTION_SWITCH = 1, /* 0 or 1 (the CLI: a flag) */
    GPUOBS_OPTION_CHOICE = 2, /* one of the words of `choices`; the tool keeps the word's index */
    GPUOBS_OPTION_MODE = 3,   /* one of the schema's mode names (GPUOBS_MODE_NAMES); the tool keeps the mode */
    GPUOBS_OPTION_TEXT = 4,   /* any text, empty too */
    GPUOBS_OPTION_PATH = 5,   /* a file's path, not empty (the CLI passes it made absolute) */
    GPUOBS_OPTION_DUTY = 6    /* "ON/PERIOD", two durations (50ms/5s; ns, us, ms or s, a bare number ns), a
                                 PERIOD in [lo, hi] ns, 0 < ON < PERIOD; "" = off. The tool keeps PERIOD */
};

enum gpuobs_option_flags {
    GPUOBS_OPTION_ZERO_FITS = 1,       /* WHOLE: 0 is taken too, outside [lo, hi]: as much as fits */
    GPUOBS_OPTION_ON_UNLESS_0 = 2,     /* SWITCH: any value but 0 is on (nothing is refused) */
    GPUOBS_OPTION_HELP_HAS_DEFAULT = 4 /* the help says the default itself: the CLI does not repeat it */
};

typedef struct gpuobs_record_option {
    const char* name;     /* RecordOptions' field, gpuobs.attach()'s keyword (the row's first column) */
    const char* env;      /* the variable the tool reads */
    int kind;             /* enum gpuobs_option_kind */
    const char* fallback; /* the default, written as the variable would hold it */
    uint64_t lo;          /* WHOLE: the bounds */
    uint64_t hi;
    uint32_t flags;      /* enum gpuobs_option_flags */
    const char* choices; /* CHOICE: its words, space-separated, in index order */
    const char* aliases; /* CHOICE: "ALIAS=WORD ..." that the tool also reads (the CLI does not) */
    const char* old_env; /* an earlier name of the variable, read when `env` is unset */
    const char* cli;     /* `gpuobs record`'s names for it, space-separated; "" = none */
    const char* metavar; /* the CLI's name for its value */
    const char* unit;    /* said after a value out of bounds in the CLI's error */
    const char* help;    /* the CLI's help; {lo} and {hi} are replaced by the bounds */
} gpuobs_record_option;
/* gpuobs:cdef-end */

/* The rows, in the order `gpuobs record --help` lists them. Fields left out are 0. */
#define GPUOBS_RECORD_OPTIONS(X)                                                                                      \
    X(mode, .env = "GPUOBS_MODE", .kind = GPUOBS_OPTION_MODE, .fallback = "block_trace", .cli = "--mode -m",          \
      .metavar = "MODE", .help = "what to record: one of the modes listed below, cheapest first")                     \
    X(sample_shift, .env = "GPUOBS_SAMPLE_SHIFT", .kind = GPUOBS_OPTION_WHOLE, .fallback = "10", .lo = 0, .hi = 32,   \
      .cli = "--sample-shift", .metavar = "N", .help = "mem_sampled keeps 1 access in 2^N ({lo}..{hi})")              \
    X(capacity, .env = "GPUOBS_CAPACITY", .kind = GPUOBS_OPTION_WHOLE, .fallback = "0", .lo = 1024, .hi = 268435456,  \
      .flags = GPUOBS_OPTION_ZERO_FITS | GPUOBS_OPTION_HELP_HAS_DEFAULT, .cli = "--capacity", .metavar = "N",         \
      .help =                                                                                                         \
          "event records per CUDA context, 64 B each (block_starts: 192 B with its warp arrivals), "                  \
          "at least N kept (each SM's ring a power of two, rounded up: `info` says how many); "                       \
          "0 (the default) = as many as --device-memory holds. "                                                      \
          "The records form a ring that a tool thread drains while kernels run")                                      \
    X(device_memory_mib, .env = "GPUOBS_DEVICE_MEMORY_MIB", .kind = GPUOBS_OPTION_WHOLE, .fallback = "512", .lo = 64, \
      .hi = 1 << 20, .cli = "--device-memory", .metavar = "MIB", .unit = "MiB",                                       \
      .help =                                                                                                         \
          "the tool's device memory per CUDA context, at most (its tables take 20 MiB, the record ring the "          \
          "rest)")                                                                                                    \
    X(kernels, .env = "GPUOBS_KERNELS", .kind = GPUOBS_OPTION_TEXT, .fallback = "", .cli = "--kernels",               \
      .metavar = "REGEX", .help = "keep only events of kernels whose name matches this regex")                        \
    X(output, .env = "GPUOBS_OUTPUT", .kind = GPUOBS_OPTION_PATH, .fallback = "gpuobs.gpuobs", .cli = "-o --output",  \
      .metavar = "FILE", .help = "recording to write")                                                                \
    X(scope, .env = "GPUOBS_CALLBACK_SCOPE", .kind = GPUOBS_OPTION_CHOICE, .fallback = "function",                    \
      .choices = "function launch", .old_env = "GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE", .cli = "--scope",              \
      .metavar = "SCOPE", .help = "callback data scope: function (graph-safe) or launch")                             \
    X(clock_probe, .env = "GPUOBS_CLOCK_PROBE", .kind = GPUOBS_OPTION_SWITCH, .fallback = "1",                        \
      .flags = GPUOBS_OPTION_ON_UNLESS_0, .help = "sample the GPU clock against the host's while recording")          \
    X(api_trace, .env = "GPUOBS_API_TRACE", .kind = GPUOBS_OPTION_SWITCH, .fallback = "0", .cli = "--api-trace",      \
      .help = "also record CUDA driver and runtime API calls (host clock, thread)")                                   \
    X(graph_nodes, .env = "GPUOBS_GRAPH_NODES", .kind = GPUOBS_OPTION_CHOICE, .fallback = "learn",                    \
      .choices = "learn every none", .aliases = "1=every 0=none", .cli = "--graph-nodes", .metavar = "HOW",           \
      .help =                                                                                                         \
          "how CUDA-graph replays' kernels are listed as launches: learn (default: "                                  \
          "each graph's kernel nodes learned from one replay, later replays listed "                                  \
          "from that table at native speed), every (per-node callbacks at every "                                     \
          "replay, which make the driver launch nodes one by one), none (replayed "                                   \
          "blocks recorded but tied to no launch)")                                                                   \
    X(paused, .env = "GPUOBS_START_PAUSED", .kind = GPUOBS_OPTION_SWITCH, .fallback = "0", .cli = "--paused",         \
      .help =                                                                                                         \
          "start with nothing patched: the program records only between its own "                                     \
          "gpuobs.resume() and gpuobs.pause() calls (or `with gpuobs.window():`)")                                    \
    X(window_every, .env = "GPUOBS_WINDOW_EVERY", .kind = GPUOBS_OPTION_WHOLE, .fallback = "0", .lo = 0,              \
      .hi = 1 << 30, .cli = "--window-every", .metavar = "N",                                                         \
      .help =                                                                                                         \
          "record 1 interval in N, an interval ending where the program "                                             \
          "synchronises with nothing left running; the others record nothing, "                                       \
          "their launches only counted")                                                                              \
    X(lossless, .env = "GPUOBS_LOSSLESS", .kind = GPUOBS_OPTION_SWITCH, .fallback = "0", .cli = "--lossless",         \
      .help =                                                                                                         \
          "when the record rings fill, make the program's launching thread wait for room instead of "                 \
          "dropping (counted) what does not fit: nothing is lost, but the program's timing changes")                  \
    X(budget, .env = "GPUOBS_BUDGET_MBPS", .kind = GPUOBS_OPTION_WHOLE, .fallback = "16", .lo = 0, .hi = 1000000,     \
      .cli = "--budget", .metavar = "MB/S", .unit = "MB/s",                                                           \
      .help =                                                                                                         \
          "records a second at most, in MB (a day of 16 MB/s is 1.4 TB), with a burst of a minute's budget "          \
          "(at most the rings' size) recorded whole: above it the tool samples instead of waiting, recording "        \
          "whole stretches of about a second's budget each second and counting every block; 0 = no budget "           \
          "(--lossless has none)")                                                                                    \
    X(pack_metadata, .env = "GPUOBS_PACK_METADATA", .kind = GPUOBS_OPTION_CHOICE, .fallback = "zlib",                 \
      .flags = GPUOBS_OPTION_HELP_HAS_DEFAULT, .choices = "zlib none", .aliases = "1=zlib 0=none",                    \
      .cli = "--pack-metadata", .metavar = "HOW",                                                                     \
      .help =                                                                                                         \
          "how the launch tables written at every flush are stored: zlib (default: rows byte-shuffled and "           \
          "deflated by the system's libz, ~20x smaller for graph replays; stored as they are where libz cannot "      \
          "be loaded) or none")                                                                                       \
    X(duty, .env = "GPUOBS_DUTY", .kind = GPUOBS_OPTION_DUTY, .fallback = "", .lo = 1000000, .hi = 86400000000000ull, \
      .cli = "--duty", .metavar = "ON/PERIOD",                                                                        \
      .help =                                                                                                         \
          "record ON of every PERIOD, e.g. 50ms/5s (PERIOD {lo}..{hi}), on the device's clock: both rounded "         \
          "to powers of two of ns (ON up, PERIOD to the nearer; 50ms/5s is 67.1 ms of every 4.29 s) and kept by "     \
          "the patches with no load, so CUDA graphs and programs that never synchronise follow at about "             \
          "block_noop's cost; outside ON nothing is counted, and launches run wholly there are unrecorded")

/* Each option's index in the table: GPUOBS_OPT_mode, GPUOBS_OPT_sample_shift, ... */
#define GPUOBS_OPTION_INDEX(option, ...) GPUOBS_OPT_##option,
enum gpuobs_option_index { GPUOBS_RECORD_OPTIONS(GPUOBS_OPTION_INDEX) GPUOBS_OPTION_COUNT };
#undef GPUOBS_OPTION_INDEX

/* A row as an initializer of gpuobs_record_option: GPUOBS_RECORD_OPTIONS(GPUOBS_OPTION_ROW). */
#define GPUOBS_OPTION_ROW(option, ...) {.name = #option, __VA_ARGS__},

#endif /* GPUOBS_RECORD_OPTIONS_H */
