/* The big tables of an Nsight Systems SQLite export read through SQLite's C API into
 * int64 columns (host_traces/nsys_columns.py drives it; nsys.py reads the same rows
 * through Python's sqlite3). SQLite is the system's own, loaded at run time with
 * dlopen, so there is no build dependency on sqlite3.h: the few prototypes used are
 * declared here.
 *
 * A read is a set of jobs, one query each (a table), run by up to `threads` threads
 * (one read-only connection each, used by that thread alone) until every job is done
 * or one stops. Each column of a query is checked as it is read: an integer in
 * [lo, hi] (or NULL where allowed, stored as its null_value), or a text, interned in
 * first-seen order (-1 for NULL); a row's end may not come before its start. A job
 * may also intern keys of its rows (a value and its NULL flag, or a pair of values)
 * and store each row's key's number, in first-seen order, so that Python maps keys
 * to names and tracks once per key, not per row. NVTX mode reads NVTX_EVENTS as
 * nsys.py does: columns eventType and globalTid (checked in every row) pick the rows
 * read (a range or a mark, with a thread), whose other columns are then checked and
 * whose end is their start for a mark or a range never closed.
 *
 * Anything else (another type, a value out of range, an SQLite error, no memory)
 * stops the read with BAIL and nsys.py reads the file in Python, for its words; a
 * query past its time budget stops with INTERRUPTED (a progress handler, as nsys.py
 * sets). The first job to stop sets the outcome and stops the others.
 *
 * A kept column either stays in C (int64, read back by fill_rows and fill_events) or
 * is written as it is read straight into the caller's rows (nsys_sink: numpy rows
 * sized beforehand; a row past their end stops the read). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text_pool.h"

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
typedef struct sqlite3_value sqlite3_value;
enum { SQLITE_OK = 0, SQLITE_INTERRUPT = 9, SQLITE_ROW = 100, SQLITE_DONE = 101 };
enum { SQLITE_INTEGER = 1, SQLITE_NULL = 5 };
enum { SQLITE_OPEN_READONLY = 0x1, SQLITE_OPEN_URI = 0x40, SQLITE_OPEN_NOMUTEX = 0x8000 };

enum { READ_DONE = 0, READ_BAIL = 2, READ_INTERRUPTED = 3, READ_STOPPED = 4, READ_NONE = -1 };
enum { COLUMN_INT = 0, COLUMN_TEXT = 1 };
enum { MODE_ROWS = 0, MODE_NVTX = 1 };
enum { MAX_COLUMNS = 32, MAX_KEYS = 2, MAX_JOBS = 8, MAX_THREADS = 8, PROGRESS_STEPS = 1000 };
enum { NVTX_MARK = 34, NVTX_PUSH_POP = 59, NVTX_START_END = 60 };
enum { COLUMN_SPEC = 6, JOB_SPEC = 4, KEY_SPEC = 3, MAX_SINKS = 24 };
#define FIRST_ROWS 65536

typedef struct {
    int (*open_v2)(const char*, sqlite3**, int, const char*);
    int (*close)(sqlite3*);
    int (*prepare_v2)(sqlite3*, const char*, int, sqlite3_stmt**, const char**);
    int (*step)(sqlite3_stmt*);
    int (*finalize)(sqlite3_stmt*);
    int (*column_count)(sqlite3_stmt*);
    sqlite3_value* (*column_value)(sqlite3_stmt*, int);
    int (*value_type)(sqlite3_value*);
    int64_t (*value_int64)(sqlite3_value*);
    const unsigned char* (*value_text)(sqlite3_value*);
    int (*value_bytes)(sqlite3_value*);
    void (*progress_handler)(sqlite3*, int, int (*)(void*), void*);
    int (*threadsafe)(void);
} sqlite_api;

/* Keys (a, b) numbered in first-seen order. While every key so far came in rising
 * order (a, then b: a table's rowids, or ids given out in order) they are kept sorted
 * in `keys` alone, a new greater key appended and an earlier one found by binary
 * search; the hash table is built at the first new key out of order, or once the
 * binary searches outnumber the keys (a table repeating old keys often). */
