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

// 16 bfloat16 values as fp32: each one's bits in the high half of a 32-bit lane.
__m512 to_fp32(__m256i bf16) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, bf16), 16));
}

// x[0], x[1] as one 32-bit lane (x[0] in the low half, as vdpbf16ps pairs them), broadcast.
__m512bh pair(const uint16_t* x) {
  uint32_t v;
  std::memcpy(&v, x, sizeof v);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(v));
}

// The `lanes` first elements of rows `first` and `second` (null: zeros) as vdpbf16ps pairs: element
// 2i of the result is element i of first, 2i + 1 element i of second (each widened to 32 bits, the
// second shifted into the high half).
__m512i interleave_rows(const uint16_t* first, const uint16_t* second, __mmask16 lanes) {
  // The zero-masked forms with every lane set: GCC 12 warns on the plain ones' undefined pass-through.
  auto widened = [&](const uint16_t* row) {
    return row ? _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(lanes, row)) : _mm512_setzero_si512();
  };
  const __m512i a = widened(first), b = widened(second);
  return _mm512_or_si512(a, _mm512_maskz_slli_epi32(0xffff, b, 16));
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

// Output rows [0, R), columns [0, cols) (cols <= 16 P) of P panels (`panel_stride` apart) from x
// rows [0, R) (`ldx` apart), over k. The accumulators start from the bias and stay in registers to
// the epilogue: a start from memory cost 1-2% of a 256-deep strip.
template <int R, int P>
void strip(const uint16_t* x, int64_t ldx, int64_t k, const uint16_t* panel, int64_t panel_stride,
           const Bf16Epilogue& e, int64_t cols, uint16_t* out, int64_t ldo) {
  __m512 c[R][P];
#pragma GCC unroll 4
  for (int q = 0; q < P; ++q) {
    const __m512 b = e.bias ? _mm512_maskz_loadu_ps(first_lanes(cols - 16 * q), e.bias + 16 * q) : _mm512_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      c[r][q] = b;
    }
  }
  if (e.relu_out != nullptr) {
    // The saved output's rows are 128 bytes here, a row apart: fetched from memory while the sums
    // run, not stalling the epilogue.
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const char* row = reinterpret_cast<const char*>(e.relu_out + r * e.ld_relu_out);
      _mm_prefetch(row, _MM_HINT_T0);
      _mm_prefetch(row + 32 * P - 1, _MM_HINT_T0);
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
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int q = 0; q < P; ++q) {
    const __mmask16 lanes = first_lanes(cols - 16 * q);
    __m512 column_sum = zero;
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      // max(0, v) returns its second operand when either is NaN: NaN stays NaN (the zero-masked
      // form with every lane set: GCC 12's _mm512_max_ps warns on its undefined pass-through). The
      // fp32 sum is rounded to bfloat16 once, to nearest even, as eager rounds its GEMM's output.
      const __m512 v = e.relu ? _mm512_maskz_max_ps(0xffff, zero, c[r][q]) : c[r][q];
      __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
      if (e.relu_out != nullptr) {
        // threshold_backward's test, out <= 0, false for NaN: so kept where not (out <= 0).
        const __m512 saved = to_fp32(_mm256_maskz_loadu_epi16(lanes, e.relu_out + r * e.ld_relu_out + 16 * q));
        h = _mm256_maskz_mov_epi16(_mm512_cmp_ps_mask(saved, zero, _CMP_NLE_UQ), h);
      }
      _mm256_mask_storeu_epi16(out + r * ldo + 16 * q, lanes, h);
      if (e.column_sums != nullptr) {  // of the rounded outputs, as ATen's sum of the stored tensor
        column_sum = _mm512_add_ps(column_sum, to_fp32(h));
      }
    }
    if (e.column_sums != nullptr) {
      float* sums = e.column_sums + 16 * q;
      _mm512_mask_storeu_ps(sums, lanes, _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, sums), column_sum));
    }
  }
}

