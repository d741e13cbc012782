; The memory pool of differentiated code (pyjlad.engines.pool): pyjlad_pool_malloc/calloc/free,
; which the differentiated module's malloc, calloc and free are renamed to when it is loaded,
; and the per-thread out-of-memory exit (pyjlad_oom_enter/leave, see
; pyjlad.engines.driver._guard_out_of_memory). It replaces no Numba function; it is compiled
; in-process by llvmlite (LLVM 22), never seen by Enzyme. Blocks of at least 2^min_class bytes
; are rounded up to a power of two and, when freed, kept (up to `slots` per size, `capacity`
; bytes in all) for the next request of that size; see pyjlad/engines/pool.py.
;
; A template: pyjlad.runtime.fill("pool.ll", ...) drops this leading comment and replaces each
; ${name} (string.Template's braced form only; a bare `$` is an error) by its value:
;   ${key}         the pthread_key_t of each thread's armed jmp_buf (made at run time)
;   ${capacity}    most bytes the pool keeps ($PYJLAD_POOL_BYTES)
;   ${min_class}, ${max_class}   log2 of the smallest and largest block size kept
;   ${min_bytes}   2^min_class
;   ${slots}       blocks kept per size; ${classes} sizes kept; ${slot_count} = classes * slots
; Filled with the values pyjlad uses, it is a valid LLVM 15 module (tests/test_runtime_ll.py
; assembles it with llvm-as-15).

@pool = internal global [${classes} x [${slots} x ptr]] zeroinitializer
@pool_bytes = internal global i64 0
@pool_mutex = internal global i32 0

declare ptr @malloc(i64)
declare ptr @calloc(i64, i64)
declare void @free(ptr)
declare { i64, i1 } @llvm.umul.with.overflow.i64(i64, i64)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare i64 @malloc_usable_size(ptr)
declare i64 @llvm.ctlz.i64(i64, i1)
declare ptr @pthread_getspecific(i32)
declare i32 @pthread_setspecific(i32, ptr)
declare void @longjmp(ptr, i32) noreturn

; The out-of-memory exit (see driver._guard_out_of_memory): each thread's armed jmp_buf.
define ptr @pyjlad_oom_enter(ptr %jb) {
entry:
  %prev = call ptr @pthread_getspecific(i32 ${key})
  %r = call i32 @pthread_setspecific(i32 ${key}, ptr %jb)
  ret ptr %prev
}

define void @pyjlad_oom_leave(ptr %prev) {
entry:
  %r = call i32 @pthread_setspecific(i32 ${key}, ptr %prev)
  ret void
}

@pool_failed_bytes = internal global i64 0

; %p, unless it is null (the allocation of %bytes failed) and a driver armed the exit: then
; jump there. A request beyond any address space (2^47 bytes and more) is let through as null:
; Enzyme sizes the cache of a loop before knowing the loop runs, and such a request comes from
; a trip count that is never used.
define internal ptr @pool_checked(ptr %p, i64 %bytes) {
entry:
  %failed = icmp eq ptr %p, null
  %possible = icmp ult i64 %bytes, 140737488355328
  %fatal = and i1 %failed, %possible
  br i1 %fatal, label %check, label %ok
ok:
  ret ptr %p
check:
  store atomic i64 %bytes, ptr @pool_failed_bytes monotonic, align 8
  %jb = call ptr @pthread_getspecific(i32 ${key})
  %armed = icmp ne ptr %jb, null
  br i1 %armed, label %jump, label %ok
jump:
  call void @longjmp(ptr %jb, i32 1)
  unreachable
}

define internal void @pool_lock() {
entry:
  br label %spin
spin:
  %r = cmpxchg weak ptr @pool_mutex, i32 0, i32 1 acquire monotonic
  %ok = extractvalue { i32, i1 } %r, 1
  br i1 %ok, label %done, label %spin
done:
  ret void
}

define internal void @pool_unlock() {
entry:
  store atomic i32 0, ptr @pool_mutex release, align 4
  ret void
}

; The slots of blocks of 2^class bytes, or null for a class the pool does not keep.
define internal ptr @pool_row(i64 %class) {
entry:
  %low = icmp ult i64 %class, ${min_class}
  %high = icmp ugt i64 %class, ${max_class}
  %outside = or i1 %low, %high
  br i1 %outside, label %none, label %row
none:
  ret ptr null
row:
  %index = sub i64 %class, ${min_class}
  %slots = getelementptr [${slots} x ptr], ptr @pool, i64 %index
  ret ptr %slots
}

; Called with the lock held: the first slot of %slots that holds a block (%occupied) or is
; empty (not %occupied), or null.
define internal ptr @pool_find(ptr %slots, i1 %occupied) {
entry:
  br label %loop
loop:
  %k = phi i64 [ 0, %entry ], [ %next, %step ]
  %slot = getelementptr ptr, ptr %slots, i64 %k
  %v = load ptr, ptr %slot, align 8
  %empty = icmp eq ptr %v, null
  %hit = xor i1 %empty, %occupied
  br i1 %hit, label %found, label %step
step:
  %next = add i64 %k, 1
  %more = icmp ult i64 %next, ${slots}
  br i1 %more, label %loop, label %missing
found:
  ret ptr %slot
missing:
  ret ptr null
}

define ptr @pyjlad_pool_malloc(i64 %size) {
entry:
  %small = icmp ult i64 %size, ${min_bytes}
  br i1 %small, label %direct, label %classify
direct:
  %p0 = call ptr @malloc(i64 %size)
  %p = call ptr @pool_checked(ptr %p0, i64 %size)
  ret ptr %p
classify:
  %m1 = sub i64 %size, 1
  %lz = call i64 @llvm.ctlz.i64(i64 %m1, i1 false)
  %class = sub i64 64, %lz
  %slots = call ptr @pool_row(i64 %class)
  %kept = icmp eq ptr %slots, null
  br i1 %kept, label %direct, label %locked
locked:
  %bytes = shl i64 1, %class
  call void @pool_lock()
  %slot = call ptr @pool_find(ptr %slots, i1 true)
  %miss = icmp eq ptr %slot, null
  br i1 %miss, label %fresh, label %take
take:
  %block = load ptr, ptr %slot, align 8
  store ptr null, ptr %slot, align 8
  %held = load i64, ptr @pool_bytes, align 8
  %left = sub i64 %held, %bytes
  store i64 %left, ptr @pool_bytes, align 8
  call void @pool_unlock()
  ret ptr %block
fresh:
  call void @pool_unlock()
  %new0 = call ptr @malloc(i64 %bytes)
  %new = call ptr @pool_checked(ptr %new0, i64 %bytes)
  ret ptr %new
}

define ptr @pyjlad_pool_calloc(i64 %n, i64 %size) {
entry:
  %m = call { i64, i1 } @llvm.umul.with.overflow.i64(i64 %n, i64 %size)
  %bytes = extractvalue { i64, i1 } %m, 0
  %overflow = extractvalue { i64, i1 } %m, 1
  %small = icmp ult i64 %bytes, ${min_bytes}
  %direct = or i1 %overflow, %small
  br i1 %direct, label %libc, label %pooled
libc:
  %c0 = call ptr @calloc(i64 %n, i64 %size)
  %c = call ptr @pool_checked(ptr %c0, i64 %bytes)
  ret ptr %c
pooled:
  %p = call ptr @pyjlad_pool_malloc(i64 %bytes)
  %failed = icmp eq ptr %p, null
  br i1 %failed, label %out, label %zero
zero:
  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %bytes, i1 false)
  br label %out
out:
  ret ptr %p
}