typedef struct {
    int64_t* keys; /* 2 per key */
    int64_t count, cap;
    int64_t* slots; /* key number + 1, 0 empty; NULL while the keys are sorted */
    int64_t mask;
    int64_t searches;             /* binary searches made while sorted */
    int64_t last_a, last_b, last; /* the previous row's key: rows often repeat it */
} key_set;

static uint64_t mix(int64_t a, int64_t b) {
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ull ^ ((uint64_t)b + 0x632BE59BD9B4E019ull);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

static int key_rehash(key_set* k, int64_t slots) {
    int64_t* table = calloc((size_t)slots, sizeof(int64_t));
    if (!table) return 0;
    for (int64_t id = 0; id < k->count; id++) {
        uint64_t at = mix(k->keys[2 * id], k->keys[2 * id + 1]) & (uint64_t)(slots - 1);
        while (table[at]) at = (at + 1) & (uint64_t)(slots - 1);
        table[at] = id + 1;
    }
    free(k->slots);
    k->slots = table;
    k->mask = slots - 1;
    return 1;
}

/* Whether key (a, b) comes before (c, d). */
static int key_less(int64_t a, int64_t b, int64_t c, int64_t d) { return a < c || (a == c && b < d); }

/* The keys leave sorted order: the hash table of them all, big enough for one more. */
static int key_hash_all(key_set* k) {
    int64_t slots = 1024;
    while (slots < (k->count + 1) * 2) slots *= 2;
    return key_rehash(k, slots);
}

/* The number of key (a, b), a new one when it is new; -1 when memory ran out. */
static int64_t key_intern(key_set* k, int64_t a, int64_t b) {
    if (k->count && a == k->last_a && b == k->last_b) return k->last;
    if (!k->slots) { /* sorted: a greater key is new, another one is found by binary search or not there */
        int64_t id = -1;
        if (k->count && !key_less(k->keys[2 * k->count - 2], k->keys[2 * k->count - 1], a, b)) {
            int64_t lo = 0, hi = k->count; /* the first key not less than (a, b) */
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                if (key_less(k->keys[2 * mid], k->keys[2 * mid + 1], a, b))
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (k->keys[2 * lo] == a && k->keys[2 * lo + 1] == b) id = lo;
            if (id < 0 || ++k->searches > k->count) {
                if (!key_hash_all(k)) return -1;
                if (id < 0) goto hashed; /* new and out of order: from here on by hash */
            }
        } else {
            if (!grow((void**)&k->keys, &k->cap, 2 * (k->count + 1), sizeof(int64_t))) return -1;
            id = k->count++;
            k->keys[2 * id] = a;
            k->keys[2 * id + 1] = b;
        }
        k->last_a = a, k->last_b = b, k->last = id;
        return id;
    }
hashed:
    if ((k->count + 1) * 2 > k->mask + 1 && !key_rehash(k, k->mask ? (k->mask + 1) * 2 : 1024)) return -1;
    uint64_t at = mix(a, b) & (uint64_t)k->mask;
    int64_t id = -1;
    for (; k->slots[at]; at = (at + 1) & (uint64_t)k->mask) {
        int64_t seen = k->slots[at] - 1;
        if (k->keys[2 * seen] == a && k->keys[2 * seen + 1] == b) {
            id = seen;
            break;
        }
    }
    if (id < 0) {
        if (!grow((void**)&k->keys, &k->cap, 2 * (k->count + 1), sizeof(int64_t))) return -1;
        id = k->count++;
        k->keys[2 * id] = a;
        k->keys[2 * id + 1] = b;
        k->slots[at] = id + 1;
    }
    k->last_a = a, k->last_b = b, k->last = id;
    return id;
}

struct reader;

/* Where an output column goes instead of a C column: row r's value (less output
 * `minus`'s where that is >= 0) at base + r * stride, `width` bytes (8, or 4 where
 * it fits an int32), for at most `cap` rows (more stops the read). */
typedef struct {
    char* base;
    int64_t stride, cap;
    int32_t out, minus, width;
} sink;

typedef struct {
    struct reader* r;
    char* sql;
    int n_columns, n_out, mode, start_col, end_col, n_keys;
    int32_t kind[MAX_COLUMNS], nullable[MAX_COLUMNS], out[MAX_COLUMNS];
    int64_t lo[MAX_COLUMNS], hi[MAX_COLUMNS], null_value[MAX_COLUMNS];
    int32_t key_a[MAX_KEYS], key_b[MAX_KEYS], key_out[MAX_KEYS];
    int n_sinks;
    sink sinks[MAX_SINKS];
    uint8_t sunk[MAX_COLUMNS]; /* an output written to sinks alone: no C column */
    /* results */
    int64_t rows, cap;
    int64_t* columns[MAX_COLUMNS];
    int64_t min[MAX_COLUMNS], max[MAX_COLUMNS]; /* of the integers read in each column */
    key_set keys[MAX_KEYS];
    text_pool texts;
    int timed_out;
} job;

typedef struct reader {
    void* handle;
    sqlite_api api;
    char* uri;
    double deadline; /* CLOCK_MONOTONIC seconds */
    int n_jobs;
    job jobs[MAX_JOBS];
    int next_job; /* the next job a thread takes (atomic) */
    int stop;     /* set once a job stopped (atomic) */
    int outcome;  /* the first stop's status, READ_NONE until one (atomic) */
} reader;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int past_deadline(void* arg) {
    job* j = arg;
    if (now() > j->r->deadline) {
        j->timed_out = 1;
        return 1;
    }
    return __atomic_load_n(&j->r->stop, __ATOMIC_RELAXED);
}

static int bind(reader* r) {
    void* h = r->handle;
#define SYM(field, name) \
    if (!(*(void**)& r->api.field = dlsym(h, name))) return 0;
    SYM(open_v2, "sqlite3_open_v2")
    SYM(close, "sqlite3_close")
    SYM(prepare_v2, "sqlite3_prepare_v2")
    SYM(step, "sqlite3_step")
    SYM(finalize, "sqlite3_finalize")
    SYM(column_count, "sqlite3_column_count")
    SYM(column_value, "sqlite3_column_value")
    SYM(value_type, "sqlite3_value_type")
    SYM(value_int64, "sqlite3_value_int64")
    SYM(value_text, "sqlite3_value_text")
    SYM(value_bytes, "sqlite3_value_bytes")
    SYM(progress_handler, "sqlite3_progress_handler")
    SYM(threadsafe, "sqlite3_threadsafe")
#undef SYM
    return 1;
}

/* Lets go of what a job read (its bounds stay). */
static void job_release(job* j) {
    for (int o = 0; o < MAX_COLUMNS; o++) {
        free(j->columns[o]);
        j->columns[o] = NULL;
    }
    j->rows = j->cap = 0;
    for (int k = 0; k < MAX_KEYS; k++) {
        free(j->keys[k].keys);
        free(j->keys[k].slots);
        memset(&j->keys[k], 0, sizeof(key_set));
    }
    text_pool_free(&j->texts);
    memset(&j->texts, 0, sizeof(text_pool));
}

static void job_free(job* j) {
    free(j->sql);
    job_release(j);
}

void nsys_close(reader* r) {
    if (!r) return;
    for (int i = 0; i < r->n_jobs; i++) job_free(&r->jobs[i]);
    if (r->handle) dlclose(r->handle);
    free(r->uri);
    free(r);
}

/* `uri` opened read-only with SQLite from `library` (to see that it opens); NULL where
 * either fails. A query stops once `seconds` have passed from now. */
reader* nsys_open(const char* library, const char* uri, double seconds) {
    reader* r = calloc(1, sizeof(reader));
    if (!r) return NULL;
    r->handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    r->uri = strdup(uri);
    sqlite3* db = NULL;
    if (!r->handle || !r->uri || !bind(r) ||
        r->api.open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) != SQLITE_OK) {
        if (db) r->api.close(db);
        nsys_close(r);
        return NULL;
    }
    r->api.close(db);
    r->deadline = now() + seconds;
    r->outcome = READ_NONE;
    return r;
}

