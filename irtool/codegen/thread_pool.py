"""The thread pool that runs `parallel` loops, as LLVM IR text carried by every threaded module
(`internal`: an object brings its own copy and links with `cc ... -pthread`; no C runtime file).

`@irtool_parallel_for(fn, closure, begin, end, threads)` runs `fn(closure, lo, hi)` over chunks
of `[begin, end)` (4 per participant, contiguous, sizes differing by at most one) and returns 0
or the status of a failing chunk (a failed `assert` inside the loop).

- **Started once, lazily.** The first call that takes the pool creates `threads - 1` workers
  (`pthread_create`); a worker that cannot be created leaves the pool smaller, and a pool of no
  workers runs every loop serially: running out of threads is never an error.
- **One job at a time.** A call takes the pool with a compare-and-swap on `busy`; a call that
  finds it taken (another C thread is in a parallel loop of this module) runs its loop serially
  on its own thread, so concurrent callers neither wait for each other nor deadlock.
- **Awake during an inference, parked between inferences.** The caller publishes the job (in the
  pool's globals) by bumping `generation` and works on it too: every participant claims the next
  chunk with an atomic increment until none is left, so a worker the scheduler runs late finds
  nothing left instead of holding the caller up. A module's `_run` is a *section*
  (`@irtool_pool_enter` / `@irtool_pool_leave` around it, `with_sections`): entering counts it
  in `sections` and wakes sleeping workers at once, without waiting for them, so their wake-up
  (tens of microseconds to milliseconds on a VM) overlaps the inference's first serial work.
  While any section is open an idle worker polls `generation` with `sched_yield` and never
  sleeps (each round hands the core to whoever else is runnable on a loaded host); otherwise it
  polls `SPIN_YIELDS` rounds (loops called outside `_run`, and the moment after an inference)
  and then sleeps on a pthread condition variable. Whoever makes a sleeper's reason to wake
  true (a new generation, a section, `stop`) reads `sleepers` after writing it and signals only
  if some worker sleeps; the worker counts itself in `sleepers` before it checks the reasons:
  both sides use sequentially consistent atomics, so one of them sees the other. Sections are
  counted, so runs from several C threads at once nest and overlap freely.
- **Closing a job.** When every chunk is done the caller sets `closed` and waits until no worker
  is inside the job (`active`): a worker counts itself in, then reads `closed`, and leaves
  without touching the job when it is set. Only then may the next job overwrite the fields.
- **Shutdown.** `@irtool_pool_shutdown` is in `llvm.global_dtors`: it runs at `exit` and
  `dlclose` in C programs, and `irtool.runtime.native` calls it (`run_static_destructors`)
  before the process drops a JIT engine whose code parked workers would return into. The first
  call sets `stop`, takes the pool for good (later loops run serially), wakes and joins the
  workers; later calls return at once.
- **fork.** The pool records the process that started it (`getpid`): a forked child starts its
  own workers (re-initialising the mutex and condition variable, which may have been copied
  locked) and shutdown never joins another process's threads. A child forked while another of
  the parent's threads held the pool runs its loops serially; one forked while another thread
  was inside `_run` inherits that open section, so its workers poll rather than park.

ABI facts used here (documented assumptions, not portable C): `pthread_t` is 8 bytes (x86-64
and AArch64 glibc and musl: `unsigned long`); `pthread_mutex_t` and `pthread_cond_t` live in
opaque 64-byte, 64-aligned storage, which covers x86-64 glibc (40 and 48 bytes, 8-aligned),
AArch64 glibc (48 and 48), musl (40 and 48) and macOS (64 and 48), and are initialised with
`pthread_mutex_init`/`pthread_cond_init`, never by a static initializer's bit pattern.
"""

from __future__ import annotations

from irtool.tir_transform.parallel import CHUNKS_PER_THREAD

RUNTIME = "irtool_parallel_for"
SHUTDOWN = "irtool_pool_shutdown"
ENTER, LEAVE = "irtool_pool_enter", "irtool_pool_leave"
# Rounds of `sched_yield` an idle worker polls outside sections before it sleeps: about 0.3-1 ms
# on an idle core (one syscall each), enough to bridge the serial code between parallel loops
# called outside `_run`; on a loaded host each round hands the core to whoever else is runnable.
SPIN_YIELDS = 1024
# Opaque storage for a pthread_mutex_t / pthread_cond_t (see the module docstring).
PTHREAD_STORAGE = 64

_JOB = "%irtool.job"
# The fields of the job: what runs, how it is cut, how far the participants got.
_FN, _CLOSURE, _BEGIN, _N, _CHUNKS, _NEXT, _DONE, _STATUS = range(8)
_POOL = "@irtool.pool"


