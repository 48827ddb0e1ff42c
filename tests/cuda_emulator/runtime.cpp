// The CPU emulator's runtime: runs a kernel's grid block by block, each CUDA thread a fiber, and
// serves launches from tests/cuda_emulator/__init__.py over stdin/stdout (buffers in a shared file).
//
// Scheduling: one block at a time; within it, the lowest-numbered runnable thread runs until it
// reaches __syncthreads, a warp collective or its end. A barrier opens when every thread of the
// block waits at it; a collective completes when every lane of its mask has arrived, and then
// checks that they all passed the same mask, kind and width and that every lane read is in the
// mask. A thread that exits while others wait for it, a barrier that some threads never reach, a
// mask naming lanes that exited or do not exist, and a block where nothing can run but some
// threads have not finished are errors ("error <message>" on stdout, exit status 1).
// Out-of-bounds accesses are AddressSanitizer's: every buffer is copied into its own allocation
// (with the caller's address modulo 16 kept, so alignment checks mean what they mean on a GPU).
#include <sys/mman.h>
#include <unistd.h>
#include <fcntl.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_emu.h"
#include "emu_launch.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator's fibers switch with x86-64 assembly"
#endif

extern "C" const char* __asan_default_options() { return "detect_leaks=0:detect_stack_use_after_return=0"; }

// Saves the callee-saved registers on the current stack, stores its pointer in *from, continues
// on the stack `to` (the System V x86-64 ABI: rbx, rbp, r12-r15 are callee-saved).
extern "C" void emu_switch(void** from, void* to);
extern "C" void emu_fiber_start();
asm(R"(
  .text
  .globl emu_switch
  .type emu_switch, @function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch, .-emu_switch
  .globl emu_fiber_start
  .type emu_fiber_start, @function
emu_fiber_start:
  movq %r12, %rdi
  call emu_fiber_main
  ud2
  .size emu_fiber_start, .-emu_fiber_start
)");