/* A job: `sql`'s columns as `columns` says (COLUMN_SPEC values each: kind, nullable,
 * lo, hi, output column or -1 (checked only), the value stored for NULL), `spec`
 * (mode, start column, end column (-1: none), the number of key sets) and `keys`
 * (KEY_SPEC values each: column a, column b or -1 for a's NULL flag, output column).
 * Its index, or -1 where it is not taken. */
int nsys_add(reader* r, const char* sql, int n_columns, const int64_t* columns, const int64_t* spec,
             const int64_t* keys) {
    if (r->n_jobs >= MAX_JOBS || n_columns < 1 || n_columns > MAX_COLUMNS) return -1;
    job* j = &r->jobs[r->n_jobs];
    memset(j, 0, sizeof(job));
    j->r = r;
    j->n_columns = n_columns;
    j->mode = (int)spec[0];
    j->start_col = (int)spec[1];
    j->end_col = (int)spec[2];
    j->n_keys = (int)spec[3];
    if (j->n_keys < 0 || j->n_keys > MAX_KEYS || j->start_col >= n_columns || j->end_col >= n_columns ||
        (j->mode == MODE_NVTX && (n_columns < 4 || j->start_col != 2 || j->end_col != 3)))
        return -1;
    int used[MAX_COLUMNS] = {0};
    for (int i = 0; i < n_columns; i++) {
        const int64_t* c = columns + i * COLUMN_SPEC;
        j->kind[i] = (int32_t)c[0];
        j->nullable[i] = (int32_t)c[1];
        j->lo[i] = c[2];
        j->hi[i] = c[3];
        j->out[i] = (int32_t)c[4];
        j->null_value[i] = c[5];
        j->min[i] = INT64_MAX;
        j->max[i] = INT64_MIN;
    }
    for (int k = 0; k < j->n_keys; k++) {
        j->key_a[k] = (int32_t)keys[k * KEY_SPEC];
        j->key_b[k] = (int32_t)keys[k * KEY_SPEC + 1];
        j->key_out[k] = (int32_t)keys[k * KEY_SPEC + 2];
        if (j->key_a[k] < 0 || j->key_a[k] >= n_columns || j->key_b[k] >= n_columns) return -1;
    }
    /* the outputs are 0 .. n_out - 1, each written once */
    for (int i = 0; i < n_columns + j->n_keys; i++) {
        int o = i < n_columns ? j->out[i] : j->key_out[i - n_columns];
        if (o < 0) continue;
        if (o >= MAX_COLUMNS || used[o]) return -1;
        used[o] = 1;
        if (o + 1 > j->n_out) j->n_out = o + 1;
    }
    for (int o = 0; o < j->n_out; o++)
        if (!used[o]) return -1;
    j->sql = strdup(sql);
    if (!j->sql) return -1;
    return r->n_jobs++;
}

