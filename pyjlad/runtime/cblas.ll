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
;
; With beta = 0 (what Numba always passes), BLAS does not read the output: it may hold anything,
; NaN included. The gemv and gemm helpers write it zero before the call all the same, so that
; the derivative is defined too: in forward mode Enzyme gives a new array's shadow fresh, unset
; memory, and its BLAS rules scale the output's shadow by beta (cblas_?lascl, cblas_?scal) where
; BLAS would overwrite it. Unset memory holding a NaN or an infinity turned a forward-mode
; derivative through a product of constant arrays (solve(A.T @ A, v) with respect to v) into
; NaN (tests/test_unset_outputs.py). The zeroing is differentiated with the rest (the shadow is
; zeroed alongside) and costs one pass over the output.

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
  %be.zero = fcmp oeq double %be, 0.0
  %len = select i1 %trans.no, i64 %m, i64 %n
  %clear.len = select i1 %be.zero, i64 %len, i64 0
  %clear.any = icmp sgt i64 %clear.len, 0
  br i1 %clear.any, label %clear, label %product

clear:                                  ; beta = 0: y written zero first (see the note above)
  %i = phi i64 [ 0, %entry ], [ %i.next, %clear ]
  %at = getelementptr double, ptr %y, i64 %i
  store double 0.0, ptr %at, align 8
  %i.next = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %i.next, %clear.len
  br i1 %more, label %clear, label %product

product:
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
  %be.zero = fcmp oeq float %be, 0.0
  %len = select i1 %trans.no, i64 %m, i64 %n
  %clear.len = select i1 %be.zero, i64 %len, i64 0
  %clear.any = icmp sgt i64 %clear.len, 0
  br i1 %clear.any, label %clear, label %product

clear:                                  ; beta = 0: y written zero first (see the note above)
  %i = phi i64 [ 0, %entry ], [ %i.next, %clear ]
  %at = getelementptr float, ptr %y, i64 %i
  store float 0.0, ptr %at, align 4
  %i.next = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %i.next, %clear.len
  br i1 %more, label %clear, label %product

product:
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
  %be.zero = fcmp oeq double %be, 0.0
  %cols = select i1 %be.zero, i64 %n, i64 0
  %cols.any = icmp sgt i64 %cols, 0
  %rows.any = icmp sgt i64 %m, 0
  %clear.any = and i1 %cols.any, %rows.any
  br i1 %clear.any, label %clear.column, label %product

clear.column:                           ; beta = 0: C written zero first (see the note above)
  %j = phi i64 [ 0, %entry ], [ %j.next, %clear.column.end ]
  %column.at = mul i64 %j, %ldc
  %column = getelementptr double, ptr %c, i64 %column.at
  br label %clear.row

clear.row:
  %i = phi i64 [ 0, %clear.column ], [ %i.next, %clear.row ]
  %at = getelementptr double, ptr %column, i64 %i
  store double 0.0, ptr %at, align 8
  %i.next = add nuw nsw i64 %i, 1
  %rows.more = icmp slt i64 %i.next, %m
  br i1 %rows.more, label %clear.row, label %clear.column.end

clear.column.end:
  %j.next = add nuw nsw i64 %j, 1
  %columns.more = icmp slt i64 %j.next, %cols
  br i1 %columns.more, label %clear.column, label %product

product:
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
  %be.zero = fcmp oeq float %be, 0.0
  %cols = select i1 %be.zero, i64 %n, i64 0
  %cols.any = icmp sgt i64 %cols, 0
  %rows.any = icmp sgt i64 %m, 0
  %clear.any = and i1 %cols.any, %rows.any
  br i1 %clear.any, label %clear.column, label %product

clear.column:                           ; beta = 0: C written zero first (see the note above)
  %j = phi i64 [ 0, %entry ], [ %j.next, %clear.column.end ]
  %column.at = mul i64 %j, %ldc
  %column = getelementptr float, ptr %c, i64 %column.at
  br label %clear.row

clear.row:
  %i = phi i64 [ 0, %clear.column ], [ %i.next, %clear.row ]
  %at = getelementptr float, ptr %column, i64 %i
  store float 0.0, ptr %at, align 4
  %i.next = add nuw nsw i64 %i, 1
  %rows.more = icmp slt i64 %i.next, %m
  br i1 %rows.more, label %clear.row, label %clear.column.end

clear.column.end:
  %j.next = add nuw nsw i64 %j, 1
  %columns.more = icmp slt i64 %j.next, %cols
  br i1 %columns.more, label %clear.column, label %product

product:
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