define void @pyjlad_pool_free(ptr %p) {
entry:
  %null = icmp eq ptr %p, null
  br i1 %null, label %done, label %sized
done:
  ret void
direct:
  call void @free(ptr %p)
  ret void
sized:
  %usable = call i64 @malloc_usable_size(ptr %p)
  %lz = call i64 @llvm.ctlz.i64(i64 %usable, i1 false)
  %class = sub i64 63, %lz
  %slots = call ptr @pool_row(i64 %class)
  %kept = icmp eq ptr %slots, null
  br i1 %kept, label %direct, label %locked
locked:
  %bytes = shl i64 1, %class
  call void @pool_lock()
  %held = load i64, ptr @pool_bytes, align 8
  %after = add i64 %held, %bytes
  %full = icmp ugt i64 %after, ${capacity}
  br i1 %full, label %release, label %search
search:
  %slot = call ptr @pool_find(ptr %slots, i1 false)
  %none = icmp eq ptr %slot, null
  br i1 %none, label %release, label %keep
keep:
  store ptr %p, ptr %slot, align 8
  store i64 %after, ptr @pool_bytes, align 8
  call void @pool_unlock()
  ret void
release:
  call void @pool_unlock()
  call void @free(ptr %p)
  ret void
}

define i64 @pyjlad_pool_failed_bytes() {
entry:
  %b = load atomic i64, ptr @pool_failed_bytes monotonic, align 8
  ret i64 %b
}

define i64 @pyjlad_pool_kept() {
entry:
  call void @pool_lock()
  %held = load i64, ptr @pool_bytes, align 8
  call void @pool_unlock()
  ret i64 %held
}

define void @pyjlad_pool_release() {
entry:
  call void @pool_lock()
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %step ]
  %slot = getelementptr ptr, ptr @pool, i64 %i
  %v = load ptr, ptr %slot, align 8
  store ptr null, ptr %slot, align 8
  call void @free(ptr %v)
  br label %step
step:
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, ${slot_count}
  br i1 %more, label %loop, label %out
out:
  store i64 0, ptr @pool_bytes, align 8
  call void @pool_unlock()
  ret void
}