/* Column i of the current row into v[i] (null[i]: it was NULL), checked; 0 where it fails.
 * The cell is read through its sqlite3_value, one column_value call a cell rather than
 * a column_type and a column_int64 or column_text (each entering the statement's API
 * again): the value is "unprotected" (SQLite's word), which matters only where another
 * thread may use the connection at the same time, and none does here (one thread a
 * connection, SQLITE_OPEN_NOMUTEX). */
static int read_column(job* j, sqlite3_stmt* s, int i, int64_t* v, uint8_t* null) {
    const sqlite_api* api = &j->r->api;
    sqlite3_value* cell = api->column_value(s, i);
    if (!cell) return 0;
    int type = api->value_type(cell);
    null[i] = type == SQLITE_NULL;
    if (j->kind[i] == COLUMN_TEXT) {
        if (type == SQLITE_NULL) {
            v[i] = -1;
            return 1;
        }
        const char* text = (const char*)api->value_text(cell);
        int64_t size = api->value_bytes(cell);
        if (!text && size) return 0;
        v[i] = text_pool_intern(&j->texts, text ? text : "", size, INT64_MAX);
        return v[i] >= 0;
    }
    if (type == SQLITE_NULL) {
        v[i] = j->null_value[i];
        return j->nullable[i];
    }
    if (type != SQLITE_INTEGER) return 0;
    int64_t x = api->value_int64(cell);
    if (x < j->lo[i] || x > j->hi[i]) return 0;
    if (x < j->min[i]) j->min[i] = x;
    if (x > j->max[i]) j->max[i] = x;
    v[i] = x;
    return 1;
}

