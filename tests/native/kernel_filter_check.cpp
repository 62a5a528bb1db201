// Drives tool/kernel_filter.cpp for tests/test_kernel_filter.py: each stdin line is
// "PATTERN_HEX<TAB>TEXT_HEX"; each stdout line is "1" (matches), "0" (does not) or
// "E <error>" (the pattern is refused), then the microseconds the match took.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "kernel_filter.h"

static std::string unhex(const std::string& h) {
    std::string out;
    for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back((char)std::stoi(h.substr(i, 2), nullptr, 16));
    return out;
}

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        const size_t tab = line.find('\t');
        const std::string pattern = unhex(line.substr(0, tab)), text = unhex(line.substr(tab + 1));
        gpuobs::KernelFilter filter;
        std::string error;
        if (!filter.compile(pattern, &error)) {
            std::printf("E %s\n", error.c_str());
            continue;
        }
        const auto began = std::chrono::steady_clock::now();
        const bool hit = filter.matches(text);
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - began);
        std::printf("%d %lld\n", hit ? 1 : 0, (long long)us.count());
    }
    return 0;
}
