// The narrow float32 GEMM of ops/cpu/narrow_gemm.h: a 6-row x 16-column tile of the output in 12
// AVX registers, over k one rank-1 update at a time (two panel loads, six broadcasts of x, twelve
// FMAs). Compiled with -mavx2 -mfma; called only where narrow_gemm_supported(). No templates from
// headers (std::min, the header's inline helpers): their instances here would be AVX2 code that the
// linker may pick for every caller.
#include "ops/cpu/narrow_gemm.h"

#include <immintrin.h>

#include <cstring>

namespace hypatia::ops {
namespace {

constexpr int kTileRows = 6;

int64_t min(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Lanes [0, count) of 8 set.
__m256i first_lanes(int64_t count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count < 0 ? 0 : min(count, 8))), lane);
}

// acc[2r], acc[2r + 1] += x row r (of 6, `ldx` apart) times the panel's two halves, over k. Named
// accumulators: with an array GCC kept a copy of all twelve on the stack, stored every step.
void tile6(const float* x, int64_t ldx, int64_t k, const float* panel, __m256 (&acc)[2 * kTileRows]) {
  __m256 c00 = acc[0], c01 = acc[1], c10 = acc[2], c11 = acc[3], c20 = acc[4], c21 = acc[5];
  __m256 c30 = acc[6], c31 = acc[7], c40 = acc[8], c41 = acc[9], c50 = acc[10], c51 = acc[11];
  const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx;
  const float *x3 = x + 3 * ldx, *x4 = x + 4 * ldx, *x5 = x + 5 * ldx;
  for (int64_t kk = 0; kk < k; ++kk) {
    const __m256 w_lo = _mm256_loadu_ps(panel + kk * kNarrowGemmPanel);
    const __m256 w_hi = _mm256_loadu_ps(panel + kk * kNarrowGemmPanel + 8);
    auto row = [&](const float* xr, __m256& lo, __m256& hi) {
      const __m256 a = _mm256_broadcast_ss(xr + kk);
      lo = _mm256_fmadd_ps(a, w_lo, lo);
      hi = _mm256_fmadd_ps(a, w_hi, hi);
    };
    row(x0, c00, c01);
    row(x1, c10, c11);
    row(x2, c20, c21);
    row(x3, c30, c31);
    row(x4, c40, c41);
    row(x5, c50, c51);
  }
  acc[0] = c00, acc[1] = c01, acc[2] = c10, acc[3] = c11, acc[4] = c20, acc[5] = c21;
  acc[6] = c30, acc[7] = c31, acc[8] = c40, acc[9] = c41, acc[10] = c50, acc[11] = c51;
}

// Output rows [0, rows) (rows <= 6), columns [0, cols) of the panel's tile from x rows [0, rows).
// A short strip runs on a zero-padded copy of its x rows, and stores only its rows.
void strip(const float* x, int64_t ldx, int rows, int64_t k, const float* panel, const float* bias,
           int64_t cols, bool relu, float* out, int64_t ldo, float* padded) {
  const __m256i mask_lo = first_lanes(cols), mask_hi = first_lanes(cols - 8);
  const __m256 b_lo = bias ? _mm256_maskload_ps(bias, mask_lo) : _mm256_setzero_ps();
  const __m256 b_hi = bias ? _mm256_maskload_ps(bias + 8, mask_hi) : _mm256_setzero_ps();
  __m256 acc[2 * kTileRows];
  for (int r = 0; r < kTileRows; ++r) {
    acc[2 * r] = b_lo;
    acc[2 * r + 1] = b_hi;
  }
  if (rows == kTileRows) {
    tile6(x, ldx, k, panel, acc);
  } else {
    tile6(padded, k, k, panel, acc);
  }
  const __m256 zero = _mm256_setzero_ps();
  for (int r = 0; r < rows; ++r) {
    // max(0, v) returns its second operand when either is NaN: NaN stays NaN.
    const __m256 lo = relu ? _mm256_max_ps(zero, acc[2 * r]) : acc[2 * r];
    const __m256 hi = relu ? _mm256_max_ps(zero, acc[2 * r + 1]) : acc[2 * r + 1];
    float* o = out + r * ldo;
    if (cols == kNarrowGemmPanel) {
      _mm256_storeu_ps(o, lo);
      _mm256_storeu_ps(o + 8, hi);
    } else {
      _mm256_maskstore_ps(o, mask_lo, lo);
      _mm256_maskstore_ps(o + 8, mask_hi, hi);
    }
  }
}

// dst row i (of 8, `ldd` apart) = column i of the 8x8 block at src (rows `ld` apart).
void transpose8x8(const float* src, int64_t ld, float* dst, int64_t ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm256_loadu_ps(src + i * ld);
  }
  for (int i = 0; i < 8; i += 2) {  // pairs of rows interleaved
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // then quadruples: each 128-bit lane holds 4 rows of one column
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {  // rows 0-3 of column c in r[c % 4]'s lane c / 4, rows 4-7 in r[4 + c % 4]'s
    _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

}  // namespace

void pack_narrow_weight(const float* w, int64_t ldw, int64_t n, int64_t k, float* packed) {
  if (n == 0 || k == 0) {
    return;  // nothing to pack, and `packed` may be null (an empty tensor's): memset must not get it
  }
  const int64_t panels = (n + kNarrowGemmPanel - 1) / kNarrowGemmPanel;
  std::memset(packed, 0, panels * k * kNarrowGemmPanel * sizeof(float));
  // By halves of panels, 8 output columns (rows of w) each: 8x8 blocks transposed in registers,
  // the ragged edges one element at a time.
  for (int64_t j = 0; j < n; j += 8) {
    float* half = packed + (j / kNarrowGemmPanel) * k * kNarrowGemmPanel + j % kNarrowGemmPanel;
    int64_t kk = 0;
    if (j + 8 <= n) {
      for (; kk + 8 <= k; kk += 8) {
        transpose8x8(w + j * ldw + kk, ldw, half + kk * kNarrowGemmPanel, kNarrowGemmPanel);
      }
    }
    for (; kk < k; ++kk) {
      for (int64_t c = 0; c < min(8, n - j); ++c) {
        half[kk * kNarrowGemmPanel + c] = w[(j + c) * ldw + kk];
      }
    }
  }
}

void narrow_gemm_act(
    const float* x, int64_t ldx, int64_t rows, int64_t k, const float* packed, const float* bias, int64_t n,
    bool relu, float* out, int64_t ldo) {
  // Row strips outside, panels inside: a strip's x rows stay in L1 across every panel.
  float padded[kTileRows * kNarrowGemmMaxIn];
  for (int64_t r = 0; r < rows; r += kTileRows) {
    const int strip_rows = static_cast<int>(min(kTileRows, rows - r));
    if (strip_rows < kTileRows && k > 0) {  // (k == 0: x may be null, and memcpy must not get it)
      std::memset(padded, 0, sizeof(float) * kTileRows * k);
      for (int i = 0; i < strip_rows; ++i) {
        std::memcpy(padded + i * k, x + (r + i) * ldx, sizeof(float) * k);
      }
    }
    for (int64_t j = 0; j < n; j += kNarrowGemmPanel) {
      strip(x + r * ldx, ldx, strip_rows, k, packed + (j / kNarrowGemmPanel) * k * kNarrowGemmPanel,
            bias ? bias + j : nullptr, min(kNarrowGemmPanel, n - j), relu, out + r * ldo + j, ldo, padded);
    }
  }
}

}  // namespace hypatia::ops