static int store_row(job* j, const int64_t* v, const uint8_t* null) {
    int64_t out[MAX_COLUMNS];
    for (int k = 0; k < j->n_keys; k++) {
        int a = j->key_a[k], b = j->key_b[k];
        int64_t id = key_intern(&j->keys[k], v[a], b >= 0 ? v[b] : null[a]);
        if (id < 0) return 0;
        out[j->key_out[k]] = id;
    }
    for (int i = 0; i < j->n_columns; i++)
        if (j->out[i] >= 0) out[j->out[i]] = v[i];
    for (int k = 0; k < j->n_sinks; k++) {
        const sink* d = &j->sinks[k];
        if (j->rows >= d->cap) return 0;
        /* wrapping, not overflowing: the checks above bound what a sink is given */
        int64_t x = (int64_t)((uint64_t)out[d->out] - (d->minus >= 0 ? (uint64_t)out[d->minus] : 0));
        char* at = d->base + j->rows * d->stride;
        if (d->width == 8) {
            memcpy(at, &x, sizeof x);
        } else {
            if (x < INT32_MIN || x > INT32_MAX) return 0;
            int32_t y = (int32_t)x;
            memcpy(at, &y, sizeof y);
        }
    }
    if (j->rows == j->cap) {
        int64_t cap = j->cap ? j->cap * 2 : FIRST_ROWS;
        for (int o = 0; o < j->n_out; o++) {
            if (j->sunk[o]) continue;
            int64_t* p = realloc(j->columns[o], (size_t)cap * sizeof(int64_t));
            if (!p) return 0;
            j->columns[o] = p;
        }
        j->cap = cap;
    }
    for (int o = 0; o < j->n_out; o++)
        if (!j->sunk[o]) j->columns[o][j->rows] = out[o];
    j->rows++;
    return 1;
}

/* One row: 0 where it fails a check (or memory ran out). */
static int read_row(job* j, sqlite3_stmt* s) {
    int64_t v[MAX_COLUMNS];
    uint8_t null[MAX_COLUMNS];
    int first = 0;
    if (j->mode == MODE_NVTX) {
        if (!read_column(j, s, 0, v, null) || !read_column(j, s, 1, v, null)) return 0;
        int64_t type = v[0];
        if (null[0] || null[1] || (type != NVTX_MARK && type != NVTX_PUSH_POP && type != NVTX_START_END))
            return 1; /* not a range or a mark on a thread: not read */
        first = 2;
    }
    for (int i = first; i < j->n_columns; i++)
        if (!read_column(j, s, i, v, null)) return 0;
    int a = j->start_col, b = j->end_col;
    if (a >= 0 && b >= 0 && !null[a] && !null[b] && v[b] < v[a]) return 0;
    if (j->mode == MODE_NVTX && (null[3] || v[0] == NVTX_MARK)) v[3] = v[2];
    return store_row(j, v, null);
}

