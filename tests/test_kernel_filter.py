"""The tool's GPUOBS_KERNELS matcher (tool/kernel_filter.cpp), compiled with the host
compiler and driven through tests/native/kernel_filter_check.cpp: the same
answers as Python's re.search on the pattern language it accepts (hypothesis),
clear errors for what it refuses, and no recursion or backtracking on the
longest real kernel names (std::regex overflowed its stack on the shipped
sample's 5,114-character name) or on 100,000-character ones."""

import binascii
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuobs

from .native_helpers import compile_check

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parent / "examples" / "data"


@pytest.fixture(scope="module")
def checker(tmp_path_factory):
    exe = compile_check(
        tmp_path_factory.mktemp("bin") / "kernel_filter_check", "kernel_filter_check.cpp", "kernel_filter.cpp"
    )

    def run(cases):
        """[(pattern, text)] -> [True | False | "error text"], one process for all."""
        lines = "".join(
            f"{binascii.hexlify(p.encode('latin-1')).decode()}\t{binascii.hexlify(t.encode('latin-1')).decode()}\n"
            for p, t in cases
        )
        proc = subprocess.run([str(exe)], input=lines, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr  # a stack overflow would end it with SIGSEGV
        out = []
        for line in proc.stdout.splitlines():
            out.append(line[2:] if line.startswith("E ") else line.split()[0] == "1")
        assert len(out) == len(cases)
        return out

    return run


MATCHES = [
    ("silu", "void silu_and_mul<c10::BFloat16>", True),
    ("^silu", "void silu_and_mul", False),
    ("^void", "void silu_and_mul", True),
    ("mul$", "silu_and_mul", True),
    ("mul$", "silu_and_mul<float>", False),
    ("a.c", "xxabcxx", True),
    ("a.c", "ac", False),
    ("[0-9]+x[0-9]+", "nvjet_256x128", True),
    ("[^a-z]", "abc", False),
    ("gemm|gemv", "cublas_gemv_kernel", True),
    ("(gemm|gemv)_kernel", "gemv_kernel", True),
    ("(?:ab)+c", "abababc", True),
    ("colou?r", "color", True),
    ("a*?b", "aaab", True),
    ("\\(anonymous namespace\\)::", "at::native::(anonymous namespace)::k", True),
    ("\\{lambda\\(\\)#1\\}", "f()::{lambda()#1}::operator()", True),
    ("\\d+\\s\\w", "12 a", True),
    ("[\\d_]+$", "k_12_3", True),
    ("", "anything", True),
    ("x|", "y", True),
    ("\\x41", "A", True),
]

ERRORS = [
    ("((", "unbalanced '(': no ')' closes it at character 2"),
    ("a)", "unbalanced ')' at character 2: no '(' opens it"),
    ("[abc", "unbalanced '[': no ']' closes it at character 1"),
    ("*a", "'*' has nothing to repeat at character 1"),
    ("a**", "'*' repeats a repetition at character 3"),
    ("a{2}", "counted repetition {m,n} is not supported (write \\{ for a brace) at character 2"),
    ("(a)\\1", "back-references (\\1 ...) are not supported at character 4"),
    ("(?=a)", "'(?' other than '(?:' (lookaround, named groups) is not supported at character 2"),
    ("\\bword", "word boundaries (\\b, \\B) are not supported at character 1"),
    ("[z-a]", "range out of order ('z' > 'a') at character 3"),
    ("[]", "a class cannot start with ']' (write \\] for the character) at character 2"),
    ("a\\", "'\\' ends the pattern: nothing to escape at character 2"),
    ("\\q", "unknown escape '\\q' at character 1"),
    ("(" * 65 + ")" * 65, "groups nested more than 64 deep at character 65"),
    ("a" * 4097, "the pattern has 4097 characters, over the 4096 allowed"),
]


def test_matches_and_refusals(checker):
    got = checker([(p, t) for p, t, _ in MATCHES] + [(p, "x") for p, _ in ERRORS])
    assert got[: len(MATCHES)] == [want for _, _, want in MATCHES]
    assert got[len(MATCHES) :] == [message for _, message in ERRORS]


def longest_real_names():
    names = set()
    for sample in SAMPLES.glob("*.gpuobs"):
        for f in gpuobs.load(sample).functions.values():
            names |= {f.mangled, f.demangled}
    return sorted(names, key=len)[-3:]


# Patterns that send a backtracking matcher (std::regex, Python's re) into deep
# recursion or exponential time, each with what it means, said without backtracking.
HEAVY = {
    ".*": lambda t: True,
    "(.*)*x": lambda t: "x" in t,
    "(a|aa)*b": lambda t: "b" in t,
    "(.*a)" * 20 + "x": lambda t: "ax" in t and t[: t.rindex("ax")].count("a") >= 19,  # 20 a's, the last before x
    "^(\\w+\\s?)*$": lambda t: re.fullmatch(r"(?:\w+\s)*\w*", t, re.ASCII) is not None,
    "[^z]*z": lambda t: "z" in t,
    "(x+x+)+y": lambda t: "xxy" in t,
    "void.*silu.*\\(": lambda t: re.search(r"void.*silu.*\(", t) is not None,
}


def test_the_longest_real_kernel_names_and_100k_character_ones(checker):
    """No recursion and no backtracking, in one process that would die of a stack
    overflow (std::regex did on the shipped sample's 5,114-character name)."""
    real = longest_real_names()
    assert len(real[-1]) >= 5000
    made = [
        "a" * 100_000,
        "x" * 99_999 + "y",
        ("ab " * 33_334)[:100_000],
        "void " + "t" * 99_990 + "silu(",
        ("a" * 30 + "x") * 3000,
    ]
    cases = [(p, t) for p in HEAVY for t in real + made]
    got = checker(cases)
    for (p, t), answer in zip(cases, got):
        assert answer == HEAVY[p](t), (p, len(t))


# Patterns in the language both accept with the same meaning (no {}, no \b, ASCII).
ATOMS = st.sampled_from(
    ["a", "b", "c", "_", ".", "\\d", "\\w", "\\s", "[ab]", "[^a]", "[a-c_]", "\\.", "\\(", "[\\d.]", "x", "1"]
)


def patterns():
    def extend(inner):
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map("|".join),
            inner.map(lambda p: f"({p})"),
            inner.map(lambda p: f"(?:{p})"),
            st.tuples(inner.map(lambda p: f"({p})"), st.sampled_from(["*", "+", "?", "*?", "+?", "??"])).map("".join),
        )

    body = st.recursive(ATOMS, extend, max_leaves=12)
    return st.tuples(st.sampled_from(["", "^"]), body, st.sampled_from(["", "$"])).map("".join)


TEXTS = st.text(alphabet="abcx_1 .(", max_size=40)


@settings(max_examples=300, deadline=None)
@given(cases=st.lists(st.tuples(patterns(), TEXTS), min_size=1, max_size=40))
def test_same_answers_as_python_re(checker, cases):
    got = checker(cases)
    for (p, t), answer in zip(cases, got):
        assert answer == bool(re.search(p.encode(), t.encode())), (p, t, answer)
