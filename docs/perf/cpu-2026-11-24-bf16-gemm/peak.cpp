// One core's peak rate of the two instructions: 12 independent vdpbf16ps (bfloat16 pairs into fp32,
// 64 flops each) or vfmadd231ps (32 flops) on zmm registers per loop iteration, in inline assembly
// so that the compiler cannot merge or drop them.  g++ -O2 peak.cpp -o peak && ./peak
#include <chrono>
#include <cstdio>

#define TWELVE(op)                                                                                  \
  op " %%zmm14,%%zmm15,%%zmm0\n" op " %%zmm14,%%zmm15,%%zmm1\n" op " %%zmm14,%%zmm15,%%zmm2\n"     \
  op " %%zmm14,%%zmm15,%%zmm3\n" op " %%zmm14,%%zmm15,%%zmm4\n" op " %%zmm14,%%zmm15,%%zmm5\n"     \
  op " %%zmm14,%%zmm15,%%zmm6\n" op " %%zmm14,%%zmm15,%%zmm7\n" op " %%zmm14,%%zmm15,%%zmm8\n"     \
  op " %%zmm14,%%zmm15,%%zmm9\n" op " %%zmm14,%%zmm15,%%zmm10\n" op " %%zmm14,%%zmm15,%%zmm11\n"

template <typename Loop>
void report(const char* name, double flops_per_instruction, Loop loop) {
  for (int round = 0; round < 3; ++round) {
    const long iterations = 100000000;
    const auto start = std::chrono::steady_clock::now();
    loop(iterations);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-12s %6.1f GFLOP/s  (%.2f G instructions/s)\n", name, iterations * 12 * flops_per_instruction / s / 1e9,
                iterations * 12 / s / 1e9);
  }
}

int main() {
  report("vdpbf16ps", 64, [](long n) {
    asm volatile("1:\n" TWELVE("vdpbf16ps") "dec %0\n jnz 1b\n"
                 : "+r"(n)::"xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                   "xmm11", "cc");
  });
  report("vfmadd231ps", 32, [](long n) {
    asm volatile("1:\n" TWELVE("vfmadd231ps") "dec %0\n jnz 1b\n"
                 : "+r"(n)::"xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                   "xmm11", "cc");
  });
}
