// GPUOBS_DUMP_PATCHED_CODE: a debugging aid, no part of a recording.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "launch_log.h"
#include "sanitizer_api.h"

namespace gpuobs {

// A debugging aid for patch work: the function's machine code as it runs now
// (patched), to disassemble with `nvdisasm -b SM90 FILE`.
void dump_patched_code(const std::string& dir, CUmodule module, const std::string& name, uint32_t device_index,
                       uint32_t slot, Sanitizer_StreamHandle stream) {
    uint64_t pc = 0, size = 0;
    if (sanitizer().function_pc_and_size(module, name.c_str(), &pc, &size) != SANITIZER_SUCCESS || size == 0 ||
        size > (64u << 20))
        return;
    std::vector<char> code(size);
    if (sanitizer().memcpy_dtoh(code.data(), reinterpret_cast<void*>(pc), size, stream) != SANITIZER_SUCCESS) return;
    std::ofstream out(dir + "/" + std::to_string(device_index) + "-" + std::to_string(slot) + ".bin", std::ios::binary);
    out.write(code.data(), (std::streamsize)code.size());
    std::ofstream names(dir + "/functions.txt", std::ios::app);
    names << device_index << "-" << slot << " " << name << "\n";
    // Where the sanitizer's trampolines are: the 64 KB around each absolute JMP
    // target (sm_90 JMP: opcode bytes 4a 79, the target from bit 24), read now,
    // for this function: modules loaded later add trampolines to the same pages.
    std::unordered_set<uint64_t> dumped;
    for (size_t at = 0; at + 16 <= code.size(); at += 16) {
        const auto* ins = reinterpret_cast<const uint8_t*>(code.data() + at);
        if (ins[0] != 0x4a || ins[1] != 0x79) continue;
        uint64_t target = 0;
        for (int k = 8; k >= 3; --k) target = (target << 8) | ins[k];
        uint64_t base = target & ~0xffffull;
        if (target < pc + size && target >= pc) continue;
        if (!dumped.insert(base).second) continue;
        std::vector<char> region(0x10000);
        if (sanitizer().memcpy_dtoh(region.data(), reinterpret_cast<void*>(base), region.size(), stream) !=
            SANITIZER_SUCCESS)
            continue;
        char hex[32];
        std::snprintf(hex, sizeof hex, "%llx", (unsigned long long)base);
        std::ofstream r(
            dir + "/" + std::to_string(device_index) + "-" + std::to_string(slot) + ".region-" + hex + ".bin",
            std::ios::binary);
        r.write(region.data(), (std::streamsize)region.size());
    }
}

}  // namespace gpuobs
