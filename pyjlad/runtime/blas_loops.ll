; Numba's BLAS helpers as plain loops, for the parallel loops of a derivative (both modes).
;
; Loaded by pyjlad.blas_loops. cblas.ll makes Numba's numba_xxdot/gemv/gemm calls CBLAS, which
; Enzyme differentiates with its BLAS rules: their adjoints are BLAS calls again (cblas_dger,
; cblas_daxpy), which add into the adjoint of a matrix without atomic operations. Inside an
; OpenMP parallel loop every thread adds into the adjoint of the arrays the iterations share (the
; W of a `W @ X[i]` in a prange), so that would be a data race; in forward mode Enzyme failed on
; them inside a parallel loop. The definitions below have the
; same names, parameters and results as cblas.ll's and compute the same products as loops, which
; Enzyme differentiates like any other loop of a parallel region (its adds into shared adjoints
; atomic, or into a thread's own copy). pyjlad.blas_loops puts them in place of cblas.ll's in a
; parallel derivative's module only: elsewhere BLAS is faster. A valid LLVM 15 module (opaque
; pointers); tests/test_runtime_ll.py assembles it with llvm-as-15.
;
; Column-major, as Numba's Fortran calls are: element (i, j) of a matrix with leading dimension
; ld is at i + j * ld. A transpose flag 'n'/'N' (110/78) means the matrix as it is, anything
; else its transpose. beta = 0 means the output is written without being read (BLAS's rule: it
; may hold anything, NaN included); the increments Numba passes are always 1.
;
;   @numba_xxdot.{d,s}    out = sum_i x[i] y[i]
;   @numba_xxgemv.{d,s}   y = alpha op(A) x + beta y
;   @numba_xxgemm.{d,s}   C = alpha op(A) op(B) + beta C
;
; The two kinds of each helper differ only in the element type: keep them in step.

define linkonce_odr i32 @numba_xxdot.d(i8 %kind, i8 %conj, i64 %n, ptr %x, ptr %y, ptr %out) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %body ]
  %acc = phi double [ 0.0, %entry ], [ %acc.next, %body ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %px = getelementptr double, ptr %x, i64 %i
  %vx = load double, ptr %px, align 8
  %py = getelementptr double, ptr %y, i64 %i
  %vy = load double, ptr %py, align 8
  %prod = fmul double %vx, %vy
  %acc.next = fadd double %acc, %prod
  %i.next = add i64 %i, 1
  br label %loop
done:
  store double %acc, ptr %out, align 8
  ret i32 0
}

define linkonce_odr i32 @numba_xxgemv.d(i8 %kind, i8 %trans, i64 %m, i64 %n, ptr %alpha, ptr %a, i64 %lda, ptr %x, ptr %beta, ptr %y) {
entry:
  %trans.n = icmp eq i8 %trans, 110
  %trans.N = icmp eq i8 %trans, 78
  %plain = or i1 %trans.n, %trans.N
  %alphav = load double, ptr %alpha, align 8
  %betav = load double, ptr %beta, align 8
  %betazero = fcmp oeq double %betav, 0.0
  %rows = select i1 %plain, i64 %m, i64 %n
  %terms = select i1 %plain, i64 %n, i64 %m
  %rowstride = select i1 %plain, i64 1, i64 %lda
  %termstride = select i1 %plain, i64 %lda, i64 1
  br label %row
row:
  %r = phi i64 [ 0, %entry ], [ %r.next, %stored ]
  %rmore = icmp slt i64 %r, %rows
  br i1 %rmore, label %rowstart, label %done
rowstart:
  %rowbase = mul i64 %r, %rowstride
  br label %term
term:
  %t = phi i64 [ 0, %rowstart ], [ %t.next, %termbody ]
  %acc = phi double [ 0.0, %rowstart ], [ %acc.next, %termbody ]
  %tmore = icmp slt i64 %t, %terms
  br i1 %tmore, label %termbody, label %rowend
termbody:
  %termoffset = mul i64 %t, %termstride
  %ia = add i64 %rowbase, %termoffset
  %pa = getelementptr double, ptr %a, i64 %ia
  %va = load double, ptr %pa, align 8
  %px = getelementptr double, ptr %x, i64 %t
  %vx = load double, ptr %px, align 8
  %prod = fmul double %va, %vx
  %acc.next = fadd double %acc, %prod
  %t.next = add i64 %t, 1
  br label %term
rowend:
  %scaled = fmul double %alphav, %acc
  %py = getelementptr double, ptr %y, i64 %r
  br i1 %betazero, label %stored, label %blend
blend:
  %vy = load double, ptr %py, align 8
  %kept = fmul double %betav, %vy
  %sum = fadd double %scaled, %kept
  br label %stored
stored:
  %new = phi double [ %scaled, %rowend ], [ %sum, %blend ]
  store double %new, ptr %py, align 8
  %r.next = add i64 %r, 1
  br label %row
done:
  ret i32 0
}