def _field(k: int, job: str = f"{_POOL}.job") -> str:
    return f"getelementptr inbounds {_JOB}, ptr {job}, i32 0, i32 {k}"


def _yield_loop(label: str, test: str, then: str) -> str:
    """A block `label` that evaluates `test` (lines defining `%<label>.go`) and goes to `then`
    when it holds, else yields the CPU and tries again."""
    return f"""{label}:
{test}
  br i1 %{label}.go, label %{then}, label %{label}.yield
{label}.yield:
  %{label}.y = call i32 @sched_yield()
  br label %{label}"""


def _wake_all(tag: str) -> str:
    return f"""  %{tag}.l = call i32 @pthread_mutex_lock(ptr {_POOL}.lock)
  %{tag}.b = call i32 @pthread_cond_broadcast(ptr {_POOL}.wake)
  %{tag}.u = call i32 @pthread_mutex_unlock(ptr {_POOL}.lock)"""


def _started_here(here: str, elsewhere: str) -> str:
    """Goes to `here` when this process started the pool (`%me` is its pid), else `elsewhere`."""
    return f"""  %me = call i32 @getpid()
  %pid = load i32, ptr {_POOL}.pid, align 4
  %ours = icmp eq i32 %pid, %me
  br i1 %ours, label %{here}, label %{elsewhere}"""


def _take_pool(tag: str, taken: str, refused: str) -> str:
    return f"""  %{tag}.cas = cmpxchg ptr {_POOL}.busy, i32 0, i32 1 seq_cst seq_cst
  %{tag}.mine = extractvalue {{ i32, i1 }} %{tag}.cas, 1
  br i1 %{tag}.mine, label %{taken}, label %{refused}"""