namespace emu {

uint3 block_index;
dim3 block_dim, grid_dim;

namespace {

constexpr std::size_t STACK_BYTES = 256 * 1024;

enum State { RUNNABLE, AT_BARRIER, AT_COLLECTIVE, EXITED };

struct Thread {
  void* sp;
  char* stack;  // lowest address of the usable stack
  uint3 idx;
  int linear, lane, warp;
  State state;
  Collective kind;
  unsigned mask;
  unsigned long long bits, result;
  int arg, width;
  const char* file;
  int line;
};

struct Warp {
  unsigned exists, arrived, exited;
};

std::vector<Thread> threads;
std::vector<Warp> warps;
std::vector<char*> stacks;
std::vector<unsigned long long> runnable;  // bitset over threads
Thread* cur = nullptr;
void* scheduler_sp = nullptr;
const void* main_stack_bottom = nullptr;
std::size_t main_stack_size = 0;
int n_threads = 0, n_exited = 0, at_barrier = 0;
const char* barrier_file = nullptr;
int barrier_line = 0;
const KernelEntry* kernel = nullptr;
void* const* kernel_slots = nullptr;

const char* collective_name(Collective k) {
  static const char* names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                "__syncwarp",  "__ballot_sync",  "__any_sync",       "__all_sync"};
  return names[k];
}

[[noreturn]] void fail(const char* fmt, ...) {
  char msg[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  for (char* c = msg; *c; ++c)
    if (*c == '\n') *c = ';';
  std::string where = kernel ? std::string(kernel->name) : std::string("?");
  char block[160];
  snprintf(block, sizeof block, " block (%u,%u,%u) of grid (%u,%u,%u), block size (%u,%u,%u)", block_index.x,
           block_index.y, block_index.z, grid_dim.x, grid_dim.y, grid_dim.z, block_dim.x, block_dim.y, block_dim.z);
  fprintf(stdout, "error %s%s: %s\n", where.c_str(), block, msg);
  fflush(stdout);
  _exit(1);
}

void set_runnable(int t, bool on) {
  if (on)
    runnable[t >> 6] |= 1ull << (t & 63);
  else
    runnable[t >> 6] &= ~(1ull << (t & 63));
}

int first_runnable() {
  for (std::size_t w = 0; w < runnable.size(); ++w)
    if (runnable[w]) return (int)(w * 64 + __builtin_ctzll(runnable[w]));
  return -1;
}

// From the running fiber back to the scheduler; returns when the scheduler resumes this fiber.
void yield(bool finished = false) {
  Thread* self = cur;
#if EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(finished ? nullptr : &fake, main_stack_bottom, main_stack_size);
  emu_switch(&self->sp, scheduler_sp);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)finished;
  emu_switch(&self->sp, scheduler_sp);
#endif
}

void resume(Thread* t) {
  cur = t;
#if EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, t->stack, STACK_BYTES);
  emu_switch(&scheduler_sp, t->sp);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  emu_switch(&scheduler_sp, t->sp);
#endif
}

std::string thread_name(const Thread& t) {
  char s[96];
  snprintf(s, sizeof s, "thread (%u,%u,%u) [warp %d lane %d]", t.idx.x, t.idx.y, t.idx.z, t.warp, t.lane);
  return s;
}

std::string waiting_at(const Thread& t) {
  char s[512];
  if (t.state == AT_BARRIER)
    snprintf(s, sizeof s, "__syncthreads at %s:%d", t.file, t.line);
  else if (t.state == AT_COLLECTIVE)
    snprintf(s, sizeof s, "%s(mask 0x%08x) at %s:%d", collective_name(t.kind), t.mask, t.file, t.line);
  else if (t.state == EXITED)
    snprintf(s, sizeof s, "exited");
  else
    snprintf(s, sizeof s, "running");
  return s;
}

// Every lane of t's mask has arrived at a collective: check they agree, compute every result.
void complete_collective(Warp& w, const Thread& t) {
  const unsigned mask = t.mask;
  Thread* base = &threads[t.warp * 32];
  for (int l = 0; l < 32; ++l) {
    if (!(mask >> l & 1)) continue;
    const Thread& u = base[l];
    if (u.mask != mask || u.kind != t.kind || u.width != t.width)
      fail("lanes %d and %d of warp %d meet at warp collectives that do not match: lane %d at %s, lane %d at %s "
           "(width %d vs %d)",
           t.lane, l, t.warp, t.lane, waiting_at(t).c_str(), l, waiting_at(u).c_str(), t.width, u.width);
  }
  unsigned long long ballot = 0;
  for (int l = 0; l < 32; ++l)
    if ((mask >> l & 1) && base[l].bits) ballot |= 1ull << l;
  for (int l = 0; l < 32; ++l) {
    if (!(mask >> l & 1)) continue;
    Thread& u = base[l];
    const int width = u.width, group = l & ~(width - 1);
    int src = l;
    switch (u.kind) {
      case SHFL_IDX: src = group + (((u.arg % width) + width) % width); break;
      case SHFL_UP: src = (l - group) >= u.arg ? l - u.arg : l; break;
      case SHFL_DOWN: src = (l - group) + u.arg < width ? l + u.arg : l; break;
      case SHFL_XOR: src = l ^ u.arg; src = (src >= group + width || src < 0 || src > 31) ? l : src; break;
      default: break;
    }
    if (u.kind <= SHFL_XOR) {
      if (!(mask >> src & 1))
        fail("%s at %s:%d: lane %d of warp %d reads lane %d, which is not in mask 0x%08x (undefined on a GPU)",
             collective_name(u.kind), u.file, u.line, l, u.warp, src, mask);
      u.result = base[src].bits;
    } else if (u.kind == BALLOT) {
      u.result = ballot;
    } else if (u.kind == ANY) {
      u.result = ballot != 0;
    } else if (u.kind == ALL) {
      u.result = ballot == mask;
    } else {
      u.result = 0;
    }
  }
  for (int l = 0; l < 32; ++l)
    if (mask >> l & 1) {
      base[l].state = RUNNABLE;
      set_runnable(base[l].linear, true);
    }
  w.arrived &= ~mask;
}

void thread_finished() {
  Thread& t = *cur;
  Warp& w = warps[t.warp];
  const unsigned me = 1u << t.lane;
  t.state = EXITED;
  set_runnable(t.linear, false);
  ++n_exited;
  w.exited |= me;
  for (int l = 0; l < 32; ++l) {
    const Thread& u = threads[t.warp * 32 + l < n_threads ? t.warp * 32 + l : 0];
    if ((w.arrived >> l & 1) && (u.mask & me))
      fail("%s exited while lane %d waits for it at %s: a mask that names a lane that never arrives",
           thread_name(t).c_str(), l, waiting_at(u).c_str());
  }
  if (at_barrier)
    fail("%s exited while %d threads wait at __syncthreads at %s:%d: a barrier not every thread reaches",
         thread_name(t).c_str(), at_barrier, barrier_file, barrier_line);
}

void deadlock() {
  std::string report = "deadlock: no thread can run but " + std::to_string(n_threads - n_exited) + " of " +
                       std::to_string(n_threads) + " have not finished.";
  int shown = 0;
  for (const Thread& t : threads) {
    if (t.state == EXITED || shown >= 12) continue;
    ++shown;
    report += "\n  " + thread_name(t) + " waits at " + waiting_at(t);
    if (t.state == AT_COLLECTIVE) {
      const Warp& w = warps[t.warp];
      const unsigned missing = t.mask & ~w.arrived;
      char s[160];
      snprintf(s, sizeof s, " for lanes 0x%08x that have not arrived", missing);
      report += s;
    }
  }
  if (n_threads - n_exited > shown) report += "\n  ...";
  fail("%s", report.c_str());
}

void run_block() {
  const int n = n_threads;
  n_exited = at_barrier = 0;
  barrier_file = nullptr;
  for (int t = 0; t < n; ++t) {
    Thread& th = threads[t];
    th.linear = t;
    th.idx = {t % block_dim.x, (t / block_dim.x) % block_dim.y, t / (block_dim.x * block_dim.y)};
    th.lane = t % 32;
    th.warp = t / 32;
    th.state = RUNNABLE;
    th.mask = 0;
    th.stack = stacks[t];
#if EMU_ASAN
    __asan_unpoison_memory_region(th.stack, STACK_BYTES);
#endif
    void** top = reinterpret_cast<void**>(th.stack + STACK_BYTES);  // 16-byte aligned
    top[-1] = reinterpret_cast<void*>(&emu_fiber_start);            // emu_switch's ret goes there
    for (int r = 2; r <= 7; ++r) top[-r] = nullptr;                 // rbp rbx r12 r13 r14 r15
    top[-5] = &th;                                                   // r12: emu_fiber_start's argument
    th.sp = top - 7;
    set_runnable(t, true);
  }
  for (Warp& w : warps) w = {0, 0, 0};
  for (int t = 0; t < n; ++t) warps[t / 32].exists |= 1u << (t % 32);
  for (int t; (t = first_runnable()) >= 0;) resume(&threads[t]);
  if (n_exited != n) deadlock();
}

}  // namespace

