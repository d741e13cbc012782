; Numba runtime (NRT) replacements for differentiated code.
;
; Loaded by pyjlad.runtime into pyjlad.portable.PORTABLE_RUNTIME: make_portable copies each
; definition below (and the declarations it needs, in place of Numba's) into a portable module
; when Numba's IR calls the NRT function of the same name. A valid LLVM 15 module (opaque
; pointers); tests/test_runtime_ll.py assembles it with llvm-as-15.
;
; Why: Numba's own NRT_incref/NRT_decref use x86-specific intrinsics, and its allocator
; (NRT_MemInfo_alloc_aligned in numba/core/runtime/nrt.cpp) is an opaque C function whose
; result (a MemInfo whose `data` field points into the same block) Enzyme cannot shadow.
; These definitions have the same semantics and the same memory layout as nrt.cpp:
;   struct MemInfo { size_t refct; dtor; dtor_info; void *data; size_t size;
;                    external_allocator; }                        (48 bytes)
; allocated in one malloc'ed block with the data after the header and dtor = NULL, so a
; MemInfo made here is freed correctly by Numba's runtime and vice versa. Enzyme sees malloc
; and free, so it shadows temporaries and keeps them alive until the reverse pass needs them.
; A MemInfo with a destructor (e.g. one wrapping a NumPy array owned by Python) is handed to
; Numba's own NRT_MemInfo_call_dtor, exported under the name @pyjlad_NRT_MemInfo_call_dtor
; (pyjlad.portable.RUNTIME_CALL_DTOR, resolved by the engine that loads the module).
;
; What each function replaces (Numba's function of the same name unless said otherwise):
;   @NRT_incref, @NRT_decref      reference counting (atomic add/sub on `refct`)
;   @NRT_MemInfo_call_dtor        frees a plain block itself, else calls Numba's destructor; a grown list's data too
;   @NRT_MemInfo_alloc_aligned,   a MemInfo and its data in one malloc'ed block (all five
;   @NRT_MemInfo_alloc_safe_aligned,  share one body; only the parameter list differs)
;   @NRT_MemInfo_alloc, @NRT_MemInfo_new_varsize, @NRT_MemInfo_new_varsize_dtor
;   @NRT_Allocate, @NRT_Free      raw malloc/free (formatting of exception messages)
;   @NRT_MemInfo_alloc_zeroed     pyjlad's own: a zeroed block (calloc), see pyjlad.zeroed_allocations
;   @pyjlad_list_realloc.<kind>   pyjlad's own: NRT_MemInfo_varsize_realloc of a list whose items are of
;                                 one kind (pyjlad.list_growth), the grown data in a block of its own
;   @pyjlad_varsize_dtor          pyjlad's own: the destructor of such a MemInfo (frees the grown data)
;   @NRT_MemInfo_varsize_alloc,   a set's new table, in a block of its own (its MemInfo's dtor then
;   @NRT_MemInfo_varsize_free     @pyjlad_varsize_dtor); the old table released
;
; The data follows the 48-byte header, so it is 16-byte aligned (malloc's guarantee) rather
; than `align`-aligned: Numba's IR never assumes more than the element alignment (8 bytes),
; and integer arithmetic on the address to round it up would make the pointer opaque to
; Enzyme's type analysis. The block is as large as Numba's would be, so NRT's view of `size`
; stays exact.

; Inactive: a reference count is an integer no derivative flows through; without the
; attribute Enzyme may take the meminfo (reached through an array struct it shadows) for
; active memory and refuse the atomic add ("Active atomic inst not yet handled").
define linkonce_odr void @NRT_incref(ptr %mi) nofree nounwind "enzyme_inactive" {
entry:
  %isnull = icmp eq ptr %mi, null
  br i1 %isnull, label %done, label %inc
inc:
  %old = atomicrmw add ptr %mi, i64 1 monotonic, align 8
  br label %done
done:
  ret void
}

; Stays visible to Enzyme: it frees, and Enzyme must defer frees to the reverse sweep.
define linkonce_odr void @NRT_decref(ptr %mi) {
entry:
  %isnull = icmp eq ptr %mi, null
  br i1 %isnull, label %done, label %dec
dec:
  %old = atomicrmw sub ptr %mi, i64 1 release, align 8
  %last = icmp eq i64 %old, 1
  br i1 %last, label %free, label %done
free:
  fence acquire
  call void @NRT_MemInfo_call_dtor(ptr %mi)
  br label %done
done:
  ret void
}

define linkonce_odr void @NRT_MemInfo_call_dtor(ptr %mi) {
entry:
  %dtorfield = getelementptr i8, ptr %mi, i64 8
  %dtor = load ptr, ptr %dtorfield, align 8
  %externalfield = getelementptr i8, ptr %mi, i64 40
  %external = load ptr, ptr %externalfield, align 8
  %nodtor = icmp eq ptr %dtor, null
  %noexternal = icmp eq ptr %external, null
  %plain = and i1 %nodtor, %noexternal
  br i1 %plain, label %own, label %grown
own:
  call void @free(ptr %mi)
  ret void
grown:
  %moved = icmp eq ptr %dtor, @pyjlad_varsize_dtor
  %movedhere = and i1 %moved, %noexternal
  br i1 %movedhere, label %ownmoved, label %runtime
ownmoved:
  %movedfield = getelementptr i8, ptr %mi, i64 24
  %moveddata = load ptr, ptr %movedfield, align 8
  call void @free(ptr %moveddata)
  call void @free(ptr %mi)
  ret void
runtime:
  call void @pyjlad_NRT_MemInfo_call_dtor(ptr %mi)
  ret void
}

; Numba's allocator (NRT_MemInfo_alloc_aligned, NRT_MemInfo_alloc_safe_aligned,
; NRT_MemInfo_alloc): header and data in one malloc'ed block, dtor = NULL. A request of 2^47 bytes or
; more (beyond any address space) is refused as null without asking malloc: the pool lets such a malloc
; through as null, and Enzyme's shadow of the block would have been written through it.
define linkonce_odr ptr @NRT_MemInfo_alloc_aligned(i64 %size, i32 %align) {
entry:
  %huge = icmp uge i64 %size, 140737488355328
  br i1 %huge, label %fail, label %request
request:
  %total = add i64 %size, 48
  %mi = call ptr @malloc(i64 %total)
  %failed = icmp eq ptr %mi, null
  br i1 %failed, label %fail, label %init
fail:
  ret ptr null
init:
  %data = getelementptr i8, ptr %mi, i64 48
  store i64 1, ptr %mi, align 8
  %dtor = getelementptr i8, ptr %mi, i64 8
  store ptr null, ptr %dtor, align 8
  %info = getelementptr i8, ptr %mi, i64 16
  store ptr null, ptr %info, align 8
  %datafield = getelementptr i8, ptr %mi, i64 24
  store ptr %data, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  store i64 %size, ptr %sizefield, align 8
  %external = getelementptr i8, ptr %mi, i64 40
  store ptr null, ptr %external, align 8
  ret ptr %mi
}

