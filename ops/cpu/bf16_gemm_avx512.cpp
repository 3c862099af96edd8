// The bfloat16 GEMM of ops/cpu/bf16_gemm.h: a tile of up to 6 rows x 64 columns of the output in
// 24 AVX-512 registers, over k two at a time: vdpbf16ps adds x[k] w[k] + x[k+1] w[k+1] to each fp32
// lane, the instruction oneDNN's own bf16 GEMM (eager's) runs on such CPUs. The weight gradient
// takes the same instruction over pairs of rows. Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512bf16; called only where bf16_gemm_supported(). No
// templates or inline functions from headers: their instances here would be AVX-512 code that the
// linker may pick for every caller.
#include "ops/cpu/bf16_gemm.h"

#include <immintrin.h>

#include <cstring>

namespace hypatia::ops {
namespace {

constexpr int kTileRows = 6;
constexpr int kTilePanels = 4;  // 64 output columns
// Rows that pass one tile's packed weight before the next tile starts: measured on the EPYC, 192 ran
// at 210-226 GFLOP/s from k = 784 to 4096, within 3% of the best chunk for each.
constexpr int64_t kChunkRows = 32 * kTileRows;

int64_t min(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Elements of one packed panel: ceil(k / 2) pairs of 16 columns (bf16_packed_elements' count per
// panel; not called here, being a header's inline function).
int64_t panel_elements(int64_t k) {
  return (k + 1) / 2 * 2 * kBf16GemmPanel;
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

// The `lanes` first elements of rows `first` and `second` (null: zeros) as vdpbf16ps pairs: element
// 2i of the result is element i of first, 2i + 1 element i of second.
__m512i interleave_rows(const uint16_t* first, const uint16_t* second, __mmask16 lanes) {
  alignas(64) static const uint16_t kInterleave[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                       8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i a = first ? _mm512_maskz_loadu_epi16(lanes, first) : _mm512_setzero_si512();
  const __m512i b = second ? _mm512_maskz_loadu_epi16(lanes, second) : _mm512_setzero_si512();
  return _mm512_permutex2var_epi16(a, _mm512_load_si512(kInterleave), b);
}

// v[r] (16 32-bit elements each) becomes its transpose: element c of v[r] is element r of the old v[c].
// The zero-masked forms with every lane set: GCC 12 warns on the plain ones' undefined pass-through.
void transpose_16x16_epi32(__m512i (&v)[16]) {
  constexpr __mmask16 all32 = 0xffff;
  constexpr __mmask8 all64 = 0xff;
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {  // 32-bit elements of row pairs interleaved
    t[i] = _mm512_maskz_unpacklo_epi32(all32, v[i], v[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(all32, v[i], v[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {  // then 64-bit ones
    v[i] = _mm512_maskz_unpacklo_epi64(all64, t[i], t[i + 2]);
    v[i + 1] = _mm512_maskz_unpackhi_epi64(all64, t[i], t[i + 2]);
    v[i + 2] = _mm512_maskz_unpacklo_epi64(all64, t[i + 1], t[i + 3]);
    v[i + 3] = _mm512_maskz_unpackhi_epi64(all64, t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 16; h += 8) {  // then 128-bit lanes, twice
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_maskz_shuffle_i32x4(all32, v[h + i], v[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_maskz_shuffle_i32x4(all32, v[h + i], v[h + i + 4], 0xdd);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    v[i] = _mm512_maskz_shuffle_i32x4(all32, t[i], t[i + 8], 0x88);
    v[i + 8] = _mm512_maskz_shuffle_i32x4(all32, t[i], t[i + 8], 0xdd);
  }
}

// acc[r][q] += x row r (of R, `ldx` apart) times panel q (of P, `panel_stride` apart), over k.
template <int R, int P>
void tile(const uint16_t* x, int64_t ldx, int64_t k, const uint16_t* panel, int64_t panel_stride,
          __m512 (&acc)[kTileRows][kTilePanels]) {
  __m512 c[R][P];  // a local copy: GCC keeps it in registers
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
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
    for (int r = 0; r < R; ++r) {
      const __m512bh a = x_pair(x + r * ldx);
#pragma GCC unroll 4
      for (int q = 0; q < P; ++q) {
        c[r][q] = _mm512_dpbf16_ps(c[r][q], a, w[q]);
      }
    }
  };
  const int64_t pairs = k / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    step(panel + p * 2 * kBf16GemmPanel, [&](const uint16_t* row) { return pair(row + 2 * p); });
  }
  if (k % 2 != 0) {  // the last x alone: the element after it may lie past the row
    step(panel + pairs * 2 * kBf16GemmPanel,
         [&](const uint16_t* row) { return (__m512bh)_mm512_set1_epi32(row[k - 1]); });
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      acc[r][q] = c[r][q];
    }
  }
}

// Output rows [0, R), columns [0, cols) (cols <= 16 P) of P panels from x rows [0, R).
template <int R, int P>
void strip(const uint16_t* x, int64_t ldx, int64_t k, const uint16_t* panel, int64_t panel_stride,
           const float* bias, int64_t cols, bool relu, uint16_t* out, int64_t ldo) {
  __m512 acc[kTileRows][kTilePanels];
  for (int q = 0; q < P; ++q) {
    const __m512 b = bias ? _mm512_maskz_loadu_ps(first_lanes(cols - 16 * q), bias + 16 * q) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      acc[r][q] = b;
    }
  }
  tile<R, P>(x, ldx, k, panel, panel_stride, acc);
  const __m512 zero = _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
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

// strip<R, P> of `rows` (1 to 6) x `panels` (1 to 4).
void strip_of(int64_t rows, int64_t panels, const uint16_t* x, int64_t ldx, int64_t k, const uint16_t* panel,
              int64_t panel_stride, const float* bias, int64_t cols, bool relu, uint16_t* out, int64_t ldo) {
  using Strip = void (*)(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, const float*, int64_t, bool,
                         uint16_t*, int64_t);
  static constexpr Strip kStrips[kTileRows][kTilePanels] = {
      {strip<1, 1>, strip<1, 2>, strip<1, 3>, strip<1, 4>}, {strip<2, 1>, strip<2, 2>, strip<2, 3>, strip<2, 4>},
      {strip<3, 1>, strip<3, 2>, strip<3, 3>, strip<3, 4>}, {strip<4, 1>, strip<4, 2>, strip<4, 3>, strip<4, 4>},
      {strip<5, 1>, strip<5, 2>, strip<5, 3>, strip<5, 4>}, {strip<6, 1>, strip<6, 2>, strip<6, 3>, strip<6, 4>}};
  kStrips[rows - 1][panels - 1](x, ldx, k, panel, panel_stride, bias, cols, relu, out, ldo);
}

// Features rounded up to whole 16-lane vectors (narrow_grad_padded, a header's inline function).
int64_t padded(int64_t features) {
  return (features + kBf16GemmPanel - 1) / kBf16GemmPanel * kBf16GemmPanel;
}

// Rows r and r + 1 of src (`cols` columns, rows `ld` apart; a row at or past `rows` reads as zeros)
// as vdpbf16ps pairs: lane i of 16-lane vector v holds (src[r][16v + i], src[r + 1][16v + i]).
void pack_row_pair(const uint16_t* src, int64_t ld, int64_t r, int64_t rows, int64_t cols, uint16_t* dst) {
  for (int64_t c = 0; c < cols; c += kBf16GemmPanel) {
    const uint16_t* first = r < rows ? src + r * ld + c : nullptr;
    const uint16_t* second = r + 1 < rows ? src + (r + 1) * ld + c : nullptr;
    _mm512_storeu_si512(dst + 2 * c, interleave_rows(first, second, first_lanes(cols - c)));
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
      acc[j][q] = _mm512_loadu_ps(sums + (n0 + j) * ld_sums + kBf16GemmPanel * (v0 + q));
    }
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh h[P];
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      h[q] = (__m512bh)_mm512_loadu_si512(h_pairs + p * h_stride + 2 * kBf16GemmPanel * (v0 + q));
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
      _mm512_storeu_ps(sums + (n0 + j) * ld_sums + kBf16GemmPanel * (v0 + q), acc[j][q]);
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

void pack_bf16_weight(const uint16_t* w, int64_t ld, bool inputs_major, int64_t n, int64_t k, int64_t first_panel,
                      int64_t end_panel, uint16_t* packed) {
  const int64_t panel_stride = panel_elements(k);
  for (int64_t p = first_panel; p < end_panel; ++p) {
    const int64_t c0 = p * kBf16GemmPanel;
    const __mmask16 lanes = first_lanes(n - c0);
    uint16_t* panel = packed + p * panel_stride;
    if (inputs_major) {  // the pair's two input features are two rows of w: interleaved
      for (int64_t i = 0; i < k; i += 2) {
        const uint16_t* first = w + i * ld + c0;
        const uint16_t* second = i + 1 < k ? first + ld : nullptr;
        _mm512_storeu_si512(panel + i * kBf16GemmPanel, interleave_rows(first, second, lanes));
      }
      continue;
    }
    // Else the pair's two input features are adjacent in each column's row of w, one 32-bit
    // element: blocks of 16 pairs of 16 rows, transposed.
    for (int64_t i = 0; i < k; i += 2 * kBf16GemmPanel) {
      const int64_t count = min(2 * kBf16GemmPanel, k - i);  // odd k: the last pair's second half zero
      const __mmask32 elements = count >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << count) - 1);
      __m512i block[kBf16GemmPanel];  // unrolled, to stay in registers
#pragma GCC unroll 16
      for (int c = 0; c < kBf16GemmPanel; ++c) {
        block[c] = c0 + c < n ? _mm512_maskz_loadu_epi16(elements, w + (c0 + c) * ld + i) : _mm512_setzero_si512();
      }
      transpose_16x16_epi32(block);
      for (int64_t pair = 0; pair < (count + 1) / 2; ++pair) {
        _mm512_storeu_si512(panel + (i + 2 * pair) * kBf16GemmPanel, block[pair]);
      }
    }
  }
}

void bf16_gemm_act(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, const uint16_t* packed,
                   const float* bias, int64_t n, bool relu, uint16_t* out, int64_t ldo) {
  const int64_t panel_stride = panel_elements(k);
  // Chunks of rows; in each, tiles of 64 columns outside and strips of 6 rows inside, so that a
  // tile's packed weight (64 columns by k) stays in L2 while every strip of the chunk passes it.
  for (int64_t chunk = 0; chunk < rows; chunk += kChunkRows) {
    const int64_t chunk_end = min(rows, chunk + kChunkRows);
    for (int64_t j = 0; j < n; j += kTilePanels * kBf16GemmPanel) {
      const int64_t cols = min(kTilePanels * kBf16GemmPanel, n - j);
      const uint16_t* panel = packed + (j / kBf16GemmPanel) * panel_stride;
      const float* b = bias ? bias + j : nullptr;
      for (int64_t r = chunk; r < chunk_end; r += kTileRows) {
        strip_of(min(kTileRows, chunk_end - r), (cols + kBf16GemmPanel - 1) / kBf16GemmPanel, x + r * ldx, ldx, k,
                 panel, panel_stride, b, cols, relu, out + r * ldo + j, ldo);
      }
    }
  }
}

void narrow_weight_grad_bf16(
    const uint16_t* g, int64_t ldg, const uint16_t* h, int64_t ldh, int64_t rows, int64_t n, int64_t k, float* sums,
    int64_t ld_sums, float* bias_sums, uint16_t* scratch) {
  const int64_t n_vectors = padded(n) / kBf16GemmPanel, k_vectors = padded(k) / kBf16GemmPanel;
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
    for (int64_t n0 = 0; n0 < n_vectors * kBf16GemmPanel; n0 += kTileRows) {
      const int64_t tile_rows = min(kTileRows, n_vectors * kBf16GemmPanel - n0);
      for (int64_t v0 = 0; v0 < k_vectors; v0 += kTilePanels) {
        grad_tile_of(tile_rows, min(kTilePanels, k_vectors - v0), g_pairs, g_stride, h_pairs, h_stride, pairs, n0, v0,
                     sums, ld_sums);
      }
    }
    if (bias_sums != nullptr) {  // g's pairs times 1.0: g[r][i] + g[r + 1][i] added in fp32
      for (int64_t v = 0; v < n_vectors; ++v) {
        __m512 acc = _mm512_loadu_ps(bias_sums + kBf16GemmPanel * v);
        for (int64_t p = 0; p < pairs; ++p) {
          acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(g_pairs + p * g_stride + 2 * kBf16GemmPanel * v), ones);
        }
        _mm512_storeu_ps(bias_sums + kBf16GemmPanel * v, acc);
      }
    }
  }
}

}  // namespace hypatia::ops