RUNTIME_TEXT = f"""{_JOB} = type {{ ptr, ptr, i64, i64, i64, i64, i64, i32 }}

{_POOL}.lock = internal global [{PTHREAD_STORAGE} x i8] zeroinitializer, align 64
{_POOL}.wake = internal global [{PTHREAD_STORAGE} x i8] zeroinitializer, align 64
{_POOL}.job = internal global {_JOB} zeroinitializer, align 64
{_POOL}.generation = internal global i64 0, align 64
{_POOL}.busy = internal global i32 0, align 64
{_POOL}.closed = internal global i32 1, align 4
{_POOL}.active = internal global i32 0, align 4
{_POOL}.sleepers = internal global i32 0, align 4
{_POOL}.sections = internal global i32 0, align 64
{_POOL}.stop = internal global i32 0, align 4
{_POOL}.pid = internal global i32 0, align 4
{_POOL}.workers = internal global i32 0, align 4
{_POOL}.tids = internal global ptr null, align 8
@llvm.global_dtors = appending global [1 x {{ i32, ptr, ptr }}] [{{ i32, ptr, ptr }} {{ i32 65535, ptr @{SHUTDOWN}, ptr null }}]

define internal void @irtool_parallel_chunks(ptr %job) #0 {{
entry:
  %fn.p = {_field(_FN, "%job")}
  %fn = load ptr, ptr %fn.p, align 8
  %closure.p = {_field(_CLOSURE, "%job")}
  %closure = load ptr, ptr %closure.p, align 8
  %begin.p = {_field(_BEGIN, "%job")}
  %begin = load i64, ptr %begin.p, align 8
  %n.p = {_field(_N, "%job")}
  %n = load i64, ptr %n.p, align 8
  %chunks.p = {_field(_CHUNKS, "%job")}
  %chunks = load i64, ptr %chunks.p, align 8
  %next.p = {_field(_NEXT, "%job")}
  %done.p = {_field(_DONE, "%job")}
  %status.p = {_field(_STATUS, "%job")}
  %base = sdiv i64 %n, %chunks
  %extra = srem i64 %n, %chunks
  br label %claim
claim:
  %c = atomicrmw add ptr %next.p, i64 1 seq_cst
  %left = icmp slt i64 %c, %chunks
  br i1 %left, label %run, label %out
run:
  %c.base = mul i64 %c, %base
  %c.long = icmp slt i64 %c, %extra
  %c.skew = select i1 %c.long, i64 %c, i64 %extra
  %c.off = add i64 %c.base, %c.skew
  %c.lo = add i64 %begin, %c.off
  %c.plus = zext i1 %c.long to i64
  %c.len = add i64 %base, %c.plus
  %c.hi = add i64 %c.lo, %c.len
  %s = call i32 %fn(ptr %closure, i64 %c.lo, i64 %c.hi)
  %failed = icmp ne i32 %s, 0
  br i1 %failed, label %record, label %count
record:
  %first = cmpxchg ptr %status.p, i32 0, i32 %s seq_cst seq_cst
  br label %count
count:
  %d = atomicrmw add ptr %done.p, i64 1 seq_cst
  br label %claim
out:
  ret void
}}

define internal ptr @irtool_pool_worker(ptr %arg) #0 {{
entry:
  %start = ptrtoint ptr %arg to i64
  br label %idle
idle:
  %seen = phi i64 [ %start, %entry ], [ %g.job, %left ]
  br label %spin
spin:
  %i = phi i32 [ 0, %idle ], [ %i.next, %spin.yield ], [ 0, %rewoken ]
  %g = load atomic i64, ptr {_POOL}.generation seq_cst, align 8
  %new = icmp ne i64 %g, %seen
  br i1 %new, label %enter, label %spin.stop
spin.stop:
  %stop = load atomic i32, ptr {_POOL}.stop seq_cst, align 4
  %stopping = icmp ne i32 %stop, 0
  br i1 %stopping, label %exit, label %spin.section
spin.section:
  %sections = load atomic i32, ptr {_POOL}.sections seq_cst, align 4
  %inside = icmp sgt i32 %sections, 0
  %short = icmp ult i32 %i, {SPIN_YIELDS}
  %more = or i1 %inside, %short
  br i1 %more, label %spin.yield, label %sleep
spin.yield:
  %y = call i32 @sched_yield()
  %i.count = add i32 %i, 1
  %i.next = select i1 %inside, i32 0, i32 %i.count
  br label %spin
sleep:
  %l = call i32 @pthread_mutex_lock(ptr {_POOL}.lock)
  %in = atomicrmw add ptr {_POOL}.sleepers, i32 1 seq_cst
  br label %check
check:
  %g.s = load atomic i64, ptr {_POOL}.generation seq_cst, align 8
  %new.s = icmp ne i64 %g.s, %seen
  %stop.s = load atomic i32, ptr {_POOL}.stop seq_cst, align 4
  %stopping.s = icmp ne i32 %stop.s, 0
  %sections.s = load atomic i32, ptr {_POOL}.sections seq_cst, align 4
  %inside.s = icmp sgt i32 %sections.s, 0
  %job.s = or i1 %new.s, %stopping.s
  %up = or i1 %job.s, %inside.s
  br i1 %up, label %woken, label %wait
wait:
  %w = call i32 @pthread_cond_wait(ptr {_POOL}.wake, ptr {_POOL}.lock)
  br label %check
woken:
  %out = atomicrmw sub ptr {_POOL}.sleepers, i32 1 seq_cst
  %u = call i32 @pthread_mutex_unlock(ptr {_POOL}.lock)
  br i1 %stopping.s, label %exit, label %woken.job
woken.job:
  br i1 %new.s, label %enter, label %rewoken
rewoken:
  br label %spin
enter:
  %g.job = phi i64 [ %g, %spin ], [ %g.s, %woken.job ]
  %a.in = atomicrmw add ptr {_POOL}.active, i32 1 seq_cst
  %closed = load atomic i32, ptr {_POOL}.closed seq_cst, align 4
  %open = icmp eq i32 %closed, 0
  br i1 %open, label %work, label %left
work:
  call void @irtool_parallel_chunks(ptr {_POOL}.job)
  br label %left
left:
  %a.out = atomicrmw sub ptr {_POOL}.active, i32 1 seq_cst
  br label %idle
exit:
  ret ptr null
}}

define internal void @irtool_pool_start(i32 %wanted, i32 %me) #0 {{
entry:
  %old = load ptr, ptr {_POOL}.tids, align 8
  call void @free(ptr %old)
  store ptr null, ptr {_POOL}.tids, align 8
  store i32 0, ptr {_POOL}.workers, align 4
  %m = call i32 @pthread_mutex_init(ptr {_POOL}.lock, ptr null)
  %c = call i32 @pthread_cond_init(ptr {_POOL}.wake, ptr null)
  store atomic i32 0, ptr {_POOL}.active seq_cst, align 4
  store atomic i32 0, ptr {_POOL}.sleepers seq_cst, align 4
  store atomic i32 1, ptr {_POOL}.closed seq_cst, align 4
  store i32 %me, ptr {_POOL}.pid, align 4
  %count = zext i32 %wanted to i64
  %bytes = mul i64 %count, 8
  %tids = call ptr @malloc(i64 %bytes)
  %nomem = icmp eq ptr %tids, null
  br i1 %nomem, label %none, label %first
first:
  %g = load atomic i64, ptr {_POOL}.generation seq_cst, align 8
  %arg = inttoptr i64 %g to ptr
  br label %create
create:
  %k = phi i32 [ 0, %first ], [ %k.next, %created ]
  %slot = getelementptr inbounds i64, ptr %tids, i32 %k
  %rc = call i32 @pthread_create(ptr %slot, ptr null, ptr @irtool_pool_worker, ptr %arg)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %created, label %started
created:
  %k.next = add i32 %k, 1
  %more = icmp slt i32 %k.next, %wanted
  br i1 %more, label %create, label %started
started:
  %made = phi i32 [ %k, %create ], [ %k.next, %created ]
  store ptr %tids, ptr {_POOL}.tids, align 8
  store i32 %made, ptr {_POOL}.workers, align 4
  ret void
none:
  ret void
}}

define internal i32 @{RUNTIME}(ptr %fn, ptr %closure, i64 %begin, i64 %end, i32 %threads) noinline #0 {{
entry:
  %n = sub i64 %end, %begin
  %several = icmp sgt i64 %n, 1
  %helpers = icmp sgt i32 %threads, 1
  %split = and i1 %several, %helpers
  br i1 %split, label %take, label %serial
serial:
  %some = icmp sgt i64 %n, 0
  br i1 %some, label %alone, label %nothing
alone:
  %only = call i32 %fn(ptr %closure, i64 %begin, i64 %end)
  ret i32 %only
nothing:
  ret i32 0
take:
{_take_pool("take", "taken", "alone")}
taken:
  %stop = load atomic i32, ptr {_POOL}.stop seq_cst, align 4
  %stopped = icmp ne i32 %stop, 0
  br i1 %stopped, label %release.alone, label %owner
owner:
{_started_here("sized", "start")}
start:
  %wanted = sub i32 %threads, 1
  call void @irtool_pool_start(i32 %wanted, i32 %me)
  br label %sized
sized:
  %workers = load i32, ptr {_POOL}.workers, align 4
  %none = icmp eq i32 %workers, 0
  br i1 %none, label %release.alone, label %cut
release.alone:
  %solo = call i32 %fn(ptr %closure, i64 %begin, i64 %end)
  store atomic i32 0, ptr {_POOL}.busy seq_cst, align 4
  ret i32 %solo
cut:
  %team = add i32 %workers, 1
  %t = zext i32 %team to i64
  %want = mul i64 %t, {CHUNKS_PER_THREAD}
  %short = icmp slt i64 %n, %want
  %chunks = select i1 %short, i64 %n, i64 %want
  store ptr %fn, ptr {_POOL}.job, align 8
  %closure.p = {_field(_CLOSURE)}
  store ptr %closure, ptr %closure.p, align 8
  %begin.p = {_field(_BEGIN)}
  store i64 %begin, ptr %begin.p, align 8
  %n.p = {_field(_N)}
  store i64 %n, ptr %n.p, align 8
  %chunks.p = {_field(_CHUNKS)}
  store i64 %chunks, ptr %chunks.p, align 8
  %next.p = {_field(_NEXT)}
  store i64 0, ptr %next.p, align 8
  %done.p = {_field(_DONE)}
  store i64 0, ptr %done.p, align 8
  %status.p = {_field(_STATUS)}
  store i32 0, ptr %status.p, align 4
  store atomic i32 0, ptr {_POOL}.closed seq_cst, align 4
  %g = atomicrmw add ptr {_POOL}.generation, i64 1 seq_cst
  %sleepers = load atomic i32, ptr {_POOL}.sleepers seq_cst, align 4
  %asleep = icmp ne i32 %sleepers, 0
  br i1 %asleep, label %wake, label %work
wake:
{_wake_all("wake")}
  br label %work
work:
  call void @irtool_parallel_chunks(ptr {_POOL}.job)
  br label %finished
{_yield_loop("finished", f'''  %finished.d = load atomic i64, ptr %done.p seq_cst, align 8
  %finished.go = icmp sge i64 %finished.d, %chunks''', "close")}
close:
  store atomic i32 1, ptr {_POOL}.closed seq_cst, align 4
  br label %drained
{_yield_loop("drained", f'''  %drained.a = load atomic i32, ptr {_POOL}.active seq_cst, align 4
  %drained.go = icmp eq i32 %drained.a, 0''', "finish")}
finish:
  %status = load atomic i32, ptr %status.p seq_cst, align 4
  store atomic i32 0, ptr {_POOL}.busy seq_cst, align 4
  ret i32 %status
}}

define internal void @{ENTER}() #0 {{
entry:
  %s = atomicrmw add ptr {_POOL}.sections, i32 1 seq_cst
  %sleepers = load atomic i32, ptr {_POOL}.sleepers seq_cst, align 4
  %asleep = icmp ne i32 %sleepers, 0
  br i1 %asleep, label %owner, label %out
owner:
{_started_here("wake", "out")}
wake:
{_wake_all("wake")}
  br label %out
out:
  ret void
}}

define internal void @{LEAVE}() #0 {{
entry:
  %s = atomicrmw sub ptr {_POOL}.sections, i32 1 seq_cst
  ret void
}}

define internal void @{SHUTDOWN}() #0 {{
entry:
  %again = atomicrmw xchg ptr {_POOL}.stop, i32 1 seq_cst
  %first = icmp eq i32 %again, 0
  br i1 %first, label %take, label %out
take:
{_take_pool("take", "taken", "take.yield")}
take.yield:
  %y = call i32 @sched_yield()
  br label %take
taken:
{_started_here("wake", "out")}
wake:
{_wake_all("wake")}
  %workers = load i32, ptr {_POOL}.workers, align 4
  %tids = load ptr, ptr {_POOL}.tids, align 8
  %any = icmp sgt i32 %workers, 0
  br i1 %any, label %join, label %joined
join:
  %k = phi i32 [ 0, %wake ], [ %k.next, %join ]
  %slot = getelementptr inbounds i64, ptr %tids, i32 %k
  %tid = load i64, ptr %slot, align 8
  %j = call i32 @pthread_join(i64 %tid, ptr null)
  %k.next = add i32 %k, 1
  %more = icmp slt i32 %k.next, %workers
  br i1 %more, label %join, label %joined
joined:
  call void @free(ptr %tids)
  store ptr null, ptr {_POOL}.tids, align 8
  store i32 0, ptr {_POOL}.workers, align 4
  store i32 0, ptr {_POOL}.pid, align 4
  ret void
out:
  ret void
}}
"""