const uint3& thread_index() { return cur->idx; }

unsigned long long warp_collective(Collective kind, unsigned mask, unsigned long long bits, int arg, int width,
                                   const char* file, int line) {
  Thread& t = *cur;
  Warp& w = warps[t.warp];
  const unsigned me = 1u << t.lane;
  if (!(mask & me))
    fail("%s at %s:%d: %s calls it with mask 0x%08x, which does not name its own lane", collective_name(kind), file,
         line, thread_name(t).c_str(), mask);
  if (mask & ~w.exists)
    fail("%s at %s:%d: mask 0x%08x names lanes 0x%08x that do not exist in warp %d (block of %d threads)",
         collective_name(kind), file, line, mask, mask & ~w.exists, t.warp, n_threads);
  if (mask & w.exited)
    fail("%s at %s:%d: mask 0x%08x names lanes 0x%08x of warp %d that have exited and never arrive",
         collective_name(kind), file, line, mask, mask & w.exited, t.warp);
  if (width < 1 || width > 32 || (width & (width - 1)))
    fail("%s at %s:%d: width %d is not a power of two from 1 to 32", collective_name(kind), file, line, width);
  t.kind = kind;
  t.mask = mask;
  t.bits = bits;
  t.arg = arg;
  t.width = width;
  t.file = file;
  t.line = line;
  t.state = AT_COLLECTIVE;
  set_runnable(t.linear, false);
  w.arrived |= me;
  if ((w.arrived & mask) == mask) {
    complete_collective(w, t);
  } else {  // this arrival may complete (and then fail the check of) a group waiting with another mask
    for (int l = 0; l < 32; ++l) {
      const Thread& u = threads[t.warp * 32 + l < n_threads ? t.warp * 32 + l : t.linear];
      if ((w.arrived >> l & 1) && (u.mask & me) && (w.arrived & u.mask) == u.mask) complete_collective(w, u);
    }
  }
  yield();
  return t.result;
}

