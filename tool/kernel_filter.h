// GPUOBS_KERNELS: which kernels' events a flush keeps, by a regular expression on
// their names. The tool runs inside the user's program, so matching must never
// recurse or backtrack: std::regex overflowed a 1 MiB stack on a 5,114-character
// kernel name and took seconds on longer ones. This is a Thompson NFA run as a
// Pike VM: time linear in the name (times the pattern's size), memory fixed by
// the pattern, no recursion at match time.
//
// The pattern language, a subset of ECMAScript regular expressions, matched
// anywhere in the name (as std::regex_search), on bytes, case-sensitively:
//   literals; .  (any byte);  [abc] [a-z] [^...] (ranges, \d \w \s and escapes inside);
//   \d \D \w \W \s \S;  \ before any other punctuation for itself;  ^ and $ (start, end);
//   ( ) and (?: ) groups;  |;  * + ? (also their lazy forms *? +? ??, which match the same names).
// Refused, with what and where: {m,n}, back-references, lookaround, unbalanced ( ) [ ],
// a quantifier with nothing before it, patterns over 4,096 characters or groups nested over 64 deep.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpuobs {

class KernelFilter {
public:
    static constexpr size_t kMaxPatternChars = 4096;
    static constexpr int kMaxDepth = 64;

    // Compiles `pattern`; false with `error` saying what is wrong and at which character (1-based).
    bool compile(const std::string& pattern, std::string* error);
    // True when the pattern matches somewhere in `text`.
    bool matches(const std::string& text) const;
    size_t program_size() const { return program_.size(); }

private:
    enum Op : uint8_t { kByte, kAny, kClass, kSplit, kJump, kLineStart, kLineEnd, kMatch };
    struct Inst {
        Op op;
        uint8_t byte;
        uint32_t x;  // kClass: class index; kSplit, kJump: target
        uint32_t y;  // kSplit: second target
    };
    struct ByteSet {
        uint64_t bits[4] = {0, 0, 0, 0};
        void add(unsigned b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
        bool has(unsigned b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
    };
    friend class KernelFilterParser;
    std::vector<Inst> program_;
    std::vector<ByteSet> classes_;
};

}  // namespace gpuobs