# A build split into modules compiled apart (`irtool.codegen.entry`'s chunks) keeps the pool in the
# entry module and lets the kernels' modules call it by name: one pool per loaded object still.
EXPORTED_RUNTIME_TEXT = RUNTIME_TEXT.replace(f"define internal i32 @{RUNTIME}(", f"define hidden i32 @{RUNTIME}(")
RUNTIME_DECLARATION = f"declare hidden i32 @{RUNTIME}(ptr, ptr, i64, i64, i32)"



def with_sections(entry_text: str, run: str) -> str:
    """`entry_text` (LLVM IR defining `@<run>`, the module's inference entry) with that function
    renamed `@<run>.inference` (internal) and called by a new `@<run>` between the pool's
    `@{ENTER}` and `@{LEAVE}`: an inference wakes parked workers as it starts, so their wake-up
    overlaps its first serial work, and keeps them polling between its parallel loops."""
    head = f"define i32 @{run}("
    start = entry_text.find(head)
    if start < 0:
        raise ValueError(f"no definition of @{run} in the entry text")
    params = entry_text[start + len(head):entry_text.index(") #0 {", start)].split(", ")
    args = ", ".join(f"{p.split()[0]} {p.split()[-1]}" for p in params)
    wrapper = f"""define i32 @{run}({', '.join(params)}) #0 {{
entry:
  call void @{ENTER}()
  %status = call i32 @{run}.inference({args})
  call void @{LEAVE}()
  ret i32 %status
}}
"""
    return entry_text.replace(head, f"define internal i32 @{run}.inference(", 1) + "\n" + wrapper


DECLARATIONS = {"pthread_create": "declare i32 @pthread_create(ptr, ptr, ptr, ptr)",
                "pthread_join": "declare i32 @pthread_join(i64, ptr)",
                "pthread_mutex_init": "declare i32 @pthread_mutex_init(ptr, ptr)",
                "pthread_mutex_lock": "declare i32 @pthread_mutex_lock(ptr)",
                "pthread_mutex_unlock": "declare i32 @pthread_mutex_unlock(ptr)",
                "pthread_cond_init": "declare i32 @pthread_cond_init(ptr, ptr)",
                "pthread_cond_wait": "declare i32 @pthread_cond_wait(ptr, ptr)",
                "pthread_cond_broadcast": "declare i32 @pthread_cond_broadcast(ptr)",
                "sched_yield": "declare i32 @sched_yield()",
                "getpid": "declare i32 @getpid()",
                "malloc": "declare noalias ptr @malloc(i64)",
                "free": "declare void @free(ptr)"}
