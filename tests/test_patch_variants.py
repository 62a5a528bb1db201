"""benchmarks/patch_variants.py: every variant still applies to the shipped
patches (a variant that no longer finds its piece would measure nothing), and
changes only the function it names."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("patch_variants", ROOT / "benchmarks" / "patch_variants.py")
patch_variants = importlib.util.module_from_spec(spec)
spec.loader.exec_module(patch_variants)


@pytest.mark.parametrize("variant", sorted(patch_variants.VARIANTS))
def test_each_variant_changes_only_its_function(variant):
    shipped = patch_variants.SOURCE.read_text()
    changed = patch_variants.make_variant(shipped, variant)
    assert changed != shipped
    # Outside the named functions the text is the shipped text.
    spans = sorted(patch_variants.function_span(shipped, f) for f, _, _ in patch_variants.VARIANTS[variant])
    assert changed.startswith(shipped[: spans[0][0]])
    assert changed.endswith(shipped[spans[-1][1] :])
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert shipped[end:start] in changed


def test_a_variant_whose_piece_is_gone_says_which(tmp_path):
    shipped = patch_variants.SOURCE.read_text()
    broken = shipped.replace("ld.relaxed.gpu.global.v2.u64", "ld.relaxed.sys.global.v2.u64")
    with pytest.raises(SystemExit, match="ld_slot no longer has piece 1 of variant exit_cta_scope"):
        patch_variants.make_variant(broken, "exit_cta_scope")


def test_the_command_writes_the_variant(tmp_path):
    out = tmp_path / "v.cu"
    patch_variants.main(["exit_cta_scope", str(out)])
    assert "ld.relaxed.cta.global.v2.u64" in out.read_text()