// strip<R, P> of `rows` (1 to 6) x `panels` (1 to 4).
void strip_of(int64_t rows, int64_t panels, const uint16_t* x, int64_t ldx, int64_t k, const uint16_t* panel,
              int64_t panel_stride, const Bf16Epilogue& e, int64_t cols, uint16_t* out, int64_t ldo) {
  using Strip = void (*)(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, const Bf16Epilogue&, int64_t,
                         uint16_t*, int64_t);
  static constexpr Strip kStrips[kTileRows][kTilePanels] = {
      {strip<1, 1>, strip<1, 2>, strip<1, 3>, strip<1, 4>}, {strip<2, 1>, strip<2, 2>, strip<2, 3>, strip<2, 4>},
      {strip<3, 1>, strip<3, 2>, strip<3, 3>, strip<3, 4>}, {strip<4, 1>, strip<4, 2>, strip<4, 3>, strip<4, 4>},
      {strip<5, 1>, strip<5, 2>, strip<5, 3>, strip<5, 4>}, {strip<6, 1>, strip<6, 2>, strip<6, 3>, strip<6, 4>}};
  kStrips[rows - 1][panels - 1](x, ldx, k, panel, panel_stride, e, cols, out, ldo);
}

// Features rounded up to whole 16-lane vectors (bf16_grad_padded, a header's inline function).
int64_t padded(int64_t features) {
  return (features + kBf16GemmPanel - 1) / kBf16GemmPanel * kBf16GemmPanel;
}

// Rows [r0, r0 + 2 pairs) of src's columns [0, cols) as vdpbf16ps pairs, in whole vectors of 16 (zeros
// past cols, and for rows at or past `rows`): pair p at dst + p * stride holds (src[r][c],
// src[r + 1][c]) for each column c.
void pack_pairs(const uint16_t* src, int64_t ld, int64_t r0, int64_t rows, int64_t pairs, int64_t cols, uint16_t* dst,
                int64_t stride) {
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t r = r0 + 2 * p;
    const uint16_t* first = r < rows ? src + r * ld : nullptr;
    const uint16_t* second = r + 1 < rows ? src + (r + 1) * ld : nullptr;
    for (int64_t c = 0; c < cols; c += kBf16GemmPanel) {
      _mm512_storeu_si512(dst + p * stride + 2 * c, interleave_rows(first ? first + c : nullptr,
                                                                    second ? second + c : nullptr, first_lanes(cols - c)));
    }
  }
}

// Rows [first, end) of src's columns [0, cols), rows `ld` elements apart, into the caches.
void prefetch_rows(const uint16_t* src, int64_t ld, int64_t first, int64_t end, int64_t cols) {
  const int64_t bytes = cols * static_cast<int64_t>(sizeof(uint16_t));
  for (int64_t r = first; r < end; ++r) {
    const char* row = reinterpret_cast<const char*>(src + r * ld);
    for (int64_t b = 0; b < bytes; b += 64) {
      _mm_prefetch(row + b, _MM_HINT_T0);
    }
    _mm_prefetch(row + bytes - 1, _MM_HINT_T0);  // the row's last line, where it starts mid-line
  }
}

// out rows [0, R), columns [0, 16 P) (+)= the products of `pairs` packed row pairs: of g (R 32-bit
// column pairs, `g_stride` elements a pair) and of h (P vectors of 16 column pairs, `h_stride`).
// first: out is overwritten; `next`: the output tile that follows, prefetched while this one
// computes (its lines would otherwise stall the next tile's first loads).
template <int R, int P>
void grad_tile(const uint16_t* g, int64_t g_stride, const uint16_t* h, int64_t h_stride, int64_t pairs, float* out,
               int64_t ldo, bool first, const float* next) {
  if (next != nullptr) {
#pragma GCC unroll 6
    for (int j = 0; j < R; ++j) {
#pragma GCC unroll 4
      for (int q = 0; q < P; ++q) {
        _mm_prefetch(reinterpret_cast<const char*>(next + j * ldo + kBf16GemmPanel * q), _MM_HINT_T0);
      }
    }
  }
  __m512 acc[R][P];
#pragma GCC unroll 6
  for (int j = 0; j < R; ++j) {
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      acc[j][q] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + j * ldo + kBf16GemmPanel * q);
    }
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh hv[P];
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      hv[q] = (__m512bh)_mm512_loadu_si512(h + p * h_stride + 2 * kBf16GemmPanel * q);
    }
#pragma GCC unroll 6
    for (int j = 0; j < R; ++j) {
      const __m512bh gv = pair(g + p * g_stride + 2 * j);
#pragma GCC unroll 4
      for (int q = 0; q < P; ++q) {
        acc[j][q] = _mm512_dpbf16_ps(acc[j][q], gv, hv[q]);
      }
    }
  }
#pragma GCC unroll 6
  for (int j = 0; j < R; ++j) {
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      _mm512_storeu_ps(out + j * ldo + kBf16GemmPanel * q, acc[j][q]);
    }
  }
}

