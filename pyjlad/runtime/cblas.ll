; CBLAS replacements for Numba's BLAS helpers, for differentiated code.
;
; Loaded by pyjlad.runtime into pyjlad.portable.PORTABLE_RUNTIME. Numba's np.dot, @ and
; np.linalg.norm call numba_xxdot/numba_xxgemv/numba_xxgemm/numba_xxnrm2 (numba/_lapack.c),
; which call Fortran BLAS through function pointers Enzyme cannot follow, and return a status.
; The definitions below make the same calls through CBLAS (column-major, as Numba's Fortran
; calls are), which Enzyme differentiates with its BLAS rules, so the derivative of a matrix
; product is matrix products again. A valid LLVM 15 module (opaque pointers); tests/
; test_runtime_ll.py assembles it with llvm-as-15.
;
; Numba always passes the kind as a constant ('d' = 100, 's' = 115); make_portable renames
; each call to the kind's own definition, @numba_xx<op>.d (double) or @numba_xx<op>.s (float),
; so each has one element type (Enzyme's type analysis rejects a function storing both float
; and double to one pointer). Complex kinds are refused before any code runs.
;
;   @numba_xxdot.{d,s}    Numba's numba_xxdot   -> cblas_ddot / cblas_sdot
;   @numba_xxgemv.{d,s}   Numba's numba_xxgemv  -> cblas_dgemv / cblas_sgemv
;   @numba_xxnrm2.{d,s}   Numba's numba_xxnrm2  -> a plain loop and llvm.sqrt (Enzyme
;                                                  differentiates it; no BLAS rule needed)
;   @numba_xxgemm.{d,s}   Numba's numba_xxgemm  -> cblas_dgemm / cblas_sgemm
;
; A Fortran transpose flag 'n'/'N' (110/78) becomes CblasNoTrans (111), anything else
; CblasTrans (112); the layout argument 102 is CblasColMajor. The two kinds of each helper
; differ only in the element type (and the CBLAS name): keep them in step.

define linkonce_odr i32 @numba_xxdot.d(i8 %kind, i8 %conj, i64 %n, ptr %x, ptr %y, ptr %out) {
entry:
  %n32 = trunc i64 %n to i32
  %r = call double @cblas_ddot(i32 %n32, ptr %x, i32 1, ptr %y, i32 1)
  store double %r, ptr %out, align 8
  ret i32 0
}

define linkonce_odr i32 @numba_xxdot.s(i8 %kind, i8 %conj, i64 %n, ptr %x, ptr %y, ptr %out) {
entry:
  %n32 = trunc i64 %n to i32
  %r = call float @cblas_sdot(i32 %n32, ptr %x, i32 1, ptr %y, i32 1)
  store float %r, ptr %out, align 4
  ret i32 0
}

define linkonce_odr i32 @numba_xxgemv.d(i8 %kind, i8 %trans, i64 %m, i64 %n, ptr %alpha, ptr %a, i64 %lda, ptr %x, ptr %beta, ptr %y) {
entry:
  %trans.n = icmp eq i8 %trans, 110
  %trans.N = icmp eq i8 %trans, 78
  %trans.no = or i1 %trans.n, %trans.N
  %trans.cblas = select i1 %trans.no, i32 111, i32 112
  %m32 = trunc i64 %m to i32
  %n32 = trunc i64 %n to i32
  %lda32 = trunc i64 %lda to i32
  %al = load double, ptr %alpha, align 8
  %be = load double, ptr %beta, align 8
  call void @cblas_dgemv(i32 102, i32 %trans.cblas, i32 %m32, i32 %n32, double %al, ptr %a, i32 %lda32, ptr %x, i32 1, double %be, ptr %y, i32 1)
  ret i32 0
}

define linkonce_odr i32 @numba_xxgemv.s(i8 %kind, i8 %trans, i64 %m, i64 %n, ptr %alpha, ptr %a, i64 %lda, ptr %x, ptr %beta, ptr %y) {
entry:
  %trans.n = icmp eq i8 %trans, 110
  %trans.N = icmp eq i8 %trans, 78
  %trans.no = or i1 %trans.n, %trans.N
  %trans.cblas = select i1 %trans.no, i32 111, i32 112
  %m32 = trunc i64 %m to i32
  %n32 = trunc i64 %n to i32
  %lda32 = trunc i64 %lda to i32
  %al = load float, ptr %alpha, align 4
  %be = load float, ptr %beta, align 4
  call void @cblas_sgemv(i32 102, i32 %trans.cblas, i32 %m32, i32 %n32, float %al, ptr %a, i32 %lda32, ptr %x, i32 1, float %be, ptr %y, i32 1)
  ret i32 0
}

define linkonce_odr i32 @numba_xxnrm2.d(i8 %kind, i64 %n, ptr %x, i64 %incx, ptr %out) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %body ]
  %acc = phi double [ 0.0, %entry ], [ %sum, %body ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %offset = mul i64 %i, %incx
  %p = getelementptr double, ptr %x, i64 %offset
  %v = load double, ptr %p, align 8
  %sq = fmul double %v, %v
  %sum = fadd double %acc, %sq
  %next = add i64 %i, 1
  br label %loop
done:
  %r = call double @llvm.sqrt.f64(double %acc)
  store double %r, ptr %out, align 8
  ret i32 0
}

