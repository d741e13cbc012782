; The address of a pointer as an integer, for comparisons only.
;
; Loaded by pyjlad.runtime as pyjlad.portable._ADDRESS_DEFINITION (@pyjlad_address,
; pyjlad.portable.ADDRESS_FUNCTION). It replaces no Numba function but a `ptrtoint` whose value
; reaches nothing but comparisons (see pyjlad.portable._opaque_address_comparisons): the runtime
; overlap checks of LLVM's loop vectorizer, e.g. in the copy loops of np.concatenate, compare
; addresses as integers, and Enzyme's type analysis then sees one value as both a pointer and
; an integer and aborts ("Illegal orIn: {[-1]:Integer} right: {[-1]:Pointer}"). Computed by a
; function Enzyme does not look into (enzyme_ta_norecur) nor differentiate (enzyme_inactive),
; the address is an integer of no known origin; the optimizer after Enzyme inlines it back
; into a `ptrtoint`. A valid LLVM 15 module; tests/test_runtime_ll.py assembles it with
; llvm-as-15.

define internal i64 @pyjlad_address(ptr %p) nounwind readnone willreturn "enzyme_inactive" "enzyme_ta_norecur" {
entry:
  %a = ptrtoint ptr %p to i64
  ret i64 %a
}