// grad_tile of `rows` (6, 4 or 2: the sums' rows are padded to 16) x `panels` (1 to 4).
void grad_tile_of(int64_t rows, int64_t panels, const uint16_t* g, int64_t g_stride, const uint16_t* h,
                  int64_t h_stride, int64_t pairs, float* out, int64_t ldo, bool first, const float* next) {
  using Tile = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t, bool,
                        const float*);
  static constexpr Tile kTiles[3][4] = {
      {grad_tile<2, 1>, grad_tile<2, 2>, grad_tile<2, 3>, grad_tile<2, 4>},
      {grad_tile<4, 1>, grad_tile<4, 2>, grad_tile<4, 3>, grad_tile<4, 4>},
      {grad_tile<6, 1>, grad_tile<6, 2>, grad_tile<6, 3>, grad_tile<6, 4>}};
  kTiles[rows / 2 - 1][panels - 1](g, g_stride, h, h_stride, pairs, out, ldo, first, next);
}

// The wide weight gradient's blocking, as the float32 one's (f32_weight_grad_avx512.cpp): rows of g
// and h packed at a time (each output tile is loaded and stored once a chunk), and output rows
// packed at a time: their g (1024 x 96 bf16) and one tile's h (1024 x 64) stay in L2 together.
constexpr int64_t kWideGradChunkRows = 1024;
constexpr int64_t kWideGradBlockRows = 16 * kTileRows;
constexpr int64_t kTileCols = kWideGradTileCols;
static_assert(kTileCols == kTilePanels * kBf16GemmPanel);
constexpr int64_t kHStride = kWideGradChunkRows * kTileCols;  // elements of one tile's packed h
constexpr int64_t kPrefetchTiles = 4;  // a block's last tiles, over which the next block's g is prefetched

int64_t column_tiles(int64_t k) {
  return (k + kTileCols - 1) / kTileCols;
}

// One packed vector (64-byte aligned), written past the caches. Each GEMM thread reads every panel,
// the others' too; streamed, the 2-core EPYC's 1024x784->2048 forward ran 1.03-1.07x faster at 2
// threads and 0.99-1.02x at 1 (docs/perf/experiments.md#bf16-weight-packing). The
// likely cause, which this VM has no counters to show: lines left dirty in the other core's cache.
void store_packed(uint16_t* dst, __m512i v) {
  _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), v);
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
        store_packed(panel + i * kBf16GemmPanel, interleave_rows(first, second, lanes));
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
        store_packed(panel + (i + 2 * pair) * kBf16GemmPanel, block[pair]);
      }
    }
  }
  _mm_sfence();  // the streamed stores ordered before whatever tells the GEMM's threads they are done
}