define linkonce_odr ptr @NRT_MemInfo_alloc_safe_aligned(i64 %size, i32 %align) {
entry:
  %huge = icmp uge i64 %size, 140737488355328
  br i1 %huge, label %fail, label %request
request:
  %total = add i64 %size, 48
  %mi = call ptr @malloc(i64 %total)
  %failed = icmp eq ptr %mi, null
  br i1 %failed, label %fail, label %init
fail:
  ret ptr null
init:
  %data = getelementptr i8, ptr %mi, i64 48
  store i64 1, ptr %mi, align 8
  %dtor = getelementptr i8, ptr %mi, i64 8
  store ptr null, ptr %dtor, align 8
  %info = getelementptr i8, ptr %mi, i64 16
  store ptr null, ptr %info, align 8
  %datafield = getelementptr i8, ptr %mi, i64 24
  store ptr %data, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  store i64 %size, ptr %sizefield, align 8
  %external = getelementptr i8, ptr %mi, i64 40
  store ptr null, ptr %external, align 8
  ret ptr %mi
}

; pyjlad's own (pyjlad.zeroed_allocations, not Numba's): a MemInfo whose data starts at zero, for
; an allocation Numba's code zeroes right away (np.zeros); calloc, whose block and shadow Enzyme
; knows start at zero, in place of malloc and a fill Enzyme would have to type. The header's
; dtor, dtor_info and external_allocator fields are the zeros calloc wrote.
define linkonce_odr ptr @NRT_MemInfo_alloc_zeroed(i64 %size, i32 %align) {
entry:
  %huge = icmp uge i64 %size, 140737488355328
  br i1 %huge, label %fail, label %request
request:
  %total = add i64 %size, 48
  %mi = call ptr @calloc(i64 1, i64 %total)
  %failed = icmp eq ptr %mi, null
  br i1 %failed, label %fail, label %init
fail:
  ret ptr null
init:
  %data = getelementptr i8, ptr %mi, i64 48
  store i64 1, ptr %mi, align 8
  %datafield = getelementptr i8, ptr %mi, i64 24
  store ptr %data, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  store i64 %size, ptr %sizefield, align 8
  ret ptr %mi
}

