// Kernel registration for the CPU emulator: the file that tests/cuda_emulator/__init__.py generates
// includes the kernel text, then this header, then lists the kernels with EMU_KERNEL(name). The
// parameter types are read from each kernel's own signature, so the host's arguments are checked
// against them (count, pointer or scalar, element type, constness) before every launch.
#pragma once

#include <cstring>
#include <type_traits>
#include <utility>

namespace emu {

struct Param {
  char kind;         // 'p' pointer, 's' scalar
  const char* type;  // element (pointer) or value (scalar) type: i8 u8 i16 u16 i32 u32 i64 u64 f32 f64 other
  bool is_const;     // pointer to const
};

struct KernelEntry {
  const char* name;
  void (*fn)();
  int n_params;
  Param params[32];
  void (*invoke)(void (*fn)(), void* const* slots);  // calls fn with the arguments held in slots
};

template <class T>
constexpr const char* type_code() {
  using U = std::remove_cv_t<T>;
  if (std::is_same<U, float>::value) return "f32";
  if (std::is_same<U, double>::value) return "f64";
  if (std::is_integral<U>::value) {
    constexpr bool s = std::is_signed<U>::value;
    switch (sizeof(U)) {
      case 1: return s ? "i8" : "u8";
      case 2: return s ? "i16" : "u16";
      case 4: return s ? "i32" : "u32";
      case 8: return s ? "i64" : "u64";
    }
  }
  return "other";
}

template <class A>
constexpr Param param() {
  if (std::is_pointer<A>::value)
    return {'p', type_code<std::remove_pointer_t<A>>(), std::is_const<std::remove_pointer_t<A>>::value};
  return {'s', type_code<A>(), false};
}

template <class A>
A read_slot(const void* slot) {
  A a;
  std::memcpy(&a, slot, sizeof(A));
  return a;
}

template <class... A, std::size_t... I>
void invoke_impl(void (*fn)(), void* const* slots, std::index_sequence<I...>) {
  reinterpret_cast<void (*)(A...)>(fn)(read_slot<A>(slots[I])...);
}

template <class... A>
void invoke(void (*fn)(), void* const* slots) {
  invoke_impl<A...>(fn, slots, std::index_sequence_for<A...>{});
}

template <class... A>
KernelEntry make_entry(const char* name, void (*fn)(A...)) {
  static_assert(sizeof...(A) <= 32, "more than 32 kernel parameters");
  KernelEntry e{name, reinterpret_cast<void (*)()>(fn), (int)sizeof...(A), {}, &invoke<A...>};
  const Param ps[] = {param<A>()..., Param{}};
  for (int i = 0; i < (int)sizeof...(A); ++i) e.params[i] = ps[i];
  return e;
}

int serve(const KernelEntry* kernels, int n_kernels);  // runtime.cpp: the launch loop on stdin/stdout

}  // namespace emu

#define EMU_KERNEL(name) ::emu::make_entry(#name, &name),
