// The narrow bfloat16 GEMM of ops/cpu/narrow_gemm.h: a 6-row x 64-column tile of the output in 24
// AVX-512 registers, over k two at a time: vdpbf16ps adds x[k] w[k] + x[k+1] w[k+1] to each fp32
// lane, the instruction oneDNN's own bf16 GEMM (eager's) runs on such CPUs. The weight gradient
// takes the same instruction over pairs of rows. Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512bf16; called only where narrow_gemm_bf16_supported(). No
// templates or inline functions from headers: their instances here would be AVX-512 code that the
// linker may pick for every caller.
#include "ops/cpu/narrow_gemm.h"

#include <immintrin.h>

#include <cstring>

namespace hypatia::ops {
namespace {

constexpr int kTileRows = 6;
constexpr int kTilePanels = 4;  // 64 output columns

int64_t min(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Elements of one packed panel: ceil(k / 2) pairs of rows of k, 16 columns each (as
// narrow_packed_bf16_elements counts them; not called here, being a header's inline function).
int64_t panel_elements(int64_t k) {
  return (k + 1) / 2 * 2 * kNarrowGemmPanel;
}

// Lanes [0, count) of 16.
__mmask16 first_lanes(int64_t count) {
  return count <= 0 ? 0 : count >= 16 ? 0xffff : static_cast<__mmask16>((1u << count) - 1);
}

// x[0], x[1] as one 32-bit lane (x[0] in the low half, as vdpbf16ps pairs them), broadcast.
__m512bh pair(const uint16_t* x) {
  uint32_t v;
  std::memcpy(&v, x, sizeof v);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(v));
}

// acc[r][q] += x row r (of 6, `ldx` apart) times panel q (of P, `panel_stride` apart), over k.
template <int P>
void tile6(const uint16_t* x, int64_t ldx, int64_t k, const uint16_t* panel, int64_t panel_stride,
           __m512 (&acc)[kTileRows][kTilePanels]) {
  __m512 c[kTileRows][P];  // a local copy: GCC keeps it in registers
#pragma GCC unroll 6
  for (int r = 0; r < kTileRows; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      c[r][q] = acc[r][q];
    }
  }
  auto step = [&](const uint16_t* w_pairs, auto x_pair) {
    __m512bh w[P];
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      w[q] = (__m512bh)_mm512_loadu_si512(w_pairs + q * panel_stride);
    }
#pragma GCC unroll 6
    for (int r = 0; r < kTileRows; ++r) {
      const __m512bh a = x_pair(x + r * ldx);
#pragma GCC unroll 4
      for (int q = 0; q < P; ++q) {
        c[r][q] = _mm512_dpbf16_ps(c[r][q], a, w[q]);
      }
    }
  };
  const int64_t pairs = k / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    step(panel + p * 2 * kNarrowGemmPanel, [&](const uint16_t* row) { return pair(row + 2 * p); });
  }
  if (k % 2 != 0) {  // the last x alone: the element after it may lie past the row
    step(panel + pairs * 2 * kNarrowGemmPanel,
         [&](const uint16_t* row) { return (__m512bh)_mm512_set1_epi32(row[k - 1]); });
  }
#pragma GCC unroll 6
  for (int r = 0; r < kTileRows; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      acc[r][q] = c[r][q];
    }
  }
}

// Output rows [0, rows) (rows <= 6), columns [0, cols) (cols <= 16 P) of P panels from x rows
// [0, rows). A short strip runs on `padded`, a zero-padded copy of its x rows, k apart.
template <int P>
void strip(const uint16_t* x, int64_t ldx, int rows, int64_t k, const uint16_t* panel, int64_t panel_stride,
           const float* bias, int64_t cols, bool relu, uint16_t* out, int64_t ldo, const uint16_t* padded) {
  __m512 acc[kTileRows][kTilePanels];
  for (int q = 0; q < P; ++q) {
    const __m512 b = bias ? _mm512_maskz_loadu_ps(first_lanes(cols - 16 * q), bias + 16 * q) : _mm512_setzero_ps();
    for (int r = 0; r < kTileRows; ++r) {
      acc[r][q] = b;
    }
  }
  if (rows == kTileRows) {
    tile6<P>(x, ldx, k, panel, panel_stride, acc);
  } else {
    tile6<P>(padded, k, k, panel, panel_stride, acc);
  }
  const __m512 zero = _mm512_setzero_ps();
  for (int r = 0; r < rows; ++r) {
    for (int q = 0; q < P; ++q) {
      // max(0, v) returns its second operand when either is NaN: NaN stays NaN (the zero-masked
      // form with every lane set: GCC 12's _mm512_max_ps warns on its undefined pass-through). The
      // fp32 sum is rounded to bfloat16 once, to nearest even, as eager rounds its GEMM's output.
      const __m512 v = relu ? _mm512_maskz_max_ps(0xffff, zero, acc[r][q]) : acc[r][q];
      const __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
      _mm256_mask_storeu_epi16(out + r * ldo + 16 * q, first_lanes(cols - 16 * q), h);
    }
  }
}