void bf16_gemm_act(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, const uint16_t* packed, int64_t n,
                   const Bf16Epilogue& epilogue, uint16_t* out, int64_t ldo) {
  const int64_t panel_stride = panel_elements(k);
  // Chunks of rows; in each, tiles of 64 columns outside and strips of 6 rows inside, so that a
  // tile's packed weight (64 columns by k) stays in L2 while every strip of the chunk passes it.
  for (int64_t chunk = 0; chunk < rows; chunk += kChunkRows) {
    const int64_t chunk_end = min(rows, chunk + kChunkRows);
    for (int64_t j = 0; j < n; j += kTilePanels * kBf16GemmPanel) {
      const int64_t cols = min(kTilePanels * kBf16GemmPanel, n - j);
      const uint16_t* panel = packed + (j / kBf16GemmPanel) * panel_stride;
      for (int64_t r = chunk; r < chunk_end; r += kTileRows) {
        Bf16Epilogue e = epilogue;  // at the strip's first row and column
        e.bias = e.bias ? e.bias + j : nullptr;
        e.relu_out = e.relu_out ? e.relu_out + r * e.ld_relu_out + j : nullptr;
        e.column_sums = e.column_sums ? e.column_sums + j : nullptr;
        strip_of(min(kTileRows, chunk_end - r), (cols + kBf16GemmPanel - 1) / kBf16GemmPanel, x + r * ldx, ldx, k,
                 panel, panel_stride, e, cols, out + r * ldo + j, ldo);
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
    pack_pairs(g, ldg, r, rows, pairs, n, g_pairs, g_stride);
    pack_pairs(h, ldh, r, rows, pairs, k, h_pairs, h_stride);
    // Tiles of 6 rows of the sums; the padded rows, a multiple of 16, leave 0, 2 or 4 for a last tile.
    for (int64_t n0 = 0; n0 < n_vectors * kBf16GemmPanel; n0 += kTileRows) {
      const int64_t tile_rows = min(kTileRows, n_vectors * kBf16GemmPanel - n0);
      for (int64_t v0 = 0; v0 < k_vectors; v0 += kTilePanels) {
        grad_tile_of(tile_rows, min(kTilePanels, k_vectors - v0), g_pairs + 2 * n0, g_stride,
                     h_pairs + 2 * kBf16GemmPanel * v0, h_stride, pairs, sums + n0 * ld_sums + kBf16GemmPanel * v0,
                     ld_sums, /*first=*/false, /*next=*/nullptr);
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

int64_t wide_weight_grad_scratch_elements(int64_t n, int64_t k) {
  return column_tiles(k) * kHStride + kWideGradChunkRows * min(padded(n), kWideGradBlockRows);
}

void wide_weight_grad_bf16(const uint16_t* g, int64_t ldg, const uint16_t* h, int64_t ldh, int64_t rows, int64_t n,
                           int64_t k, float* sums, int64_t ld_sums, bool accumulate, uint16_t* scratch) {
  const int64_t padded_n = padded(n), k_tiles = column_tiles(k);
  uint16_t* packed_h = scratch;  // [tile][pair][64 column pairs]
  uint16_t* packed_g = packed_h + k_tiles * kHStride;  // [pair][block's column pairs]
  for (int64_t r0 = 0; r0 < rows; r0 += kWideGradChunkRows) {
    const int64_t chunk_rows = min(kWideGradChunkRows, rows - r0), pairs = (chunk_rows + 1) / 2;
    const bool first = r0 == 0 && !accumulate;
    for (int64_t i0 = 0; i0 < padded_n; i0 += kWideGradBlockRows) {
      const int64_t block = min(kWideGradBlockRows, padded_n - i0);  // a multiple of 16
      const int64_t strips = (block + kTileRows - 1) / kTileRows;    // the last of 6, 4 or 2 rows
      pack_pairs(g + i0, ldg, r0, rows, pairs, min(block, n - i0), packed_g, 2 * block);
      // The packs read columns down the rows, a new page every row or two: their sources are
      // prefetched while the tiles before them compute. The next block's g over this block's last
      // tiles (earlier, the packed h streaming through L2 would evict it); in the first block, each
      // tile's h (packed there, for every block) over the tile before.
      const int64_t next_i = i0 + kWideGradBlockRows, prefetch_tiles = min(k_tiles, kPrefetchTiles);
      const int64_t calls = prefetch_tiles * strips;
      // Tiles of 64 columns outside, strips of 6 rows inside: a tile's packed h stays in L2 while
      // every strip of the block passes it.
      for (int64_t t = 0; t < k_tiles; ++t) {
        const int64_t cols = min(kTileCols, k - t * kTileCols);
        if (i0 == 0) {
          pack_pairs(h + t * kTileCols, ldh, r0, rows, pairs, cols, packed_h + t * kHStride, 2 * kTileCols);
        }
        for (int64_t s = 0; s < strips; ++s) {
          const int64_t call = (t - (k_tiles - prefetch_tiles)) * strips + s;
          if (next_i < n && call >= 0) {
            prefetch_rows(g + r0 * ldg + next_i, ldg, chunk_rows * call / calls, chunk_rows * (call + 1) / calls,
                          min(kWideGradBlockRows, n - next_i));
          }
          if (i0 == 0 && t + 1 < k_tiles) {
            prefetch_rows(h + r0 * ldh + (t + 1) * kTileCols, ldh, chunk_rows * s / strips,
                          chunk_rows * (s + 1) / strips, min(kTileCols, k - (t + 1) * kTileCols));
          }
          float* out = sums + (i0 + s * kTileRows) * ld_sums + t * kTileCols;
          const float* next = first ? nullptr
              : s + 1 < strips      ? out + kTileRows * ld_sums
              : t + 1 < k_tiles     ? sums + i0 * ld_sums + (t + 1) * kTileCols
                                    : nullptr;
          grad_tile_of(min(kTileRows, block - s * kTileRows), (cols + kBf16GemmPanel - 1) / kBf16GemmPanel,
                       packed_g + 2 * kTileRows * s, 2 * block, packed_h + t * kHStride, 2 * kTileCols, pairs, out,
                       ld_sums, first, next);
        }
      }
    }
  }
}

}  // namespace hypatia::ops