void syncthreads(const char* file, int line) {
  Thread& t = *cur;
  if (n_exited)
    fail("__syncthreads at %s:%d: %d threads of the block have exited and never arrive", file, line, n_exited);
  if (at_barrier == 0) {
    barrier_file = file;
    barrier_line = line;
  } else if (line != barrier_line || std::strcmp(file, barrier_file) != 0) {
    fail("%s waits at __syncthreads at %s:%d while %d threads wait at the one at %s:%d", thread_name(t).c_str(),
         file, line, at_barrier, barrier_file, barrier_line);
  }
  t.state = AT_BARRIER;
  t.file = file;
  t.line = line;
  set_runnable(t.linear, false);
  if (++at_barrier == n_threads) {
    for (Thread& u : threads) {
      u.state = RUNNABLE;
      set_runnable(u.linear, true);
    }
    at_barrier = 0;
  }
  yield();
}

void check_aligned(const void* p, unsigned long alignment, const char* what, const char* file, int line) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignment)
    fail("%s at %s:%d: %s reads %lu bytes at %p, which is not %lu-byte aligned", what, file, line,
         thread_name(*cur).c_str(), alignment, p, alignment);
}

// ---- the launch loop ----------------------------------------------------------------------------

namespace {

struct Buffer {
  char* base;
  char* data;
  std::size_t offset, bytes, align;
};

void launch(const KernelEntry& k, const unsigned grid[3], const unsigned block[3], const char* shm_path,
            std::size_t shm_bytes, int nargs) {
  kernel = &k;
  if (nargs != k.n_params) fail("the launch passes %d arguments, the kernel takes %d", nargs, k.n_params);
  int fd = open(shm_path, O_RDWR);
  if (fd < 0) fail("cannot open the buffer file %s", shm_path);
  char* shm = shm_bytes ? static_cast<char*>(mmap(nullptr, shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0))
                        : nullptr;
  close(fd);
  if (shm == MAP_FAILED) fail("cannot map the buffer file %s", shm_path);
  std::vector<Buffer> buffers(nargs);
  std::vector<unsigned long long> storage(nargs);
  std::vector<void*> slots(nargs);
  for (int i = 0; i < nargs; ++i) {
    char tag[8];
    if (scanf("%7s", tag) != 1) fail("truncated launch command");
    if (tag[0] == 'b') {
      Buffer& b = buffers[i];
      if (scanf("%zu %zu %zu", &b.offset, &b.bytes, &b.align) != 3) fail("bad buffer argument %d", i);
      // Its own allocation, ending where the buffer ends (ASan's redzone follows), starting at the
      // caller's address modulo 16; the bytes before it are poisoned (reported as use-after-poison).
      void* p = nullptr;
      if (posix_memalign(&p, 16, b.align + b.bytes ? b.align + b.bytes : 1)) fail("out of memory");
      b.base = static_cast<char*>(p);
      b.data = b.base + b.align;
      std::memcpy(b.data, shm + b.offset, b.bytes);
#if EMU_ASAN
      __asan_poison_memory_region(b.base, b.align);
#endif
      std::memcpy(&storage[i], &b.data, sizeof(void*));
    } else {
      if (scanf("%llx", &storage[i]) != 1) fail("bad scalar argument %d", i);
    }
    slots[i] = &storage[i];
  }
  grid_dim = dim3(grid[0], grid[1], grid[2]);
  block_dim = dim3(block[0], block[1], block[2]);
  n_threads = (int)(block[0] * block[1] * block[2]);
  threads.assign(n_threads, Thread{});
  warps.assign((n_threads + 31) / 32, Warp{});
  runnable.assign((n_threads + 63) / 64, 0);
  while ((int)stacks.size() < n_threads) {
    void* s = mmap(nullptr, STACK_BYTES + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (s == MAP_FAILED) fail("cannot map a fiber stack");
    mprotect(s, 4096, PROT_NONE);  // guard page: a stack overflow faults instead of corrupting
    stacks.push_back(static_cast<char*>(s) + 4096);
  }
  kernel_slots = slots.data();
  for (unsigned z = 0; z < grid[2]; ++z)
    for (unsigned y = 0; y < grid[1]; ++y)
      for (unsigned x = 0; x < grid[0]; ++x) {
        block_index = {x, y, z};
        run_block();
      }
  for (int i = 0; i < nargs; ++i) {
    Buffer& b = buffers[i];
    if (!b.base) continue;
    if (!k.params[i].is_const) std::memcpy(shm + b.offset, b.data, b.bytes);
#if EMU_ASAN
    __asan_unpoison_memory_region(b.base, b.align);
#endif
    free(b.base);
  }
  if (shm) munmap(shm, shm_bytes);
  kernel = nullptr;
}

}  // namespace

int serve(const KernelEntry* kernels, int n_kernels) {
  printf("kernels %d\n", n_kernels);
  for (int i = 0; i < n_kernels; ++i) {
    const KernelEntry& k = kernels[i];
    printf("kernel %s", k.name);
    for (int p = 0; p < k.n_params; ++p)
      printf(" %c:%s%s", k.params[p].kind, k.params[p].type, k.params[p].kind == 'p' ? (k.params[p].is_const ? ":c" : ":w") : "");
    printf("\n");
  }
  printf("ready\n");
  fflush(stdout);
  char cmd[32], name[256], path[4096];
  while (scanf("%31s", cmd) == 1) {
    if (!std::strcmp(cmd, "quit")) return 0;
    unsigned grid[3], block[3];
    std::size_t bytes;
    int nargs;
    if (std::strcmp(cmd, "launch") ||
        scanf("%255s %u %u %u %u %u %u %4095s %zu %d", name, &grid[0], &grid[1], &grid[2], &block[0], &block[1],
              &block[2], path, &bytes, &nargs) != 10)
      fail("bad command '%s'", cmd);
    const KernelEntry* k = nullptr;
    for (int i = 0; i < n_kernels; ++i)
      if (!std::strcmp(kernels[i].name, name)) k = &kernels[i];
    if (!k) fail("no kernel named %s", name);
    launch(*k, grid, block, path, bytes, nargs);
    printf("done\n");
    fflush(stdout);
  }
  return 0;
}

}  // namespace emu

extern "C" void emu_fiber_main(void*) {
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &emu::main_stack_bottom, &emu::main_stack_size);
#endif
  emu::kernel->invoke(emu::kernel->fn, emu::kernel_slots);
  emu::thread_finished();
  emu::yield(true);
  __builtin_unreachable();
}
