"""benchmarks/trampolines.py reads nvdisasm's text of a patched-code dump: the
jumps out of a function, and what each trampoline and helper does. The SASS
below is from a dump on the H200 (PyTorch's silu kernel under block_trace_noop)."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FUNCTION = """
        /*0d80*/                   STG.E.128 desc[UR4][R8.64], R4 ;
        /*0d90*/                   JMP 0x7efda37b0a00 ;
        /*0da0*/                   BSSY B0, 0x2300 ;
        /*2360*/                   ISETP.GE.AND P0, PT, R0, R3, PT ;
        /*2370*/                   JMP 0x7efda37b0c10 ;
        /*23b0*/                   CALL.REL.NOINC 0x23d0 ;
        /*23c0*/                   JMP 0x7efda37b0e40 ;
        /*23d0*/                   BRA 0x23d0;
"""

TRAMPOLINE = """
        /*7efda37b0c10*/                   NOP;
        /*7efda37b0c20*/                   STL.128 [0xfffe00], R0 ;
        /*7efda37b0c30*/                   STL.128 [0xfffe10], R4 ;
        /*7efda37b0c80*/                   P2R R0, PR, RZ, 0xff ;
        /*7efda37b0c90*/                   STL [0xfffe58], R0 ;
        /*7efda37b0cb0*/                   CALL.ABS.NOINC 0x7efda37a0310 ;
        /*7efda37b0d50*/                   CALL.ABS.NOINC 0x7efda37a7b00 ;
        /*7efda37b0d70*/                   WARPSYNC.ALL ;
        /*7efda37b0d90*/                   CALL.ABS.NOINC 0x7efda37a0490 ;
        /*7efda37b0da0*/                   LDL R0, [0xfffe58] ;
        /*7efda37b0dc0*/                   LDL.128 R0, [0xfffe00] ;
        /*7efda37b0e20*/               @P0 EXIT ;
        /*7efda37b0e30*/                   JMP 0x7efda37af080 ;
        /*7efda37b0e40*/                   NOP;
"""

HELPER = """
        /*7efda37a0490*/                   ISETP.EQ.AND P0, PT, R4, 0x1, PT ;
        /*7efda37a04a0*/                   LDL.128 R0, [0xfffe60] ;
        /*7efda37a0580*/               @P0 EXIT ;
        /*7efda37a0590*/                   LDL.128 R4, [0xfffe80] ;
        /*7efda37a0620*/                   RET.ABS.NODEC R8 0x20 ;
        /*7efda37a0630*/                   BRA 0x7efda37a0630;
"""


def _trampolines():
    spec = importlib.util.spec_from_file_location("trampolines", ROOT / "benchmarks" / "trampolines.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks itself up there
    spec.loader.exec_module(mod)
    return mod


def test_jumps_out_of_a_patched_function():
    t = _trampolines()
    assert t.jumps_out(FUNCTION) == [0x7EFDA37B0A00, 0x7EFDA37B0C10, 0x7EFDA37B0E40]


def test_a_trampoline_runs_to_its_jump_back_past_a_predicated_exit():
    t = _trampolines()
    b = t.walk(TRAMPOLINE, stop_at_ret=False)
    assert (b.instructions, b.local_stores, b.local_loads, b.warp_syncs) == (13, 3, 2, 1)
    assert b.calls == [0x7EFDA37A0310, 0x7EFDA37A7B00, 0x7EFDA37A0490]


def test_a_helper_runs_to_its_return():
    t = _trampolines()
    b = t.walk(HELPER, stop_at_ret=True)
    assert (b.instructions, b.local_loads, b.calls) == (5, 2, [])
