"""Short, readable kernel names for tables: the demangled name (recordings carry
it) without its return type and parameter list, namespaces and lambda call
operators inside template arguments dropped, then bracket pairs folded to `...`,
the rightmost innermost first, until it fits. CSV and JSON keep the full name.

    short_name("void at::native::vectorized_elementwise_kernel<8, at::native::AbsFunctor<c10::BFloat16>, "
               "std::array<char*, 2ul> >(int, at::native::AbsFunctor<c10::BFloat16>, std::array<char*, 2ul>)")
    -> 'at::native::vectorized_elementwise_kernel<8, AbsFunctor<BFloat16>, array<char*, 2ul>>'
"""

from __future__ import annotations

import re

OPEN, CLOSE = "<({", ">)}"
# Noise inside template arguments: lambdas' call operators and anonymous namespaces.
_NOISE = re.compile(r"::operator\(\)\(\)(?: const)?|\(anonymous namespace\)::")
_QUALIFIER = re.compile(r"\b(?:[A-Za-z_]\w*::)+(?=[A-Za-z_~{])")
_LAMBDAS = re.compile(r"(?:::\{lambda\([^{}]*\)#\d+\})+")


def _matching_open(text: str, close_at: int) -> int:
    """Index of the bracket that opens the one closing at `close_at` (-1 if unbalanced)."""
    depth = 0
    for i in range(close_at, -1, -1):
        c = text[i]
        if c in CLOSE:
            depth += 1
        elif c in OPEN:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _strip_signature(name: str) -> str:
    """`void ns::kernel<T>(int, T)` -> `ns::kernel<T>`: no return type, no parameters."""
    name = name.strip()
    if name.endswith(" const"):
        name = name[: -len(" const")]
    if name.endswith(")"):
        start = _matching_open(name, len(name) - 1)
        if start > 0:
            name = name[:start]
    # a return type is whatever precedes the last space outside brackets
    depth, cut = 0, -1
    for i, c in enumerate(name):
        if c in OPEN:
            depth += 1
        elif c in CLOSE:
            depth -= 1
        elif c == " " and depth == 0:
            cut = i
    return name[cut + 1 :] if cut >= 0 else name


def _tidy_arguments(name: str) -> str:
    """Inside brackets: no namespace qualifiers, no lambda call operators, `> >` as `>>`."""
    head = name.find("<")
    if head < 0:
        return name.replace("(anonymous namespace)::", "")
    base = name[:head].replace("(anonymous namespace)::", "")
    args = _LAMBDAS.sub("::lambda", _QUALIFIER.sub("", _NOISE.sub("", name[head:])))
    return base + _drop_lambda_parameters(args).replace("> >", ">>").replace("> >", ">>")


def _drop_lambda_parameters(text: str) -> str:
    """`silu_kernel(TensorIteratorBase&)::lambda` -> `silu_kernel::lambda`: the enclosing
    function's name says which lambda it is."""
    at = text.find(")::lambda")
    while at >= 0:
        start = _matching_open(text, at)
        if start < 0:
            break
        text = text[:start] + text[at + 1 :]
        at = text.find(")::lambda", start)
    return text


def _groups(text: str) -> list[tuple[int, int, int]]:
    """(depth, open index, close index) of every bracket pair."""
    found, stack = [], []
    for i, c in enumerate(text):
        if c in OPEN:
            stack.append(i)
        elif c in CLOSE and stack:
            start = stack.pop()
            found.append((len(stack) + 1, start, i))
    return found


def _fold_one(text: str) -> str | None:
    """Folds one bracket pair to `...`: the rightmost that holds no unfolded pair (later
    template arguments tell kernels apart least). None when nothing is left to fold."""
    groups = [g for g in _groups(text) if text[g[1] + 1 : g[2]] != "..."]
    leaves = [g for g in groups if not any(o[1] > g[1] and o[2] < g[2] for o in groups)]
    if not leaves:
        return None
    _, start, end = max(leaves, key=lambda g: g[1])
    return text[: start + 1] + "..." + text[end:]


def short_name(name: str, width: int = 100) -> str:
    """A readable form of a (demangled) kernel name in at most `width` characters."""
    text = _tidy_arguments(_strip_signature(name))
    while len(text) > width:
        folded = _fold_one(text)
        if folded is None:
            break
        text = folded
    return text if len(text) <= width else text[: width - 3] + "..."


def short_names(names: list[str], width: int = 100) -> list[str]:
    """short_name of each, made unique again: different kernels that fold to the same
    text get ` [1]`, ` [2]`... (in the order they come)."""
    shorts = [short_name(n, width) for n in names]
    fulls_of: dict = {}
    for full, short in zip(names, shorts):
        fulls = fulls_of.setdefault(short, [])
        if full not in fulls:
            fulls.append(full)
    return [
        short if len(fulls_of[short]) == 1 else f"{short} [{fulls_of[short].index(full) + 1}]"
        for full, short in zip(names, shorts)
    ]
