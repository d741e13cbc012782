; The memory pool of differentiated code (pyjlad.engines.pool): pyjlad_pool_malloc/calloc/realloc/free,
; which the differentiated module's malloc, calloc, realloc and free are renamed to when it is loaded,
; and the per-thread out-of-memory exit (pyjlad_oom_enter/leave, see
; pyjlad.engines.driver._guard_out_of_memory; pyjlad_oom_check, see pyjlad.allocation_exits). It replaces no Numba function; it is compiled
; in-process by llvmlite (LLVM 22), never seen by Enzyme. Blocks of at least 2^min_class bytes
; are rounded up to a power of two and, when freed, kept (up to `slots` per size, `capacity`
; bytes in all) for the next request of that size. Smaller blocks are rounded up to a power of
; two too (16 bytes at least) and, when freed, kept in the freeing thread's own lists (up to
; `small_capacity` bytes per thread); see pyjlad/engines/pool.py.
;
; A template: pyjlad.runtime.fill("pool.ll", ...) drops this leading comment and replaces each
; ${name} (string.Template's braced form only; a bare `$` is an error) by its value:
;   ${key}         the pthread_key_t of each thread's armed jmp_buf (made at run time)
;   ${capacity}    most bytes the pool keeps ($PYJLAD_POOL_BYTES)
;   ${min_class}, ${max_class}   log2 of the smallest and largest block size kept
;   ${slots}       blocks kept per size; ${classes} sizes kept; ${slot_count} = classes * slots
;   ${small_capacity}  most bytes of small blocks each thread keeps
;   ${small_classes}   sizes of small blocks kept: 2^4 .. 2^(min_class - 1)
;   ${small_bytes}     2^(min_class - 1), the largest small block (larger requests take 2^min_class)
; Filled with the values pyjlad uses, it is a valid LLVM 15 module (tests/test_runtime_ll.py
; assembles it with llvm-as-15).

@pool = internal global [${classes} x [${slots} x ptr]] zeroinitializer
@pool_bytes = internal global i64 0
@pool_mutex = internal global i32 0

; Each thread's lists of small blocks (see @small_cache below).
%small_cache = type { i32, i64, ptr, [${small_classes} x ptr] }

declare ptr @malloc(i64)
declare ptr @calloc(i64, i64)
declare void @free(ptr)
declare { i64, i1 } @llvm.umul.with.overflow.i64(i64, i64)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
declare i64 @malloc_usable_size(ptr)
declare i64 @llvm.ctlz.i64(i64, i1)
declare ptr @pthread_getspecific(i32)
declare i32 @pthread_setspecific(i32, ptr)
declare i32 @pthread_key_create(ptr, ptr)
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

; A request of %bytes that failed: remember its size and, where a driver armed the exit on this
; thread, jump there; otherwise return.
define internal void @pool_failed(i64 %bytes) {
entry:
  store atomic i64 %bytes, ptr @pool_failed_bytes monotonic, align 8
  %jb = call ptr @pthread_getspecific(i32 ${key})
  %armed = icmp ne ptr %jb, null
  br i1 %armed, label %jump, label %back
jump:
  call void @longjmp(ptr %jb, i32 1)
  unreachable
back:
  ret void
}

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
check:
  call void @pool_failed(i64 %bytes)
  br label %ok
ok:
  ret ptr %p
}

; Called by Numba's allocators (NRT_MemInfo_alloc_*) first, in a derivative whose driver armed the exit
; (pyjlad.allocation_exits): a request of 2^47 bytes or more, which pool_checked lets through as null, jumps
; there too, so that no allocation of Numba's returns null in such a derivative. Not armed, it returns.
define void @pyjlad_oom_check(i64 %bytes) {
entry:
  %huge = icmp uge i64 %bytes, 140737488355328
  br i1 %huge, label %check, label %back
check:
  call void @pool_failed(i64 %bytes)
  br label %back
back:
  ret void
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
  %small = icmp ule i64 %size, ${small_bytes}
  br i1 %small, label %cached, label %classify
cached:
  %c = call ptr @small_malloc(i64 %size)
  ret ptr %c
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
  br i1 %overflow, label %libc, label %pooled
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

; Enzyme grows the caches of loops of unknown trip count with realloc: a block that is too small
; is replaced by one of the pool's (so that its size is one the pool's requests reuse), a block
; large enough is kept. realloc(p, 0) frees p and returns null, as glibc's does.
define ptr @pyjlad_pool_realloc(ptr %p, i64 %size) {
entry:
  %null = icmp eq ptr %p, null
  br i1 %null, label %fresh, label %sized
fresh:
  %f = call ptr @pyjlad_pool_malloc(i64 %size)
  ret ptr %f
sized:
  %zero = icmp eq i64 %size, 0
  br i1 %zero, label %release, label %compare
release:
  call void @pyjlad_pool_free(ptr %p)
  ret ptr null
compare:
  %usable = call i64 @malloc_usable_size(ptr %p)
  %fits = icmp ule i64 %size, %usable
  br i1 %fits, label %same, label %move
same:
  ret ptr %p
move:
  %q = call ptr @pyjlad_pool_malloc(i64 %size)
  %failed = icmp eq ptr %q, null
  br i1 %failed, label %out, label %copy
copy:
  call void @llvm.memcpy.p0.p0.i64(ptr %q, ptr %p, i64 %usable, i1 false)
  call void @pyjlad_pool_free(ptr %p)
  br label %out
out:
  ret ptr %q
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
  %small = icmp ult i64 %class, ${min_class}
  br i1 %small, label %cached, label %large
cached:
  call void @small_free(ptr %p, i64 %class)
  ret void
large:
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
  %first = load ptr, ptr @small_caches, align 8
  br label %caches
caches:
  %cache = phi ptr [ %first, %out ], [ %later, %drain ]
  %end = icmp eq ptr %cache, null
  br i1 %end, label %done, label %drain
drain:
  call void @small_lock(ptr %cache)
  call void @small_drain(ptr %cache)
  call void @small_unlock(ptr %cache)
  %link = getelementptr %small_cache, ptr %cache, i32 0, i32 2
  %later = load ptr, ptr %link, align 8
  br label %caches
done:
  call void @pool_unlock()
  ret void
}