; Raw allocation and a MemInfo of Numba's default allocator (dtor NULL), used by runtime code
; such as the formatting of exception messages.
define linkonce_odr ptr @NRT_Allocate(i64 %size) {
entry:
  %p = call ptr @malloc(i64 %size)
  ret ptr %p
}

define linkonce_odr void @NRT_Free(ptr %p) {
entry:
  call void @free(ptr %p)
  ret void
}

define linkonce_odr ptr @NRT_MemInfo_alloc(i64 %size) {
entry:
  %huge = icmp uge i64 %size, 140737488355328
  br i1 %huge, label %fail, label %request
request:
  %total = add i64 %size, 48
  %mi = call ptr @malloc(i64 %total)
  %failed = icmp eq ptr %mi, null
  br i1 %failed, label %fail, label %init
fail:
  ret ptr null
init:
  %data = getelementptr i8, ptr %mi, i64 48
  store i64 1, ptr %mi, align 8
  %dtor = getelementptr i8, ptr %mi, i64 8
  store ptr null, ptr %dtor, align 8
  %info = getelementptr i8, ptr %mi, i64 16
  store ptr null, ptr %info, align 8
  %datafield = getelementptr i8, ptr %mi, i64 24
  store ptr %data, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  store i64 %size, ptr %sizefield, align 8
  %external = getelementptr i8, ptr %mi, i64 40
  store ptr null, ptr %external, align 8
  ret ptr %mi
}

