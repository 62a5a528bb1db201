"""Short, readable kernel names for tables: the demangled name (recordings carry
it) without its return type and parameter list, namespaces and lambda call
operators inside template arguments dropped, then bracket pairs folded to `...`,
the rightmost innermost first, until it fits. CSV and JSON keep the full name.

    short_name("void at::native::vectorized_elementwise_kernel<8, at::native::AbsFunctor<c10::BFloat16>, "
               "std::array<char*, 2ul> >(int, at::native::AbsFunctor<c10::BFloat16>, std::array<char*, 2ul>)")
    -> 'at::native::vectorized_elementwise_kernel<8, AbsFunctor<BFloat16>, array<char*, 2ul>>'
"""

from __future__ import annotations

import heapq
import re

from ..safe_text import printable

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


def _fold_to(text: str, width: int) -> str:
    """Folds bracket pairs to `...` until `text` fits in `width`: each time the rightmost
    pair that holds no unfolded pair (later template arguments tell kernels apart
    least). One pass over the brackets and a heap of the pairs ready to fold, so a
    name of thousands of characters costs about as much as reading it."""
    opens: list[int] = []
    closes: list[int] = []
    parent: list[int] = []
    stack: list[int] = []
    for i, c in enumerate(text):
        if c in OPEN:
            parent.append(stack[-1] if stack else -1)
            opens.append(i)
            closes.append(-1)
            stack.append(len(opens) - 1)
        elif c in CLOSE and stack:
            closes[stack.pop()] = i
    # An open never closed encloses no closed pair (a close matches the latest open),
    # so it is nobody's pair and nobody's parent.
    pair = [c >= 0 for c in closes]
    parent = [up if up >= 0 and pair[up] else -1 for up in parent]
    folded = [pair[n] and text[opens[n] + 1 : closes[n]] == "..." for n in range(len(opens))]
    children: list[list[int]] = [[] for _ in opens]
    unfolded_children = [0] * len(opens)
    for n, up in enumerate(parent):
        if pair[n] and up >= 0:
            children[up].append(n)
            unfolded_children[up] += not folded[n]
    ready = [-n for n in range(len(opens)) if pair[n] and not folded[n] and unfolded_children[n] == 0]
    heapq.heapify(ready)  # node numbers follow the opens: the largest is the rightmost
    length = len(text)
    while length > width and ready:
        n = -heapq.heappop(ready)
        inside = closes[n] - opens[n] - 1  # less what its children, all folded to `...`, gave up
        inside -= sum(closes[k] - opens[k] - 1 - 3 for k in children[n])
        length += 3 - inside
        folded[n] = True
        up = parent[n]
        if up >= 0:
            unfolded_children[up] -= 1
            if unfolded_children[up] == 0 and not folded[up]:
                heapq.heappush(ready, -up)
    pieces, at = [], 0
    for n in range(len(opens)):  # in text order; a folded pair's inner pairs are skipped with it
        if folded[n] and opens[n] >= at:
            pieces += [text[at : opens[n] + 1], "..."]
            at = closes[n]
    pieces.append(text[at:])
    return "".join(pieces)


def short_name(name: str, width: int = 100) -> str:
    """A readable form of a (demangled) kernel name in at most `width` characters."""
    text = _tidy_arguments(_strip_signature(printable(name)))  # shown: no terminal escapes
    if len(text) > width:
        text = _fold_to(text, width)
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


_LEADING_NAMESPACES = re.compile(r"^(?:[A-Za-z_]\w*::)+(?=[A-Za-z_~])")


def slice_names(names: list[str], width: int = 64) -> list[str]:
    """Names for trace slices, which the UI cuts from the right to their width: the
    short_name without the kernel's own namespaces (`at::native::`: the same on most
    slices, so it would be all a narrow slice shows), made unique as short_names does."""
    bare = [_LEADING_NAMESPACES.sub("", short_name(n, width=1 << 30)) for n in names]
    return short_names([b or n for b, n in zip(bare, names)], width)