define linkonce_odr i32 @numba_xxgemm.d(i8 %kind, i8 %transa, i8 %transb, i64 %m, i64 %n, i64 %k, ptr %alpha, ptr %a, i64 %lda, ptr %b, i64 %ldb, ptr %beta, ptr %c, i64 %ldc) {
entry:
  %transa.n = icmp eq i8 %transa, 110
  %transa.N = icmp eq i8 %transa, 78
  %plaina = or i1 %transa.n, %transa.N
  %transb.n = icmp eq i8 %transb, 110
  %transb.N = icmp eq i8 %transb, 78
  %plainb = or i1 %transb.n, %transb.N
  %alphav = load double, ptr %alpha, align 8
  %betav = load double, ptr %beta, align 8
  %betazero = fcmp oeq double %betav, 0.0
  %astride.i = select i1 %plaina, i64 1, i64 %lda
  %astride.l = select i1 %plaina, i64 %lda, i64 1
  %bstride.l = select i1 %plainb, i64 1, i64 %ldb
  %bstride.j = select i1 %plainb, i64 %ldb, i64 1
  br label %col
col:
  %j = phi i64 [ 0, %entry ], [ %j.next, %colend ]
  %jmore = icmp slt i64 %j, %n
  br i1 %jmore, label %colstart, label %done
colstart:
  %bbase = mul i64 %j, %bstride.j
  %cbase = mul i64 %j, %ldc
  br label %row
row:
  %i = phi i64 [ 0, %colstart ], [ %i.next, %stored ]
  %imore = icmp slt i64 %i, %m
  br i1 %imore, label %rowstart, label %colend
rowstart:
  %abase = mul i64 %i, %astride.i
  br label %term
term:
  %l = phi i64 [ 0, %rowstart ], [ %l.next, %termbody ]
  %acc = phi double [ 0.0, %rowstart ], [ %acc.next, %termbody ]
  %lmore = icmp slt i64 %l, %k
  br i1 %lmore, label %termbody, label %rowend
termbody:
  %aoffset = mul i64 %l, %astride.l
  %ia = add i64 %abase, %aoffset
  %pa = getelementptr double, ptr %a, i64 %ia
  %va = load double, ptr %pa, align 8
  %boffset = mul i64 %l, %bstride.l
  %ib = add i64 %bbase, %boffset
  %pb = getelementptr double, ptr %b, i64 %ib
  %vb = load double, ptr %pb, align 8
  %prod = fmul double %va, %vb
  %acc.next = fadd double %acc, %prod
  %l.next = add i64 %l, 1
  br label %term
rowend:
  %scaled = fmul double %alphav, %acc
  %ic = add i64 %cbase, %i
  %pc = getelementptr double, ptr %c, i64 %ic
  br i1 %betazero, label %stored, label %blend
blend:
  %vc = load double, ptr %pc, align 8
  %kept = fmul double %betav, %vc
  %sum = fadd double %scaled, %kept
  br label %stored
stored:
  %new = phi double [ %scaled, %rowend ], [ %sum, %blend ]
  store double %new, ptr %pc, align 8
  %i.next = add i64 %i, 1
  br label %row
colend:
  %j.next = add i64 %j, 1
  br label %col
done:
  ret i32 0
}

define linkonce_odr i32 @numba_xxdot.s(i8 %kind, i8 %conj, i64 %n, ptr %x, ptr %y, ptr %out) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %body ]
  %acc = phi float [ 0.0, %entry ], [ %acc.next, %body ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %px = getelementptr float, ptr %x, i64 %i
  %vx = load float, ptr %px, align 4
  %py = getelementptr float, ptr %y, i64 %i
  %vy = load float, ptr %py, align 4
  %prod = fmul float %vx, %vy
  %acc.next = fadd float %acc, %prod
  %i.next = add i64 %i, 1
  br label %loop
done:
  store float %acc, ptr %out, align 4
  ret i32 0
}