; A variable-size buffer (Numba's copies in np.linalg): the same block layout; with
; dtor = NULL, Numba's runtime frees it like any other.
define linkonce_odr ptr @NRT_MemInfo_new_varsize(i64 %size) {
entry:
  %huge = icmp uge i64 %size, 140737488355328
  br i1 %huge, label %fail, label %request
request:
  %total = add i64 %size, 48
  %mi = call ptr @malloc(i64 %total)
  %failed = icmp eq ptr %mi, null
  br i1 %failed, label %fail, label %init
fail:
  ret ptr null
init:
  %data = getelementptr i8, ptr %mi, i64 48
  store i64 1, ptr %mi, align 8
  %dtor = getelementptr i8, ptr %mi, i64 8
  store ptr null, ptr %dtor, align 8
  %info = getelementptr i8, ptr %mi, i64 16
  store ptr null, ptr %info, align 8
  %datafield = getelementptr i8, ptr %mi, i64 24
  store ptr %data, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  store i64 %size, ptr %sizefield, align 8
  %external = getelementptr i8, ptr %mi, i64 40
  store ptr null, ptr %external, align 8
  ret ptr %mi
}

; ... and with an element destructor (a list's, a set's), which only matters for containers of
; reference-counted items (strings); it is not kept, so such items would leak, never be freed twice.
define linkonce_odr ptr @NRT_MemInfo_new_varsize_dtor(i64 %size, ptr %element_dtor) {
entry:
  %huge = icmp uge i64 %size, 140737488355328
  br i1 %huge, label %fail, label %request
request:
  %total = add i64 %size, 48
  %mi = call ptr @malloc(i64 %total)
  %failed = icmp eq ptr %mi, null
  br i1 %failed, label %fail, label %init
fail:
  ret ptr null
init:
  %data = getelementptr i8, ptr %mi, i64 48
  store i64 1, ptr %mi, align 8
  %dtor = getelementptr i8, ptr %mi, i64 8
  store ptr null, ptr %dtor, align 8
  %info = getelementptr i8, ptr %mi, i64 16
  store ptr null, ptr %info, align 8
  %datafield = getelementptr i8, ptr %mi, i64 24
  store ptr %data, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  store i64 %size, ptr %sizefield, align 8
  %external = getelementptr i8, ptr %mi, i64 40
  store ptr null, ptr %external, align 8
  ret ptr %mi
}

; Growing a list (pyjlad_list_realloc.<kind> below) or a set (NRT_MemInfo_varsize_alloc). The first data area follows the header (above); a grown one is
; a block of its own, malloc'ed, its contents copied with memcpy (Enzyme copies and adds back the
; shadow's contents the same way), and the MemInfo's dtor becomes @pyjlad_varsize_dtor, which
; frees the data area: NRT_MemInfo_call_dtor above frees both blocks itself, and Numba's runtime
; (NRT_MemInfo_call_dtor in nrt.cpp calls dtor(data, size, info), then frees the MemInfo) does
; the same. The element destructor of NRT_MemInfo_new_varsize_dtor is not kept (see there).
define linkonce_odr void @pyjlad_varsize_dtor(ptr %data, i64 %size, ptr %info) {
entry:
  call void @free(ptr %data)
  ret void
}

; A set's new table (Numba's NRT_MemInfo_varsize_alloc: a set that grows, and the set Numba builds to
; check an axis order, np.transpose(x, axes) and np.swapaxes): a block of its own, malloc'ed, as for a
; grown list; the old table stays until NRT_MemInfo_varsize_free below releases it (Numba copies the
; entries between the two calls).
define linkonce_odr ptr @NRT_MemInfo_varsize_alloc(ptr %mi, i64 %size) {
entry:
  %huge = icmp uge i64 %size, 140737488355328
  br i1 %huge, label %fail, label %request
request:
  %data = call ptr @malloc(i64 %size)
  %failed = icmp eq ptr %data, null
  br i1 %failed, label %fail, label %init
fail:
  ret ptr null
init:
  %dtorfield = getelementptr i8, ptr %mi, i64 8
  store ptr @pyjlad_varsize_dtor, ptr %dtorfield, align 8
  %datafield = getelementptr i8, ptr %mi, i64 24
  store ptr %data, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  store i64 %size, ptr %sizefield, align 8
  ret ptr %data
}

; Releases a set's old table: freed unless it is the first one, which follows the header in the
; MemInfo's own block; the MemInfo forgets it if it was its data (as Numba's does).
define linkonce_odr void @NRT_MemInfo_varsize_free(ptr %mi, ptr %ptr) {
entry:
  %first = getelementptr i8, ptr %mi, i64 48
  %wasfirst = icmp eq ptr %ptr, %first
  br i1 %wasfirst, label %forget, label %release
release:
  call void @free(ptr %ptr)
  br label %forget
forget:
  %datafield = getelementptr i8, ptr %mi, i64 24
  %data = load ptr, ptr %datafield, align 8
  %current = icmp eq ptr %data, %ptr
  br i1 %current, label %clear, label %done
clear:
  store ptr null, ptr %datafield, align 8
  br label %done
done:
  ret void
}

