#include "kernel_filter.h"

#include <cstdio>

namespace gpuobs {

namespace {

// A parsed pattern, as a tree in a vector (children by index).
struct Node {
    enum Kind { kEmpty, kByte, kAny, kClass, kLineStart, kLineEnd, kConcat, kAlt, kStar, kPlus, kQuest } kind;
    uint32_t value;                  // kByte: the byte; kClass: class index
    std::vector<uint32_t> children;  // kConcat, kAlt: the parts; kStar, kPlus, kQuest: one

    explicit Node(Kind k, uint32_t v = 0) : kind(k), value(v) {}
};

bool is_digit(unsigned c) { return c >= '0' && c <= '9'; }
bool is_word(unsigned c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_space(unsigned c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

// Recursive descent over the pattern; recursion is bounded by the group depth (kMaxDepth).
class KernelFilterParser {
public:
    KernelFilterParser(const std::string& p, KernelFilter* out) : p_(p), out_(out) {}

    bool parse(std::string* error) {
        uint32_t root = 0;
        if (!alternation(0, &root)) {
            *error = error_;
            return false;
        }
        if (pos_ < p_.size()) {  // only an unmatched ')' stops the top level early
            *error = "unbalanced ')' at character " + std::to_string(pos_ + 1) + ": no '(' opens it";
            return false;
        }
        emit(root);
        out_->program_.push_back({KernelFilter::kMatch, 0, 0, 0});
        return true;
    }

private:
    bool fail(size_t at, const std::string& what) {
        error_ = what + " at character " + std::to_string(at + 1);
        return false;
    }

    uint32_t add(Node n) {
        nodes_.push_back(std::move(n));
        return (uint32_t)nodes_.size() - 1;
    }

    uint32_t add_class(const KernelFilter::ByteSet& set) {
        out_->classes_.push_back(set);
        return add(Node(Node::kClass, (uint32_t)out_->classes_.size() - 1));
    }

    bool alternation(int depth, uint32_t* out) {
        Node alt(Node::kAlt);
        uint32_t part = 0;
        if (!concatenation(depth, &part)) return false;
        alt.children.push_back(part);
        while (pos_ < p_.size() && p_[pos_] == '|') {
            ++pos_;
            if (!concatenation(depth, &part)) return false;
            alt.children.push_back(part);
        }
        *out = alt.children.size() == 1 ? alt.children[0] : add(alt);
        return true;
    }

    bool concatenation(int depth, uint32_t* out) {
        Node cat(Node::kConcat);
        while (pos_ < p_.size() && p_[pos_] != '|' && p_[pos_] != ')') {
            uint32_t atom_node = 0;
            if (!repeat(depth, &atom_node)) return false;
            cat.children.push_back(atom_node);
        }
        *out = cat.children.empty() ? add(Node(Node::kEmpty)) : cat.children.size() == 1 ? cat.children[0] : add(cat);
        return true;
    }

    bool repeat(int depth, uint32_t* out) {
        size_t atom_at = pos_;
        uint32_t node = 0;
        if (!atom(depth, &node)) return false;
        if (pos_ < p_.size() && (p_[pos_] == '*' || p_[pos_] == '+' || p_[pos_] == '?')) {
            const Node::Kind kind = p_[pos_] == '*' ? Node::kStar : p_[pos_] == '+' ? Node::kPlus : Node::kQuest;
            if (nodes_[node].kind == Node::kLineStart || nodes_[node].kind == Node::kLineEnd)
                return fail(pos_, std::string("'") + p_[pos_] + "' after an anchor ('" + p_[atom_at] +
                                      "') has nothing to repeat");
            ++pos_;
            if (pos_ < p_.size() && p_[pos_] == '?') ++pos_;  // lazy: matches the same names
            if (pos_ < p_.size() && (p_[pos_] == '*' || p_[pos_] == '+' || p_[pos_] == '?'))
                return fail(pos_, std::string("'") + p_[pos_] + "' repeats a repetition");
            Node q(kind);
            q.children.push_back(node);
            node = add(q);
        }
        if (pos_ < p_.size() && p_[pos_] == '{')
            return fail(pos_, "counted repetition {m,n} is not supported (write \\{ for a brace)");
        *out = node;
        return true;
    }

    bool atom(int depth, uint32_t* out) {
        const size_t at = pos_;
        const unsigned char c = (unsigned char)p_[pos_++];
        switch (c) {
            case '(': {
                if (depth + 1 > KernelFilter::kMaxDepth)
                    return fail(at, "groups nested more than " + std::to_string(KernelFilter::kMaxDepth) + " deep");
                if (p_.compare(pos_, 2, "?:") == 0) {
                    pos_ += 2;
                } else if (pos_ < p_.size() && p_[pos_] == '?') {
                    return fail(pos_, "'(?' other than '(?:' (lookaround, named groups) is not supported");
                }
                if (!alternation(depth + 1, out)) return false;
                if (pos_ >= p_.size()) return fail(at, "unbalanced '(': no ')' closes it");
                ++pos_;  // ')'
                return true;
            }
            case '[': return bracket(at, out);
            case '.': *out = add(Node(Node::kAny)); return true;
            case '^': *out = add(Node(Node::kLineStart)); return true;
            case '$': *out = add(Node(Node::kLineEnd)); return true;
            case '*':
            case '+':
            case '?': return fail(at, std::string("'") + (char)c + "' has nothing to repeat");
            case '{': return fail(at, "counted repetition {m,n} is not supported (write \\{ for a brace)");
            case '\\': {
                KernelFilter::ByteSet set;
                int byte = -1;
                if (!escape(at, &set, &byte)) return false;
                if (byte >= 0) {
                    *out = add(Node(Node::kByte, (uint32_t)byte));
                } else {
                    *out = add_class(set);
                }
                return true;
            }
            default: {
                *out = add(Node(Node::kByte, c));
                return true;
            }
        }
    }

    // After a backslash at `at`: a single byte (`byte` >= 0) or a class (`set`).
    bool escape(size_t at, KernelFilter::ByteSet* set, int* byte) {
        if (pos_ >= p_.size()) return fail(at, "'\\' ends the pattern: nothing to escape");
        const unsigned char e = (unsigned char)p_[pos_++];
        bool (*test)(unsigned) = nullptr;
        switch (e) {
            case 'd':
            case 'D': test = is_digit; break;
            case 'w':
            case 'W': test = is_word; break;
            case 's':
            case 'S': test = is_space; break;
            case 'n': *byte = '\n'; return true;
            case 't': *byte = '\t'; return true;
            case 'r': *byte = '\r'; return true;
            case 'f': *byte = '\f'; return true;
            case 'v': *byte = '\v'; return true;
            case 'x': {
                auto hex = [](char h) {
                    return is_digit((unsigned char)h)           ? h - '0'
                           : (h | 32) >= 'a' && (h | 32) <= 'f' ? (h | 32) - 'a' + 10
                                                                : -1;
                };
                if (pos_ + 2 > p_.size() || hex(p_[pos_]) < 0 || hex(p_[pos_ + 1]) < 0)
                    return fail(at, "'\\x' needs two hex digits");
                *byte = hex(p_[pos_]) * 16 + hex(p_[pos_ + 1]);
                pos_ += 2;
                return true;
            }
            default:
                if (is_word(e)) {
                    std::string what = is_digit(e)            ? "back-references (\\1 ...) are not supported"
                                       : e == 'b' || e == 'B' ? "word boundaries (\\b, \\B) are not supported"
                                                              : std::string("unknown escape '\\") + (char)e + "'";
                    return fail(at, what);
                }
                *byte = e;  // punctuation and other bytes stand for themselves
                return true;
        }
        const bool negate = e == 'D' || e == 'W' || e == 'S';
        for (unsigned b = 0; b < 256; ++b)
            if (test(b) != negate) set->add(b);
        return true;
    }

    bool bracket(size_t at, uint32_t* out) {
        KernelFilter::ByteSet set;
        bool negate = false;
        if (pos_ < p_.size() && p_[pos_] == '^') {
            negate = true;
            ++pos_;
        }
        if (pos_ < p_.size() && p_[pos_] == ']')
            return fail(pos_, "a class cannot start with ']' (write \\] for the character)");
        while (true) {
            if (pos_ >= p_.size()) return fail(at, "unbalanced '[': no ']' closes it");
            if (p_[pos_] == ']') {
                ++pos_;
                break;
            }
            int lo = -1;
            if (!class_member(&set, &lo)) return false;
            if (lo >= 0 && pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
                const size_t range_at = pos_;
                ++pos_;
                KernelFilter::ByteSet unused;
                int hi = -1;
                if (!class_member(&unused, &hi)) return false;
                if (hi < 0) return fail(range_at, "a range cannot end in a class (\\d, \\w, \\s)");
                if (hi < lo)
                    return fail(range_at, "range out of order ('" + std::string(1, (char)lo) + "' > '" +
                                              std::string(1, (char)hi) + "')");
                for (int b = lo; b <= hi; ++b) set.add((unsigned)b);
            } else if (lo >= 0) {
                set.add((unsigned)lo);
            }
        }
        if (negate)
            for (int w = 0; w < 4; ++w) set.bits[w] = ~set.bits[w];
        *out = add_class(set);
        return true;
    }

    // One member of a class: a byte (returned in `byte`) or an escaped class (added to `set`).
    bool class_member(KernelFilter::ByteSet* set, int* byte) {
        const size_t at = pos_;
        const unsigned char c = (unsigned char)p_[pos_++];
        if (c != '\\') {
            *byte = c;
            return true;
        }
        return escape(at, set, byte);
    }

    // Thompson construction; recursion is bounded by the tree's depth (groups and quantifiers).
    void emit(uint32_t index) {
        auto& prog = out_->program_;
        const Node& n = nodes_[index];
        auto here = [&] { return (uint32_t)prog.size(); };
        switch (n.kind) {
            case Node::kEmpty: return;
            case Node::kByte: prog.push_back({KernelFilter::kByte, (uint8_t)n.value, 0, 0}); return;
            case Node::kAny: prog.push_back({KernelFilter::kAny, 0, 0, 0}); return;
            case Node::kClass: prog.push_back({KernelFilter::kClass, 0, n.value, 0}); return;
            case Node::kLineStart: prog.push_back({KernelFilter::kLineStart, 0, 0, 0}); return;
            case Node::kLineEnd: prog.push_back({KernelFilter::kLineEnd, 0, 0, 0}); return;
            case Node::kConcat:
                for (uint32_t child : n.children) emit(child);
                return;
            case Node::kAlt: {
                std::vector<uint32_t> jumps;
                for (size_t i = 0; i < n.children.size(); ++i) {
                    const bool last = i + 1 == n.children.size();
                    uint32_t split = 0;
                    if (!last) {
                        split = here();
                        prog.push_back({KernelFilter::kSplit, 0, split + 1, 0});
                    }
                    emit(n.children[i]);
                    if (!last) {
                        jumps.push_back(here());
                        prog.push_back({KernelFilter::kJump, 0, 0, 0});
                        prog[split].y = here();
                    }
                }
                for (uint32_t j : jumps) prog[j].x = here();
                return;
            }
            case Node::kStar: {
                const uint32_t split = here();
                prog.push_back({KernelFilter::kSplit, 0, split + 1, 0});
                emit(n.children[0]);
                prog.push_back({KernelFilter::kJump, 0, split, 0});
                prog[split].y = here();
                return;
            }
            case Node::kPlus: {
                const uint32_t body = here();
                emit(n.children[0]);
                prog.push_back({KernelFilter::kSplit, 0, body, here() + 1});
                return;
            }
            case Node::kQuest: {
                const uint32_t split = here();
                prog.push_back({KernelFilter::kSplit, 0, split + 1, 0});
                emit(n.children[0]);
                prog[split].y = here();
                return;
            }
        }
    }

    const std::string& p_;
    KernelFilter* out_;
    size_t pos_ = 0;
    std::vector<Node> nodes_;
    std::string error_;
};

bool KernelFilter::compile(const std::string& pattern, std::string* error) {
    program_.clear();
    classes_.clear();
    if (pattern.size() > kMaxPatternChars) {
        *error = "the pattern has " + std::to_string(pattern.size()) + " characters, over the " +
                 std::to_string(kMaxPatternChars) + " allowed";
        return false;
    }
    KernelFilterParser parser(pattern, this);
    if (!parser.parse(error)) {
        program_.clear();
        classes_.clear();
        return false;
    }
    return true;
}

// The Pike VM: the set of program positions alive after each byte, each position
// at most once per step, so time is O(text * program) and memory O(program).
bool KernelFilter::matches(const std::string& text) const {
    if (program_.empty()) return false;
    const size_t m = program_.size(), n = text.size();
    std::vector<uint32_t> current, next, stack;
    current.reserve(m);
    next.reserve(m);
    stack.reserve(2 * m + 1);
    std::vector<uint64_t> seen(m, 0);  // the step that last added each position
    uint64_t step = 0;
    // Adds `pc` and every position it reaches without reading a byte; true on a match.
    auto add = [&](std::vector<uint32_t>& list, uint32_t pc, size_t pos) {
        stack.push_back(pc);
        while (!stack.empty()) {
            const uint32_t p = stack.back();
            stack.pop_back();
            if (seen[p] == step) continue;
            seen[p] = step;
            const Inst& in = program_[p];
            switch (in.op) {
                case kJump: stack.push_back(in.x); break;
                case kSplit:
                    stack.push_back(in.y);
                    stack.push_back(in.x);
                    break;
                case kLineStart:
                    if (pos == 0) stack.push_back(p + 1);
                    break;
                case kLineEnd:
                    if (pos == n) stack.push_back(p + 1);
                    break;
                case kMatch: stack.clear(); return true;
                default: list.push_back(p);
            }
        }
        return false;
    };
    ++step;
    if (add(current, 0, 0)) return true;
    for (size_t pos = 0; pos < n; ++pos) {
        const unsigned char c = (unsigned char)text[pos];
        ++step;
        next.clear();
        for (uint32_t p : current) {
            const Inst& in = program_[p];
            const bool ok =
                in.op == kAny || (in.op == kByte && in.byte == c) || (in.op == kClass && classes_[in.x].has(c));
            if (ok && add(next, p + 1, pos + 1)) return true;
        }
        if (add(next, 0, pos + 1)) return true;  // a match may start at any position
        current.swap(next);
    }
    return false;
}

}  // namespace gpuobs