// Features rounded up to whole 16-lane vectors (narrow_grad_padded, a header's inline function).
int64_t padded(int64_t features) {
  return (features + kNarrowGemmPanel - 1) / kNarrowGemmPanel * kNarrowGemmPanel;
}

// Rows r and r + 1 of src (`cols` columns, rows `ld` apart; a row at or past `rows` reads as zeros)
// as vdpbf16ps pairs: lane i of 16-lane vector v holds (src[r][16v + i], src[r + 1][16v + i]).
void pack_row_pair(const uint16_t* src, int64_t ld, int64_t r, int64_t rows, int64_t cols, uint16_t* dst) {
  // Element 2i of the result is element i of the first row, 2i + 1 element i of the second (index 32 + i).
  alignas(64) static const uint16_t kInterleave[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                       8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  for (int64_t v = 0; v * kNarrowGemmPanel < cols; ++v) {
    const __mmask16 lanes = first_lanes(cols - kNarrowGemmPanel * v);
    const int64_t c = kNarrowGemmPanel * v;
    const __m512i first = r < rows ? _mm512_maskz_loadu_epi16(lanes, src + r * ld + c) : _mm512_setzero_si512();
    const __m512i second = r + 1 < rows ? _mm512_maskz_loadu_epi16(lanes, src + (r + 1) * ld + c) : _mm512_setzero_si512();
    _mm512_storeu_si512(dst + 2 * c, _mm512_permutex2var_epi16(first, interleave, second));
  }
}

// sums rows [n0, n0 + R), vectors [v0, v0 + P) += the products of `pairs` packed row pairs of g
// (its column pairs `g_stride` elements a pair) and of h (`h_stride`).
template <int R, int P>
void grad_tile(const uint16_t* g_pairs, int64_t g_stride, const uint16_t* h_pairs, int64_t h_stride, int64_t pairs,
               int64_t n0, int64_t v0, float* sums, int64_t ld_sums) {
  __m512 acc[R][P];
#pragma GCC unroll 6
  for (int j = 0; j < R; ++j) {
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      acc[j][q] = _mm512_loadu_ps(sums + (n0 + j) * ld_sums + kNarrowGemmPanel * (v0 + q));
    }
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh h[P];
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      h[q] = (__m512bh)_mm512_loadu_si512(h_pairs + p * h_stride + 2 * kNarrowGemmPanel * (v0 + q));
    }
#pragma GCC unroll 6
    for (int j = 0; j < R; ++j) {
      const __m512bh g = pair(g_pairs + p * g_stride + 2 * (n0 + j));
#pragma GCC unroll 4
      for (int q = 0; q < P; ++q) {
        acc[j][q] = _mm512_dpbf16_ps(acc[j][q], g, h[q]);
      }
    }
  }
#pragma GCC unroll 6
  for (int j = 0; j < R; ++j) {
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      _mm512_storeu_ps(sums + (n0 + j) * ld_sums + kNarrowGemmPanel * (v0 + q), acc[j][q]);
    }
  }
}

// grad_tile of `rows` (6, 4 or 2) x `panels` (1 to 4).
void grad_tile_of(int64_t rows, int64_t panels, const uint16_t* g_pairs, int64_t g_stride, const uint16_t* h_pairs,
                  int64_t h_stride, int64_t pairs, int64_t n0, int64_t v0, float* sums, int64_t ld_sums) {
  using Tile = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
  static constexpr Tile kTiles[3][4] = {
      {grad_tile<2, 1>, grad_tile<2, 2>, grad_tile<2, 3>, grad_tile<2, 4>},
      {grad_tile<4, 1>, grad_tile<4, 2>, grad_tile<4, 3>, grad_tile<4, 4>},
      {grad_tile<6, 1>, grad_tile<6, 2>, grad_tile<6, 3>, grad_tile<6, 4>}};
  kTiles[rows / 2 - 1][panels - 1](g_pairs, g_stride, h_pairs, h_stride, pairs, n0, v0, sums, ld_sums);
}

}  // namespace

void pack_narrow_weight_bf16(const uint16_t* w, int64_t ldw, int64_t n, int64_t k, uint16_t* packed) {
  const int64_t panel_stride = panel_elements(k);
  std::memset(packed, 0, (n + kNarrowGemmPanel - 1) / kNarrowGemmPanel * panel_stride * sizeof(uint16_t));
  for (int64_t c = 0; c < n; ++c) {
    uint16_t* column = packed + (c / kNarrowGemmPanel) * panel_stride + (c % kNarrowGemmPanel) * 2;
    for (int64_t kk = 0; kk < k; ++kk) {
      column[(kk / 2) * 2 * kNarrowGemmPanel + kk % 2] = w[c * ldw + kk];
    }
  }
}