; A list's growth (Numba's NRT_MemInfo_varsize_realloc, which pyjlad.list_growth rewrites into these where
; it can tell the kind of the list's items; elsewhere it stays undefined, and Enzyme refuses it): the payload
; copied in two parts, the header (%header bytes: size, allocated, dirty) and the items, so that Enzyme can
; type each copy (pyjlad.list_growth.hint_list_types adds its type hints before each memcpy). One definition
; per item kind, the same body.
define linkonce_odr ptr @pyjlad_list_realloc.double(ptr %mi, i64 %size, i64 %header) {
entry:
  %huge = icmp uge i64 %size, 140737488355328
  br i1 %huge, label %fail, label %request
request:
  %data = call ptr @malloc(i64 %size)
  %failed = icmp eq ptr %data, null
  br i1 %failed, label %fail, label %copy
fail:
  ret ptr null
copy:
  %datafield = getelementptr i8, ptr %mi, i64 24
  %old = load ptr, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  %oldsize = load i64, ptr %sizefield, align 8
  %kept = call i64 @llvm.umin.i64(i64 %oldsize, i64 %size)
  call void @llvm.memcpy.p0.p0.i64(ptr align 1 %data, ptr align 1 %old, i64 %header, i1 false)
  %items = getelementptr i8, ptr %data, i64 %header
  %olditems = getelementptr i8, ptr %old, i64 %header
  %itembytes = sub i64 %kept, %header
  call void @llvm.memcpy.p0.p0.i64(ptr align 1 %items, ptr align 1 %olditems, i64 %itembytes, i1 false)
  %first = getelementptr i8, ptr %mi, i64 48
  %wasfirst = icmp eq ptr %old, %first
  br i1 %wasfirst, label %init, label %release
release:
  call void @free(ptr %old)
  br label %init
init:
  %dtorfield = getelementptr i8, ptr %mi, i64 8
  store ptr @pyjlad_varsize_dtor, ptr %dtorfield, align 8
  store ptr %data, ptr %datafield, align 8
  store i64 %size, ptr %sizefield, align 8
  ret ptr %data
}

define linkonce_odr ptr @pyjlad_list_realloc.float(ptr %mi, i64 %size, i64 %header) {
entry:
  %huge = icmp uge i64 %size, 140737488355328
  br i1 %huge, label %fail, label %request
request:
  %data = call ptr @malloc(i64 %size)
  %failed = icmp eq ptr %data, null
  br i1 %failed, label %fail, label %copy
fail:
  ret ptr null
copy:
  %datafield = getelementptr i8, ptr %mi, i64 24
  %old = load ptr, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  %oldsize = load i64, ptr %sizefield, align 8
  %kept = call i64 @llvm.umin.i64(i64 %oldsize, i64 %size)
  call void @llvm.memcpy.p0.p0.i64(ptr align 1 %data, ptr align 1 %old, i64 %header, i1 false)
  %items = getelementptr i8, ptr %data, i64 %header
  %olditems = getelementptr i8, ptr %old, i64 %header
  %itembytes = sub i64 %kept, %header
  call void @llvm.memcpy.p0.p0.i64(ptr align 1 %items, ptr align 1 %olditems, i64 %itembytes, i1 false)
  %first = getelementptr i8, ptr %mi, i64 48
  %wasfirst = icmp eq ptr %old, %first
  br i1 %wasfirst, label %init, label %release
release:
  call void @free(ptr %old)
  br label %init
init:
  %dtorfield = getelementptr i8, ptr %mi, i64 8
  store ptr @pyjlad_varsize_dtor, ptr %dtorfield, align 8
  store ptr %data, ptr %datafield, align 8
  store i64 %size, ptr %sizefield, align 8
  ret ptr %data
}

