// A crashing program (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) keeps what it
// synchronised: before the signal takes its course, the handler gives each
// context's drain thread a moment to write the windows already cut. It takes no
// lock and calls no CUDA; then the previous disposition of the signal runs, so
// the exit status is the program's own. (SIGKILL cannot be caught: a window cut
// just before it may be lost.)
#include <signal.h>

#include <atomic>
#include <cstring>

#include "drainer.h"

namespace gpuobs {
namespace {

constexpr int kMaxContexts = 64;
std::atomic<Drainer*> g_drainers[kMaxContexts];
std::atomic<int> g_context_count{0};
constexpr int kSignals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};
struct sigaction g_previous[sizeof kSignals / sizeof kSignals[0]];

void on_crash(int sig) {
    const int n = std::min(g_context_count.load(), kMaxContexts);
    for (int i = 0; i < n; ++i)
        if (Drainer* d = g_drainers[i].load()) d->wait_for_drains(2000);
    for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; ++i)
        if (kSignals[i] == sig) sigaction(sig, &g_previous[i], nullptr);
    raise(sig);
}

}  // namespace

void watch_drains_on_crash(Drainer* drainer) {
    const int i = g_context_count.fetch_add(1);
    if (i < kMaxContexts) g_drainers[i].store(drainer);
}

void install_crash_drain() {
    for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; ++i) {
        struct sigaction sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_crash;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_NODEFER;
        sigaction(kSignals[i], &sa, &g_previous[i]);
    }
}

}  // namespace gpuobs
