/* A SIGBUS handler for memory maps of input files (mapping_guard.py).

   Reading a page of a MAP_SHARED mapping past the end of a file that was truncated
   after it was mapped raises SIGBUS, and the kernel re-raises it on every retry of
   the access: Python cannot catch it (its handler only sets a flag), so the process
   died (exit 135) with its temp output left behind. Here a fault inside a registered
   mapping replaces the rest of that mapping, from the faulting page on, with
   anonymous zero pages and counts the fault; the access is retried and reads zeros.
   Python then asks gpuobs_guard_faults() before it trusts or writes anything, and
   reports the truncation. A fault anywhere else is passed to the previous handler,
   or ends the process as SIGBUS always did. */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define GUARD_SLOTS 256

struct guarded {
    uintptr_t start; /* 0: a free slot */
    uintptr_t end;
    long faults;
};

static struct guarded slots[GUARD_SLOTS];
static struct sigaction previous;
static uintptr_t page_mask;
static int installed;

static void pass_on(int sig, siginfo_t* info, void* context) {
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction != NULL) {
            previous.sa_sigaction(sig, info, context);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* The default action: retrying the access faults again and ends the process. */
    signal(SIGBUS, SIG_DFL);
}

static void on_sigbus(int sig, siginfo_t* info, void* context) {
    uintptr_t at = (uintptr_t)info->si_addr;
    for (int i = 0; i < GUARD_SLOTS; ++i) {
        uintptr_t start = __atomic_load_n(&slots[i].start, __ATOMIC_ACQUIRE);
        uintptr_t end = __atomic_load_n(&slots[i].end, __ATOMIC_ACQUIRE);
        if (start == 0 || at < start || at >= end) continue;
        uintptr_t from = at & page_mask;
        /* mmap is a plain system call on Linux, safe in a signal handler. */
        void* zeros = mmap((void*)from, end - from, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (zeros != MAP_FAILED) {
            __atomic_add_fetch(&slots[i].faults, 1, __ATOMIC_SEQ_CST);
            return;
        }
        break;
    }
    pass_on(sig, info, context);
}

int gpuobs_guard_install(void) {
    if (installed) return 0;
    page_mask = ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
    struct sigaction action;
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &previous) != 0) return -1;
    installed = 1;
    return 0;
}

/* A slot for [start, start + length), or -1 when every slot is taken. */
int gpuobs_guard_add(uintptr_t start, size_t length) {
    for (int i = 0; i < GUARD_SLOTS; ++i) {
        uintptr_t free_slot = 0;
        if (__atomic_load_n(&slots[i].start, __ATOMIC_ACQUIRE) != 0) continue;
        __atomic_store_n(&slots[i].faults, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&slots[i].end, start + length, __ATOMIC_SEQ_CST);
        if (__atomic_compare_exchange_n(&slots[i].start, &free_slot, start, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return i;
    }
    return -1;
}

void gpuobs_guard_remove(int slot) {
    if (slot >= 0 && slot < GUARD_SLOTS) __atomic_store_n(&slots[slot].start, 0, __ATOMIC_SEQ_CST);
}

long gpuobs_guard_faults(int slot) {
    if (slot < 0 || slot >= GUARD_SLOTS) return 0;
    return __atomic_load_n(&slots[slot].faults, __ATOMIC_SEQ_CST);
}