define linkonce_odr ptr @pyjlad_list_realloc.integer(ptr %mi, i64 %size, i64 %header) {
entry:
  %huge = icmp uge i64 %size, 140737488355328
  br i1 %huge, label %fail, label %request
request:
  %data = call ptr @malloc(i64 %size)
  %failed = icmp eq ptr %data, null
  br i1 %failed, label %fail, label %copy
fail:
  ret ptr null
copy:
  %datafield = getelementptr i8, ptr %mi, i64 24
  %old = load ptr, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  %oldsize = load i64, ptr %sizefield, align 8
  %kept = call i64 @llvm.umin.i64(i64 %oldsize, i64 %size)
  call void @llvm.memcpy.p0.p0.i64(ptr align 1 %data, ptr align 1 %old, i64 %header, i1 false)
  %items = getelementptr i8, ptr %data, i64 %header
  %olditems = getelementptr i8, ptr %old, i64 %header
  %itembytes = sub i64 %kept, %header
  call void @llvm.memcpy.p0.p0.i64(ptr align 1 %items, ptr align 1 %olditems, i64 %itembytes, i1 false)
  %first = getelementptr i8, ptr %mi, i64 48
  %wasfirst = icmp eq ptr %old, %first
  br i1 %wasfirst, label %init, label %release
release:
  call void @free(ptr %old)
  br label %init
init:
  %dtorfield = getelementptr i8, ptr %mi, i64 8
  store ptr @pyjlad_varsize_dtor, ptr %dtorfield, align 8
  store ptr %data, ptr %datafield, align 8
  store i64 %size, ptr %sizefield, align 8
  ret ptr %data
}

define linkonce_odr ptr @pyjlad_list_realloc.pointer(ptr %mi, i64 %size, i64 %header) {
entry:
  %huge = icmp uge i64 %size, 140737488355328
  br i1 %huge, label %fail, label %request
request:
  %data = call ptr @malloc(i64 %size)
  %failed = icmp eq ptr %data, null
  br i1 %failed, label %fail, label %copy
fail:
  ret ptr null
copy:
  %datafield = getelementptr i8, ptr %mi, i64 24
  %old = load ptr, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  %oldsize = load i64, ptr %sizefield, align 8
  %kept = call i64 @llvm.umin.i64(i64 %oldsize, i64 %size)
  call void @llvm.memcpy.p0.p0.i64(ptr align 1 %data, ptr align 1 %old, i64 %header, i1 false)
  %items = getelementptr i8, ptr %data, i64 %header
  %olditems = getelementptr i8, ptr %old, i64 %header
  %itembytes = sub i64 %kept, %header
  call void @llvm.memcpy.p0.p0.i64(ptr align 1 %items, ptr align 1 %olditems, i64 %itembytes, i1 false)
  %first = getelementptr i8, ptr %mi, i64 48
  %wasfirst = icmp eq ptr %old, %first
  br i1 %wasfirst, label %init, label %release
release:
  call void @free(ptr %old)
  br label %init
init:
  %dtorfield = getelementptr i8, ptr %mi, i64 8
  store ptr @pyjlad_varsize_dtor, ptr %dtorfield, align 8
  store ptr %data, ptr %datafield, align 8
  store i64 %size, ptr %sizefield, align 8
  ret ptr %data
}

; Declarations the definitions above need. The runtime destructor is marked inactive for
; Enzyme (a string attribute other LLVM consumers ignore) and `nofree`: it is reached only for
; MemInfos whose destructor belongs to Numba's runtime (objects owned outside the
; differentiated code, such as NumPy arrays passed in by Python, which are alive for the whole
; call), never for the temporaries whose frees Enzyme must postpone to the reverse pass.
declare noalias ptr @malloc(i64)
declare noalias ptr @calloc(i64, i64)
declare void @free(ptr)
declare i64 @llvm.umin.i64(i64, i64)
declare void @llvm.memcpy.p0.p0.i64(ptr noalias nocapture writeonly, ptr noalias nocapture readonly, i64, i1 immarg)
declare void @pyjlad_NRT_MemInfo_call_dtor(ptr) nofree "enzyme_inactive"