define linkonce_odr i32 @numba_xxnrm2.s(i8 %kind, i64 %n, ptr %x, i64 %incx, ptr %out) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %body ]
  %acc = phi float [ 0.0, %entry ], [ %sum, %body ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %offset = mul i64 %i, %incx
  %p = getelementptr float, ptr %x, i64 %offset
  %v = load float, ptr %p, align 4
  %sq = fmul float %v, %v
  %sum = fadd float %acc, %sq
  %next = add i64 %i, 1
  br label %loop
done:
  %r = call float @llvm.sqrt.f32(float %acc)
  store float %r, ptr %out, align 4
  ret i32 0
}

define linkonce_odr i32 @numba_xxgemm.d(i8 %kind, i8 %transa, i8 %transb, i64 %m, i64 %n, i64 %k, ptr %alpha, ptr %a, i64 %lda, ptr %b, i64 %ldb, ptr %beta, ptr %c, i64 %ldc) {
entry:
  %transa.n = icmp eq i8 %transa, 110
  %transa.N = icmp eq i8 %transa, 78
  %transa.no = or i1 %transa.n, %transa.N
  %transa.cblas = select i1 %transa.no, i32 111, i32 112
  %transb.n = icmp eq i8 %transb, 110
  %transb.N = icmp eq i8 %transb, 78
  %transb.no = or i1 %transb.n, %transb.N
  %transb.cblas = select i1 %transb.no, i32 111, i32 112
  %m32 = trunc i64 %m to i32
  %n32 = trunc i64 %n to i32
  %k32 = trunc i64 %k to i32
  %lda32 = trunc i64 %lda to i32
  %ldb32 = trunc i64 %ldb to i32
  %ldc32 = trunc i64 %ldc to i32
  %al = load double, ptr %alpha, align 8
  %be = load double, ptr %beta, align 8
  call void @cblas_dgemm(i32 102, i32 %transa.cblas, i32 %transb.cblas, i32 %m32, i32 %n32, i32 %k32, double %al, ptr %a, i32 %lda32, ptr %b, i32 %ldb32, double %be, ptr %c, i32 %ldc32)
  ret i32 0
}

define linkonce_odr i32 @numba_xxgemm.s(i8 %kind, i8 %transa, i8 %transb, i64 %m, i64 %n, i64 %k, ptr %alpha, ptr %a, i64 %lda, ptr %b, i64 %ldb, ptr %beta, ptr %c, i64 %ldc) {
entry:
  %transa.n = icmp eq i8 %transa, 110
  %transa.N = icmp eq i8 %transa, 78
  %transa.no = or i1 %transa.n, %transa.N
  %transa.cblas = select i1 %transa.no, i32 111, i32 112
  %transb.n = icmp eq i8 %transb, 110
  %transb.N = icmp eq i8 %transb, 78
  %transb.no = or i1 %transb.n, %transb.N
  %transb.cblas = select i1 %transb.no, i32 111, i32 112
  %m32 = trunc i64 %m to i32
  %n32 = trunc i64 %n to i32
  %k32 = trunc i64 %k to i32
  %lda32 = trunc i64 %lda to i32
  %ldb32 = trunc i64 %ldb to i32
  %ldc32 = trunc i64 %ldc to i32
  %al = load float, ptr %alpha, align 4
  %be = load float, ptr %beta, align 4
  call void @cblas_sgemm(i32 102, i32 %transa.cblas, i32 %transb.cblas, i32 %m32, i32 %n32, i32 %k32, float %al, ptr %a, i32 %lda32, ptr %b, i32 %ldb32, float %be, ptr %c, i32 %ldc32)
  ret i32 0
}

declare double @llvm.sqrt.f64(double)
declare float @llvm.sqrt.f32(float)
; What CBLAS does with each pointer, for LLVM's inference of which arrays a function writes
; (pyjlad.inferred_readonly): the inputs are read only, nothing is kept after the call.
declare double @cblas_ddot(i32, ptr nocapture readonly, i32, ptr nocapture readonly, i32)
declare float @cblas_sdot(i32, ptr nocapture readonly, i32, ptr nocapture readonly, i32)
declare void @cblas_dgemv(i32, i32, i32, i32, double, ptr nocapture readonly, i32, ptr nocapture readonly, i32, double, ptr nocapture, i32)
declare void @cblas_sgemv(i32, i32, i32, i32, float, ptr nocapture readonly, i32, ptr nocapture readonly, i32, float, ptr nocapture, i32)
declare void @cblas_dgemm(i32, i32, i32, i32, i32, i32, double, ptr nocapture readonly, i32, ptr nocapture readonly, i32, double, ptr nocapture, i32)
declare void @cblas_sgemm(i32, i32, i32, i32, i32, i32, float, ptr nocapture readonly, i32, ptr nocapture readonly, i32, float, ptr nocapture, i32)