define linkonce_odr i32 @numba_xxgemv.s(i8 %kind, i8 %trans, i64 %m, i64 %n, ptr %alpha, ptr %a, i64 %lda, ptr %x, ptr %beta, ptr %y) {
entry:
  %trans.n = icmp eq i8 %trans, 110
  %trans.N = icmp eq i8 %trans, 78
  %plain = or i1 %trans.n, %trans.N
  %alphav = load float, ptr %alpha, align 4
  %betav = load float, ptr %beta, align 4
  %betazero = fcmp oeq float %betav, 0.0
  %rows = select i1 %plain, i64 %m, i64 %n
  %terms = select i1 %plain, i64 %n, i64 %m
  %rowstride = select i1 %plain, i64 1, i64 %lda
  %termstride = select i1 %plain, i64 %lda, i64 1
  br label %row
row:
  %r = phi i64 [ 0, %entry ], [ %r.next, %stored ]
  %rmore = icmp slt i64 %r, %rows
  br i1 %rmore, label %rowstart, label %done
rowstart:
  %rowbase = mul i64 %r, %rowstride
  br label %term
term:
  %t = phi i64 [ 0, %rowstart ], [ %t.next, %termbody ]
  %acc = phi float [ 0.0, %rowstart ], [ %acc.next, %termbody ]
  %tmore = icmp slt i64 %t, %terms
  br i1 %tmore, label %termbody, label %rowend
termbody:
  %termoffset = mul i64 %t, %termstride
  %ia = add i64 %rowbase, %termoffset
  %pa = getelementptr float, ptr %a, i64 %ia
  %va = load float, ptr %pa, align 4
  %px = getelementptr float, ptr %x, i64 %t
  %vx = load float, ptr %px, align 4
  %prod = fmul float %va, %vx
  %acc.next = fadd float %acc, %prod
  %t.next = add i64 %t, 1
  br label %term
rowend:
  %scaled = fmul float %alphav, %acc
  %py = getelementptr float, ptr %y, i64 %r
  br i1 %betazero, label %stored, label %blend
blend:
  %vy = load float, ptr %py, align 4
  %kept = fmul float %betav, %vy
  %sum = fadd float %scaled, %kept
  br label %stored
stored:
  %new = phi float [ %scaled, %rowend ], [ %sum, %blend ]
  store float %new, ptr %py, align 4
  %r.next = add i64 %r, 1
  br label %row
done:
  ret i32 0
}

define linkonce_odr i32 @numba_xxgemm.s(i8 %kind, i8 %transa, i8 %transb, i64 %m, i64 %n, i64 %k, ptr %alpha, ptr %a, i64 %lda, ptr %b, i64 %ldb, ptr %beta, ptr %c, i64 %ldc) {
entry:
  %transa.n = icmp eq i8 %transa, 110
  %transa.N = icmp eq i8 %transa, 78
  %plaina = or i1 %transa.n, %transa.N
  %transb.n = icmp eq i8 %transb, 110
  %transb.N = icmp eq i8 %transb, 78
  %plainb = or i1 %transb.n, %transb.N
  %alphav = load float, ptr %alpha, align 4
  %betav = load float, ptr %beta, align 4
  %betazero = fcmp oeq float %betav, 0.0
  %astride.i = select i1 %plaina, i64 1, i64 %lda
  %astride.l = select i1 %plaina, i64 %lda, i64 1
  %bstride.l = select i1 %plainb, i64 1, i64 %ldb
  %bstride.j = select i1 %plainb, i64 %ldb, i64 1
  br label %col
col:
  %j = phi i64 [ 0, %entry ], [ %j.next, %colend ]
  %jmore = icmp slt i64 %j, %n
  br i1 %jmore, label %colstart, label %done
colstart:
  %bbase = mul i64 %j, %bstride.j
  %cbase = mul i64 %j, %ldc
  br label %row
row:
  %i = phi i64 [ 0, %colstart ], [ %i.next, %stored ]
  %imore = icmp slt i64 %i, %m
  br i1 %imore, label %rowstart, label %colend
rowstart:
  %abase = mul i64 %i, %astride.i
  br label %term
term:
  %l = phi i64 [ 0, %rowstart ], [ %l.next, %termbody ]
  %acc = phi float [ 0.0, %rowstart ], [ %acc.next, %termbody ]
  %lmore = icmp slt i64 %l, %k
  br i1 %lmore, label %termbody, label %rowend
termbody:
  %aoffset = mul i64 %l, %astride.l
  %ia = add i64 %abase, %aoffset
  %pa = getelementptr float, ptr %a, i64 %ia
  %va = load float, ptr %pa, align 4
  %boffset = mul i64 %l, %bstride.l
  %ib = add i64 %bbase, %boffset
  %pb = getelementptr float, ptr %b, i64 %ib
  %vb = load float, ptr %pb, align 4
  %prod = fmul float %va, %vb
  %acc.next = fadd float %acc, %prod
  %l.next = add i64 %l, 1
  br label %term
rowend:
  %scaled = fmul float %alphav, %acc
  %ic = add i64 %cbase, %i
  %pc = getelementptr float, ptr %c, i64 %ic
  br i1 %betazero, label %stored, label %blend
blend:
  %vc = load float, ptr %pc, align 4
  %kept = fmul float %betav, %vc
  %sum = fadd float %scaled, %kept
  br label %stored
stored:
  %new = phi float [ %scaled, %rowend ], [ %sum, %blend ]
  store float %new, ptr %pc, align 4
  %i.next = add i64 %i, 1
  br label %row
colend:
  %j.next = add i64 %j, 1
  br label %col
done:
  ret i32 0
}
