; cblas_dlascl / cblas_slascl: LAPACK's dlascl/slascl with a CBLAS-style layout argument.
;
; Enzyme's BLAS rules emit calls to cblas_?lascl (scaling a matrix by cto/cfrom) in derivatives
; of matrix products, but no CBLAS library exports it. pyjlad.engines.blas compiles this module
; in-process with llvmlite and points @pyjlad_lapack_?lascl_ at SciPy's bundled OpenBLAS
; (scipy_?lascl_, Fortran calling convention: every argument by reference, then the hidden
; length of the character argument `type`). A row-major layout (101) swaps the row and column
; counts; a null `info` gets a local slot. A valid LLVM 15 module (opaque pointers);
; tests/test_runtime_ll.py assembles it with llvm-as-15. The two kinds differ only in the
; element type: keep them in step.

define void @cblas_dlascl(i32 %layout, i8 %type, i32 %kl, i32 %ku, double %cfrom, double %cto, i32 %m, i32 %n, ptr %a, i32 %lda, ptr %info) {
entry:
  %type.a = alloca i8
  %kl.a = alloca i32
  %ku.a = alloca i32
  %cfrom.a = alloca double
  %cto.a = alloca double
  %m.a = alloca i32
  %n.a = alloca i32
  %lda.a = alloca i32
  %info.local = alloca i32
  store i8 %type, ptr %type.a
  store i32 %kl, ptr %kl.a
  store i32 %ku, ptr %ku.a
  store double %cfrom, ptr %cfrom.a
  store double %cto, ptr %cto.a
  %rowmajor = icmp eq i32 %layout, 101
  %rows = select i1 %rowmajor, i32 %n, i32 %m
  %cols = select i1 %rowmajor, i32 %m, i32 %n
  store i32 %rows, ptr %m.a
  store i32 %cols, ptr %n.a
  store i32 %lda, ptr %lda.a
  %noinfo = icmp eq ptr %info, null
  %infop = select i1 %noinfo, ptr %info.local, ptr %info
  call void @pyjlad_lapack_dlascl_(ptr %type.a, ptr %kl.a, ptr %ku.a, ptr %cfrom.a, ptr %cto.a,
                                   ptr %m.a, ptr %n.a, ptr %a, ptr %lda.a, ptr %infop, i64 1)
  ret void
}
declare void @pyjlad_lapack_dlascl_(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i64)

define void @cblas_slascl(i32 %layout, i8 %type, i32 %kl, i32 %ku, float %cfrom, float %cto, i32 %m, i32 %n, ptr %a, i32 %lda, ptr %info) {
entry:
  %type.a = alloca i8
  %kl.a = alloca i32
  %ku.a = alloca i32
  %cfrom.a = alloca float
  %cto.a = alloca float
  %m.a = alloca i32
  %n.a = alloca i32
  %lda.a = alloca i32
  %info.local = alloca i32
  store i8 %type, ptr %type.a
  store i32 %kl, ptr %kl.a
  store i32 %ku, ptr %ku.a
  store float %cfrom, ptr %cfrom.a
  store float %cto, ptr %cto.a
  %rowmajor = icmp eq i32 %layout, 101
  %rows = select i1 %rowmajor, i32 %n, i32 %m
  %cols = select i1 %rowmajor, i32 %m, i32 %n
  store i32 %rows, ptr %m.a
  store i32 %cols, ptr %n.a
  store i32 %lda, ptr %lda.a
  %noinfo = icmp eq ptr %info, null
  %infop = select i1 %noinfo, ptr %info.local, ptr %info
  call void @pyjlad_lapack_slascl_(ptr %type.a, ptr %kl.a, ptr %ku.a, ptr %cfrom.a, ptr %cto.a,
                                   ptr %m.a, ptr %n.a, ptr %a, ptr %lda.a, ptr %infop, i64 1)
  ret void
}
declare void @pyjlad_lapack_slascl_(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i64)