; Small blocks: each thread's freed blocks of 2^4 .. 2^(min_class - 1) bytes, in one singly linked
; list per size threaded through the blocks' first 8 bytes. A thread's lists are its own: only
; pyjlad_pool_release (any thread) and the thread's exit (a pthread key destructor) touch them
; from elsewhere, so the lock of each thread's lists is taken by its thread alone, uncontended.
; Every thread's lists are on @small_caches (guarded by pool_lock) for pyjlad_pool_release.
;   %small_cache: { i32 lock, i64 bytes kept, ptr next thread's lists, [small_classes x ptr] list heads }

@small_key = internal global i32 0
@small_caches = internal global ptr null

; Made once, by pyjlad.engines.pool after loading this module: the key of each thread's lists.
define i32 @pyjlad_pool_init() {
entry:
  %r = call i32 @pthread_key_create(ptr @small_key, ptr @small_exit)
  ret i32 %r
}

define internal void @small_lock(ptr %cache) {
entry:
  br label %spin
spin:
  %r = cmpxchg weak ptr %cache, i32 0, i32 1 acquire monotonic
  %ok = extractvalue { i32, i1 } %r, 1
  br i1 %ok, label %done, label %spin
done:
  ret void
}

define internal void @small_unlock(ptr %cache) {
entry:
  store atomic i32 0, ptr %cache release, align 4
  ret void
}

; The calling thread's lists, made on its first use; null if they cannot be made.
define internal ptr @small_cache() {
entry:
  %key = load i32, ptr @small_key, align 4
  %cache = call ptr @pthread_getspecific(i32 %key)
  %none = icmp eq ptr %cache, null
  br i1 %none, label %make, label %done
done:
  ret ptr %cache
make:
  %size = getelementptr %small_cache, ptr null, i32 1
  %bytes = ptrtoint ptr %size to i64
  %new = call ptr @calloc(i64 1, i64 %bytes)
  %failed = icmp eq ptr %new, null
  br i1 %failed, label %done, label %register
register:
  %r = call i32 @pthread_setspecific(i32 %key, ptr %new)
  %set = icmp eq i32 %r, 0
  br i1 %set, label %link, label %unmade
unmade:
  call void @free(ptr %new)
  ret ptr null
link:
  call void @pool_lock()
  %head = load ptr, ptr @small_caches, align 8
  %next = getelementptr %small_cache, ptr %new, i32 0, i32 2
  store ptr %head, ptr %next, align 8
  store ptr %new, ptr @small_caches, align 8
  call void @pool_unlock()
  ret ptr %new
}

; Called with %cache's lock held: return every block of its lists to the C library.
define internal void @small_drain(ptr %cache) {
entry:
  br label %class
class:
  %k = phi i64 [ 0, %entry ], [ %next, %emptied ]
  %slot = getelementptr %small_cache, ptr %cache, i32 0, i32 3, i64 %k
  %first = load ptr, ptr %slot, align 8
  store ptr null, ptr %slot, align 8
  br label %walk
walk:
  %block = phi ptr [ %first, %class ], [ %after, %release ]
  %end = icmp eq ptr %block, null
  br i1 %end, label %emptied, label %release
release:
  %after = load ptr, ptr %block, align 8
  call void @free(ptr %block)
  br label %walk
emptied:
  %next = add i64 %k, 1
  %more = icmp ult i64 %next, ${small_classes}
  br i1 %more, label %class, label %out
out:
  %kept = getelementptr %small_cache, ptr %cache, i32 0, i32 1
  store i64 0, ptr %kept, align 8
  ret void
}

; A thread's exit (the destructor of @small_key): its lists leave @small_caches and are emptied.
define internal void @small_exit(ptr %cache) {
entry:
  call void @pool_lock()
  br label %find
find:
  %link = phi ptr [ @small_caches, %entry ], [ %next, %step ]
  %at = load ptr, ptr %link, align 8
  %missing = icmp eq ptr %at, null
  br i1 %missing, label %unlinked, label %compare
compare:
  %here = icmp eq ptr %at, %cache
  %next = getelementptr %small_cache, ptr %at, i32 0, i32 2
  br i1 %here, label %unlink, label %step
step:
  br label %find
unlink:
  %after = load ptr, ptr %next, align 8
  store ptr %after, ptr %link, align 8
  br label %unlinked
unlinked:
  call void @pool_unlock()
  call void @small_lock(ptr %cache)
  call void @small_drain(ptr %cache)
  call void @free(ptr %cache)
  ret void
}

define internal ptr @small_malloc(i64 %size) {
entry:
  %tiny = icmp ult i64 %size, 17
  %m1 = sub i64 %size, 1
  %lz = call i64 @llvm.ctlz.i64(i64 %m1, i1 false)
  %fit = sub i64 64, %lz
  %class = select i1 %tiny, i64 4, i64 %fit
  %bytes = shl i64 1, %class
  %cache = call ptr @small_cache()
  %none = icmp eq ptr %cache, null
  br i1 %none, label %fresh, label %locked
locked:
  %index = sub i64 %class, 4
  %slot = getelementptr %small_cache, ptr %cache, i32 0, i32 3, i64 %index
  call void @small_lock(ptr %cache)
  %block = load ptr, ptr %slot, align 8
  %miss = icmp eq ptr %block, null
  br i1 %miss, label %unlock, label %take
take:
  %next = load ptr, ptr %block, align 8
  store ptr %next, ptr %slot, align 8
  %kept = getelementptr %small_cache, ptr %cache, i32 0, i32 1
  %held = load i64, ptr %kept, align 8
  %left = sub i64 %held, %bytes
  store i64 %left, ptr %kept, align 8
  call void @small_unlock(ptr %cache)
  ret ptr %block
unlock:
  call void @small_unlock(ptr %cache)
  br label %fresh
fresh:
  %new0 = call ptr @malloc(i64 %bytes)
  %new = call ptr @pool_checked(ptr %new0, i64 %bytes)
  ret ptr %new
}

; %p (a malloc block of at least 2^%class usable bytes, %class < min_class) into the calling
; thread's lists, or back to the C library when they are full or %p is under 16 bytes.
define internal void @small_free(ptr %p, i64 %class) {
entry:
  %tiny = icmp ult i64 %class, 4
  br i1 %tiny, label %release, label %find
find:
  %cache = call ptr @small_cache()
  %none = icmp eq ptr %cache, null
  br i1 %none, label %release, label %locked
locked:
  %bytes = shl i64 1, %class
  call void @small_lock(ptr %cache)
  %kept = getelementptr %small_cache, ptr %cache, i32 0, i32 1
  %held = load i64, ptr %kept, align 8
  %after = add i64 %held, %bytes
  %full = icmp ugt i64 %after, ${small_capacity}
  br i1 %full, label %unlock, label %keep
keep:
  %index = sub i64 %class, 4
  %slot = getelementptr %small_cache, ptr %cache, i32 0, i32 3, i64 %index
  %head = load ptr, ptr %slot, align 8
  store ptr %head, ptr %p, align 8
  store ptr %p, ptr %slot, align 8
  store i64 %after, ptr %kept, align 8
  call void @small_unlock(ptr %cache)
  ret void
unlock:
  call void @small_unlock(ptr %cache)
  br label %release
release:
  call void @free(ptr %p)
  ret void
}

; Bytes of small blocks all threads keep now.
define i64 @pyjlad_pool_small_kept() {
entry:
  call void @pool_lock()
  %first = load ptr, ptr @small_caches, align 8
  br label %walk
walk:
  %cache = phi ptr [ %first, %entry ], [ %next, %add ]
  %sum = phi i64 [ 0, %entry ], [ %total, %add ]
  %end = icmp eq ptr %cache, null
  br i1 %end, label %done, label %add
add:
  call void @small_lock(ptr %cache)
  %kept = getelementptr %small_cache, ptr %cache, i32 0, i32 1
  %held = load i64, ptr %kept, align 8
  call void @small_unlock(ptr %cache)
  %total = add i64 %sum, %held
  %link = getelementptr %small_cache, ptr %cache, i32 0, i32 2
  %next = load ptr, ptr %link, align 8
  br label %walk
done:
  call void @pool_unlock()
  ret i64 %sum
}