static int run_job(job* j) {
    reader* r = j->r;
    sqlite3* db = NULL;
    sqlite3_stmt* s = NULL;
    int status = READ_BAIL;
    if (past_deadline(j)) /* a budget spent before the first step (tables too small to call the handler) */
        return j->timed_out ? READ_INTERRUPTED : READ_STOPPED;
    if (r->api.open_v2(r->uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
        goto done;
    r->api.progress_handler(db, PROGRESS_STEPS, past_deadline, j);
    if (r->api.prepare_v2(db, j->sql, -1, &s, NULL) != SQLITE_OK || !s) {
        status = j->timed_out ? READ_INTERRUPTED : READ_BAIL;
        goto done;
    }
    if (r->api.column_count(s) != j->n_columns) goto done;
    for (;;) {
        int rc = r->api.step(s);
        if (rc == SQLITE_DONE) {
            status = READ_DONE;
            break;
        }
        if (rc == SQLITE_INTERRUPT) {
            status = j->timed_out ? READ_INTERRUPTED : READ_STOPPED;
            break;
        }
        if (rc != SQLITE_ROW || !read_row(j, s)) break;
        if ((j->rows & 4095) == 0 && __atomic_load_n(&r->stop, __ATOMIC_RELAXED)) {
            status = READ_STOPPED;
            break;
        }
    }
done:
    if (s) r->api.finalize(s);
    if (db) r->api.close(db);
    return status;
}

static void* worker(void* arg) {
    reader* r = arg;
    for (;;) {
        int i = __atomic_fetch_add(&r->next_job, 1, __ATOMIC_RELAXED);
        if (i >= r->n_jobs || __atomic_load_n(&r->stop, __ATOMIC_RELAXED)) return NULL;
        int status = run_job(&r->jobs[i]);
        if (status == READ_BAIL || status == READ_INTERRUPTED) {
            int none = READ_NONE;
            __atomic_compare_exchange_n(&r->outcome, &none, status, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
            __atomic_store_n(&r->stop, 1, __ATOMIC_SEQ_CST);
        }
    }
}

/* Job i's output `out` (less output `minus` where that is >= 0) written to row r at
 * base + r * stride as `width` (8 or 4) bytes, for at most `cap` rows, and no longer
 * kept in a C column (fill_rows and fill_events refuse it). Before nsys_run; 0 where
 * it is not taken. */
int nsys_sink(reader* r, int i, char* base, int64_t stride, int64_t cap, int out, int minus, int width) {
    if (i < 0 || i >= r->n_jobs) return 0;
    job* j = &r->jobs[i];
    if (j->n_sinks >= MAX_SINKS || (!base && cap) || stride < width || cap < 0 || out < 0 || out >= j->n_out ||
        minus >= j->n_out || (width != 8 && width != 4) || j->rows)
        return 0;
    j->sinks[j->n_sinks++] = (sink){base, stride, cap, out, minus, width};
    j->sunk[out] = 1;
    return 1;
}

/* Runs the jobs on up to `threads` threads (this one among them; one where this
 * SQLite is not built for threads): READ_DONE, or the first stop's READ_BAIL or
 * READ_INTERRUPTED. */
int nsys_run(reader* r, int threads) {
    if (threads > r->n_jobs) threads = r->n_jobs;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads < 1 || !r->api.threadsafe()) threads = 1;
    pthread_t others[MAX_THREADS];
    int started = 0;
    for (; started < threads - 1; started++)
        if (pthread_create(&others[started], NULL, worker, r) != 0) break;
    worker(r);
    for (int i = 0; i < started; i++) pthread_join(others[i], NULL);
    int outcome = __atomic_load_n(&r->outcome, __ATOMIC_SEQ_CST);
    return outcome == READ_NONE ? READ_DONE : outcome;
}

int64_t nsys_rows(reader* r, int i) { return r->jobs[i].rows; }

static void put64(char* at, int64_t v) { memcpy(at, &v, sizeof v); }
static void put32(char* at, int32_t v) { memcpy(at, &v, sizeof v); }

/* Job i's rows as events, row r at dest + r * itemsize: at offsets[0..4] start and
 * duration (int64), track, name and category (int32), from its columns cols[0..4]
 * (start, end, name key, track key, text or -1): the name key's code in names[], or
 * the text's in texts[] where the row has a text; the track key's in tracks[]. 0
 * where a column or a code is out of range. */
int nsys_fill_events(reader* r, int i, char* dest, int64_t itemsize, const int64_t* offsets, const int64_t* cols,
                     const int32_t* names, int64_t n_names, const int32_t* tracks, int64_t n_tracks,
                     const int32_t* texts, int64_t n_texts, int32_t category) {
    job* j = &r->jobs[i];
    for (int c = 0; c < 5; c++)
        if (cols[c] >= j->n_out || (cols[c] < 0 && c != 4) || (j->rows && cols[c] >= 0 && !j->columns[cols[c]]))
            return 0;
    const int64_t *start = j->columns[cols[0]], *end = j->columns[cols[1]];
    const int64_t *name = j->columns[cols[2]], *track = j->columns[cols[3]];
    const int64_t* text = cols[4] >= 0 ? j->columns[cols[4]] : NULL;
    for (int64_t row = 0; row < j->rows; row++) {
        char* at = dest + row * itemsize;
        int64_t n = name[row], t = track[row], x = text ? text[row] : -1;
        if (n < 0 || n >= n_names || t < 0 || t >= n_tracks || x >= n_texts) return 0;
        put64(at + offsets[0], start[row]);
        put64(at + offsets[1], end[row] - start[row]);
        put32(at + offsets[2], tracks[t]);
        put32(at + offsets[3], x >= 0 ? texts[x] : names[n]);
        put32(at + offsets[4], category);
    }
    return 1;
}

/* The rows a job sank, renumbered in place once every job is read: in n rows of
 * itemsize bytes from dest, the int32 fields at offsets[0..2] (track, name, category):
 * the track key's code tracks[track], the name key's names[name] or, where texts_base
 * >= 0 and the category field holds a text (>= 0, NVTX's own), texts_base + that text,
 * and category. One pass, where numpy made three per field. 0 where a code is out of
 * range (the rows then partly renumbered: the caller reads the file again). */
int nsys_remap(char* dest, int64_t itemsize, int64_t n, const int64_t* offsets, const int32_t* names, int64_t n_names,
               const int32_t* tracks, int64_t n_tracks, int64_t texts_base, int32_t category) {
    for (int64_t row = 0; row < n; row++) {
        char* at = dest + row * itemsize;
        int32_t t, x, c;
        memcpy(&t, at + offsets[0], sizeof t);
        memcpy(&x, at + offsets[1], sizeof x);
        memcpy(&c, at + offsets[2], sizeof c);
        if (t < 0 || t >= n_tracks) return 0;
        if (texts_base >= 0 && c >= 0) {
            if (texts_base + c > INT32_MAX) return 0;
            put32(at + offsets[1], (int32_t)(texts_base + c));
        } else {
            if (x < 0 || x >= n_names) return 0;
            put32(at + offsets[1], names[x]);
        }
        put32(at + offsets[0], tracks[t]);
        put32(at + offsets[2], category);
    }
    return 1;
}

/* Job i's columns cols[0..n) into int64 fields of rows, row r at dest + r * itemsize,
 * field f at offsets[f], less column minus[f] where that is >= 0. 0 where a column is
 * out of range. */
int nsys_fill_rows(reader* r, int i, char* dest, int64_t itemsize, int n, const int64_t* offsets, const int64_t* cols,
                   const int64_t* minus) {
    job* j = &r->jobs[i];
    for (int f = 0; f < n; f++) {
        if (cols[f] < 0 || cols[f] >= j->n_out || minus[f] >= j->n_out) return 0;
        if (j->rows && (!j->columns[cols[f]] || (minus[f] >= 0 && !j->columns[minus[f]]))) return 0;
    }
    for (int f = 0; f < n; f++) {
        const int64_t *v = j->columns[cols[f]], *less = minus[f] >= 0 ? j->columns[minus[f]] : NULL;
        char* at = dest + offsets[f];
        for (int64_t row = 0; row < j->rows; row++, at += itemsize) put64(at, less ? v[row] - less[row] : v[row]);
    }
    return 1;
}

/* Lets go of job i's columns, keys and texts (its bounds stay). */
void nsys_release(reader* r, int i) { job_release(&r->jobs[i]); }

/* The least and the greatest integer read in each column of job i (INT64_MAX and
 * INT64_MIN where none was). */
void nsys_bounds(reader* r, int i, int64_t* min, int64_t* max) {
    job* j = &r->jobs[i];
    memcpy(min, j->min, j->n_columns * sizeof(int64_t));
    memcpy(max, j->max, j->n_columns * sizeof(int64_t));
}

int64_t nsys_key_count(reader* r, int i, int k) { return r->jobs[i].keys[k].count; }
const int64_t* nsys_keys(reader* r, int i, int k) { return r->jobs[i].keys[k].keys; }
int64_t nsys_text_count(reader* r, int i) { return r->jobs[i].texts.count; }
const char* nsys_text_pool(reader* r, int i) { return r->jobs[i].texts.data; }
const int64_t* nsys_text_offsets(reader* r, int i) { return r->jobs[i].texts.offsets; }