void narrow_gemm_act_bf16(
    const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, const uint16_t* packed, const float* bias, int64_t n,
    bool relu, uint16_t* out, int64_t ldo) {
  const int64_t panel_stride = panel_elements(k);
  // Row strips outside, column tiles inside: a strip's x rows stay in L1 across every tile.
  uint16_t padded[kTileRows * kNarrowGemmMaxIn];
  for (int64_t r = 0; r < rows; r += kTileRows) {
    const int strip_rows = static_cast<int>(min(kTileRows, rows - r));
    if (strip_rows < kTileRows) {
      std::memset(padded, 0, sizeof(uint16_t) * kTileRows * k);
      for (int i = 0; i < strip_rows; ++i) {
        std::memcpy(padded + i * k, x + (r + i) * ldx, sizeof(uint16_t) * k);
      }
    }
    for (int64_t j = 0; j < n; j += kTilePanels * kNarrowGemmPanel) {
      const int64_t cols = min(kTilePanels * kNarrowGemmPanel, n - j);
      const uint16_t* panel = packed + (j / kNarrowGemmPanel) * panel_stride;
      const float* b = bias ? bias + j : nullptr;
      uint16_t* o = out + r * ldo + j;
      switch ((cols + kNarrowGemmPanel - 1) / kNarrowGemmPanel) {
        case 1: strip<1>(x + r * ldx, ldx, strip_rows, k, panel, panel_stride, b, cols, relu, o, ldo, padded); break;
        case 2: strip<2>(x + r * ldx, ldx, strip_rows, k, panel, panel_stride, b, cols, relu, o, ldo, padded); break;
        case 3: strip<3>(x + r * ldx, ldx, strip_rows, k, panel, panel_stride, b, cols, relu, o, ldo, padded); break;
        default: strip<4>(x + r * ldx, ldx, strip_rows, k, panel, panel_stride, b, cols, relu, o, ldo, padded); break;
      }
    }
  }
}

void narrow_weight_grad_bf16(
    const uint16_t* g, int64_t ldg, const uint16_t* h, int64_t ldh, int64_t rows, int64_t n, int64_t k, float* sums,
    int64_t ld_sums, float* bias_sums, uint16_t* scratch) {
  const int64_t n_vectors = padded(n) / kNarrowGemmPanel, k_vectors = padded(k) / kNarrowGemmPanel;
  const int64_t g_stride = 2 * padded(n), h_stride = 2 * padded(k);  // elements of one packed pair
  uint16_t* g_pairs = scratch;
  uint16_t* h_pairs = scratch + kNarrowGradChunkRows / 2 * g_stride;
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);  // bfloat16 1.0
  // Chunks of rows packed into pairs (zero-padded past the rows and the columns), then every tile of the sums
  // (6 rows x 64 columns) over the chunk while its packs are in cache.
  for (int64_t r = 0; r < rows; r += kNarrowGradChunkRows) {
    const int64_t pairs = (min(kNarrowGradChunkRows, rows - r) + 1) / 2;
    for (int64_t p = 0; p < pairs; ++p) {
      pack_row_pair(g, ldg, r + 2 * p, rows, n, g_pairs + p * g_stride);
      pack_row_pair(h, ldh, r + 2 * p, rows, k, h_pairs + p * h_stride);
    }
    // Tiles of 6 rows of the sums; the padded rows, a multiple of 16, leave 0, 2 or 4 for a last tile.
    for (int64_t n0 = 0; n0 < n_vectors * kNarrowGemmPanel; n0 += kTileRows) {
      const int64_t tile_rows = min(kTileRows, n_vectors * kNarrowGemmPanel - n0);
      for (int64_t v0 = 0; v0 < k_vectors; v0 += kTilePanels) {
        grad_tile_of(tile_rows, min(kTilePanels, k_vectors - v0), g_pairs, g_stride, h_pairs, h_stride, pairs, n0, v0,
                     sums, ld_sums);
      }
    }
    if (bias_sums != nullptr) {  // g's pairs times 1.0: g[r][i] + g[r + 1][i] added in fp32
      for (int64_t v = 0; v < n_vectors; ++v) {
        __m512 acc = _mm512_loadu_ps(bias_sums + kNarrowGemmPanel * v);
        for (int64_t p = 0; p < pairs; ++p) {
          acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(g_pairs + p * g_stride + 2 * kNarrowGemmPanel * v), ones);
        }
        _mm512_storeu_ps(bias_sums + kNarrowGemmPanel * v, acc);
      }
    }
  }
}

}  // namespace hypatia::ops
