/* The big tables of an Nsight Systems SQLite export read through SQLite's C API into
 * int64 columns (host_traces/nsys_columns.py drives it; nsys.py reads the same rows
 * through Python's sqlite3). SQLite is the system's own, loaded at run time with
 * dlopen, so there is no build dependency on sqlite3.h: the few prototypes used are
 * declared here.
 *
 * Each output column is an integer in [lo, hi] (NULL refused) or a text, interned in
 * first-seen order (-1 for NULL). Anything else
 * (another type, a value out of range, an SQLite error) stops the read with BAIL and
 * nsys.py reads the file in Python, for its words; a query past its time budget stops
 * with INTERRUPTED (a progress handler, as nsys.py sets). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text_pool.h"

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
enum { SQLITE_OK = 0, SQLITE_INTERRUPT = 9, SQLITE_ROW = 100, SQLITE_DONE = 101 };
enum { SQLITE_INTEGER = 1, SQLITE_NULL = 5 };
enum { SQLITE_OPEN_READONLY = 0x1, SQLITE_OPEN_URI = 0x40 };

enum { READ_DONE = 0, READ_FULL = 1, READ_BAIL = 2, READ_INTERRUPTED = 3 };
enum { COLUMN_INT = 0, COLUMN_TEXT = 1 };
enum { MAX_COLUMNS = 32, PROGRESS_STEPS = 1000 };

typedef struct {
    int (*open_v2)(const char*, sqlite3**, int, const char*);
    int (*close)(sqlite3*);
    int (*prepare_v2)(sqlite3*, const char*, int, sqlite3_stmt**, const char**);
    int (*step)(sqlite3_stmt*);
    int (*finalize)(sqlite3_stmt*);
    int (*column_type)(sqlite3_stmt*, int);
    int64_t (*column_int64)(sqlite3_stmt*, int);
    const unsigned char* (*column_text)(sqlite3_stmt*, int);
    int (*column_bytes)(sqlite3_stmt*, int);
    void (*progress_handler)(sqlite3*, int, int (*)(void*), void*);
    const char* (*errmsg)(sqlite3*);
} sqlite_api;

typedef struct {
    void* handle;
    sqlite_api api;
    sqlite3* db;
    sqlite3_stmt* stmt;
    double deadline; /* CLOCK_MONOTONIC seconds */
    int n_columns;
    int32_t kind[MAX_COLUMNS];
    int64_t lo[MAX_COLUMNS], hi[MAX_COLUMNS];
    text_pool texts; /* the TEXT columns' values, interned */
} reader;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int past_deadline(void* arg) { return now() > ((reader*)arg)->deadline; }

static int bind(reader* r) {
    void* h = r->handle;
#define SYM(field, name) \
    if (!(*(void**)& r->api.field = dlsym(h, name))) return 0;
    SYM(open_v2, "sqlite3_open_v2")
    SYM(close, "sqlite3_close")
    SYM(prepare_v2, "sqlite3_prepare_v2")
    SYM(step, "sqlite3_step")
    SYM(finalize, "sqlite3_finalize")
    SYM(column_type, "sqlite3_column_type")
    SYM(column_int64, "sqlite3_column_int64")
    SYM(column_text, "sqlite3_column_text")
    SYM(column_bytes, "sqlite3_column_bytes")
    SYM(progress_handler, "sqlite3_progress_handler")
    SYM(errmsg, "sqlite3_errmsg")
#undef SYM
    return 1;
}

void nsys_close(reader* r) {
    if (!r) return;
    if (r->stmt) r->api.finalize(r->stmt);
    if (r->db) r->api.close(r->db);
    if (r->handle) dlclose(r->handle);
    text_pool_free(&r->texts);
    free(r);
}

/* `uri` opened read-only with SQLite from `library`; NULL where either fails. A query
 * stops once `seconds` have passed from now. */
reader* nsys_open(const char* library, const char* uri, double seconds) {
    reader* r = calloc(1, sizeof(reader));
    if (!r) return NULL;
    r->handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!r->handle || !bind(r) ||
        r->api.open_v2(uri, &r->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) != SQLITE_OK) {
        nsys_close(r);
        return NULL;
    }
    r->deadline = now() + seconds;
    r->api.progress_handler(r->db, PROGRESS_STEPS, past_deadline, r);
    return r;
}

/* The query whose rows nsys_read hands out, column i as kind[i] says. 0 on an error. */
int nsys_prepare(reader* r, const char* sql, int n_columns, const int32_t* kind, const int64_t* lo, const int64_t* hi) {
    if (r->stmt) r->api.finalize(r->stmt);
    r->stmt = NULL;
    if (n_columns < 1 || n_columns > MAX_COLUMNS) return 0;
    if (r->api.prepare_v2(r->db, sql, -1, &r->stmt, NULL) != SQLITE_OK || !r->stmt) return 0;
    r->n_columns = n_columns;
    memcpy(r->kind, kind, n_columns * sizeof(int32_t));
    memcpy(r->lo, lo, n_columns * sizeof(int64_t));
    memcpy(r->hi, hi, n_columns * sizeof(int64_t));
    return 1;
}

/* Up to max_rows rows into out (column i at out[i * max_rows ...]); *n_rows of them.
 * READ_FULL: call again for more; READ_DONE: the query is finished. */
int nsys_read(reader* r, int64_t* out, int64_t max_rows, int64_t* n_rows) {
    *n_rows = 0;
    if (!r->stmt) return READ_BAIL;
    for (int64_t row = 0; row < max_rows; row++) {
        int rc = r->api.step(r->stmt);
        if (rc == SQLITE_DONE) return READ_DONE;
        if (rc == SQLITE_INTERRUPT) return READ_INTERRUPTED;
        if (rc != SQLITE_ROW) return READ_BAIL;
        for (int i = 0; i < r->n_columns; i++) {
            int type = r->api.column_type(r->stmt, i);
            int64_t value;
            if (r->kind[i] == COLUMN_TEXT) {
                if (type == SQLITE_NULL) {
                    value = -1;
                } else {
                    const char* text = (const char*)r->api.column_text(r->stmt, i);
                    int64_t size = r->api.column_bytes(r->stmt, i);
                    if (!text && size) return READ_BAIL;
                    value = text_pool_intern(&r->texts, text ? text : "", size, INT64_MAX);
                    if (value < 0) return READ_BAIL;
                }
            } else if (type == SQLITE_INTEGER) {
                value = r->api.column_int64(r->stmt, i);
                if (value < r->lo[i] || value > r->hi[i]) return READ_BAIL;
            } else {
                return READ_BAIL;
            }
            out[i * max_rows + row] = value;
        }
        *n_rows = row + 1;
    }
    return READ_FULL;
}

int64_t nsys_text_count(reader* r) { return r->texts.count; }
const char* nsys_text_pool(reader* r) { return r->texts.data; }
const int64_t* nsys_text_offsets(reader* r) { return r->texts.offsets; }
const char* nsys_error(reader* r) { return r->api.errmsg(r->db); }
