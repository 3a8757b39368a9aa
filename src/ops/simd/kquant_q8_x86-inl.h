// The k-quant × q8_K dot products of ops/simd/kquant_q8_x86.cc, included
// there twice: once for AVX-512 (F, BW, DQ, VL) and once more with VNNI,
// whose products take three multiplies per 128 values instead of four
// (vpdpbusd, a pack, vpdpwssd: see Q4Dots; faster prefill). The includer defines
// DSV4_KQ8_TARGET (the target attribute) and DSV4_KQ8_VNNI (0 or 1), and has defined Q4Acts,
// Q4Layout and BlockQ8K's quantisation. No include guard: included once per variant.

#if !DSV4_KQ8_VNNI
// A byte shuffle (within 128-bit lanes): every word of lanes 0–1 becomes byte
// a zero-extended, every word of lanes 2–3 byte b.
DSV4_KQ8_TARGET inline __m512i PairShuffle(int a, int b) {
  const auto word = [](int i) { return static_cast<int16_t>(i | 0x8000); };  // high byte: 0
  return _mm512_inserti64x4(_mm512_set1_epi16(word(a)), _mm256_set1_epi16(word(b)), 1);
}
#endif

// The int32 sums of four vectors, [Σ a, Σ b, Σ c, Σ d] (exact: any order).
DSV4_KQ8_TARGET inline __m128i Sum4(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  const __m512i abcd =
      _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  const __m256i h =
      _mm256_add_epi32(_mm512_castsi512_si256(abcd), _mm512_extracti64x4_epi64(abcd, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

#if DSV4_KQ8_VNNI
// A byte shuffle (within 128-bit lanes): in lanes 0–1 words 0–3 become byte
// a0 and words 4–7 byte b0, zero-extended; in lanes 2–3 bytes a1 and b1.
DSV4_KQ8_TARGET inline __m512i QuadShuffle(int a0, int b0, int a1, int b1) {
  const auto word = [](int i) { return static_cast<int16_t>(i | 0x8000); };  // high byte: 0
  const __m128i lo =
      _mm_set_epi16(word(b0), word(b0), word(b0), word(b0), word(a0), word(a0), word(a0), word(a0));
  const __m128i hi =
      _mm_set_epi16(word(b1), word(b1), word(b1), word(b1), word(a1), word(a1), word(a1), word(a1));
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(lo)),
                            _mm256_broadcastsi128_si256(hi), 1);
}
#endif

// One q4_K block decoded for its products: the codes of values in the
// activations' layout (Q4Acts), each sub-block's scale in the words its
// pair sums land in, the mins, and the f16 scales.
struct Q4Block {
  __m512i q[4], sc[4];
  __m256i m;  // words 0…7: mins (the rest 0)
  float d, dmin;
};

// Blocks are read through byte pointers and offsetof: rows of a GGUF tensor
// need not be aligned for BlockQ4_K's or BlockQ6_K's uint16 members.
DSV4_KQ8_TARGET inline float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 6-bit scales and mins (Q4KScaleMin) as bytes sc0–3, m0–3, sc4–7, m4–7.
DSV4_KQ8_TARGET inline __m128i Q4ScalesMins(const uint8_t* blk) {
  // With the 12 bytes as dwords
  // a, b, c: [a & 0x3f.., b & 0x3f.., (c & 0x0f..) | ((a >> 6) & 3..) << 4,
  // ((c >> 4) & 0x0f..) | ((b >> 6) & 3..) << 4] = bytes sc0–3, m0–3, sc4–7, m4–7.
  // (16 bytes are read: the 4 after the scales are qs, in the block.)
  const __m128i v =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + offsetof(BlockQ4_K, scales)));
  const __m128i x = _mm_shuffle_epi32(v, 0xa4);  // a, b, c, c
  const __m128i y = _mm_shuffle_epi32(v, 0x44);  // a, b, a, b
  const __m128i lo = _mm_and_si128(_mm_srlv_epi32(x, _mm_set_epi32(4, 0, 0, 0)),
                                   _mm_set_epi32(0x0f0f0f0f, 0x0f0f0f0f, 0x3f3f3f3f, 0x3f3f3f3f));
  const __m128i hi = _mm_slli_epi32(
      _mm_and_si128(_mm_srli_epi32(y, 6), _mm_set_epi32(0x03030303, 0x03030303, 0, 0)), 4);
  return _mm_or_si128(lo, hi);
}

// Each sub-block's scale in the words its pair sums land in (Q4Block::sc),
// from `all`: Q4ScalesMins' 16 bytes in every 128-bit lane.
DSV4_KQ8_TARGET inline void Q4ScaleWords(__m512i all, __m512i sc[4]) {
  // Scale j sits in byte j (j < 4) or 4 + j (j ≥ 4); per vector a byte
  // shuffle within 128-bit lanes puts scale a in every word of lanes 0–1 and
  // scale b in lanes 2–3, zero-extended.
#if DSV4_KQ8_VNNI
  // For Q4Dots' packed sums: sub-blocks 0 | 1 in lanes 0–1 and 2 | 3 in lanes
  // 2–3 of the first vector, 4 | 5 and 6 | 7 of the second.
  sc[0] = _mm512_shuffle_epi8(all, QuadShuffle(0, 1, 2, 3));
  sc[1] = _mm512_shuffle_epi8(all, QuadShuffle(8, 9, 10, 11));
#else
  sc[0] = _mm512_shuffle_epi8(all, PairShuffle(0, 2));
  sc[1] = _mm512_shuffle_epi8(all, PairShuffle(1, 3));
  sc[2] = _mm512_shuffle_epi8(all, PairShuffle(8, 10));
  sc[3] = _mm512_shuffle_epi8(all, PairShuffle(9, 11));
#endif
}

// The byte shuffle that takes Q4ScalesMins' mins (bytes 4–7, 12–15) into
// words 0…7, zero-extended.
DSV4_KQ8_TARGET inline __m128i Q4MinsShuffle() {
  return _mm_set_epi8(-128, 15, -128, 14, -128, 13, -128, 12, -128, 7, -128, 6, -128, 5, -128, 4);
}

// The codes 0…15 of a block in the activations' layout (Q4Acts).
DSV4_KQ8_TARGET inline void Q4Codes(const uint8_t* blk, __m512i q[4]) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const uint8_t* qs = blk + offsetof(BlockQ4_K, qs);
  const __m512i q0 = _mm512_loadu_si512(qs), q1 = _mm512_loadu_si512(qs + 64);
  q[0] = _mm512_and_si512(q0, low4);
  q[1] = _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4);
  q[2] = _mm512_and_si512(q1, low4);
  q[3] = _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4);
}

// Q4ScalesMins of four blocks, block r's bytes in 128-bit lane r.
DSV4_KQ8_TARGET inline __m512i Q4ScalesMins4(const uint8_t* const blk[4]) {
  const auto at = [&](int r) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[r] + offsetof(BlockQ4_K, scales)));
  };
  __m512i v = _mm512_castsi128_si512(at(0));
  v = _mm512_inserti32x4(v, at(1), 1);
  v = _mm512_inserti32x4(v, at(2), 2);
  v = _mm512_inserti32x4(v, at(3), 3);
  // Q4ScalesMins' steps per lane.
  const __m512i x = _mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(0xa4));
  const __m512i y = _mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(0x44));
  const __m512i lo = _mm512_and_si512(
      _mm512_srlv_epi32(x, _mm512_broadcast_i32x4(_mm_set_epi32(4, 0, 0, 0))),
      _mm512_broadcast_i32x4(_mm_set_epi32(0x0f0f0f0f, 0x0f0f0f0f, 0x3f3f3f3f, 0x3f3f3f3f)));
  const __m512i hi = _mm512_slli_epi32(
      _mm512_and_si512(_mm512_srli_epi32(y, 6),
                       _mm512_broadcast_i32x4(_mm_set_epi32(0x03030303, 0x03030303, 0, 0))),
      4);
  return _mm512_or_si512(lo, hi);
}

DSV4_KQ8_TARGET inline Q4Block DecodeQ4(const uint8_t* blk) {
  Q4Block w;
  const __m128i scm = Q4ScalesMins(blk);
  Q4ScaleWords(_mm512_broadcast_i32x4(scm), w.sc);
  w.m = _mm256_zextsi128_si256(_mm_shuffle_epi8(scm, Q4MinsShuffle()));
  Q4Codes(blk, w.q);
  w.d = F16At(blk + offsetof(BlockQ4_K, d));
  w.dmin = F16At(blk + offsetof(BlockQ4_K, dmin));
  return w;
}

// isum's lanes: Σ sc · codes · activations of one block and token, for the
// code vectors q[4] (q4_K or q6_K), their scales' words sc (DecodeQ4/DecodeQ6
// lay them out per copy) and the activation vectors a[4] in the codes' order.
DSV4_KQ8_TARGET inline __m512i BlockDots(const __m512i q[4], const __m512i sc[4],
                                         const __m512i a[4]) {
#if DSV4_KQ8_VNNI
  // Four codes × activations per dword (vpdpbusd, ≤ 4·63·127), two vectors'
  // dwords packed into words (exact), then × the scales (vpdpwssd): three
  // multiplies per 128 values instead of four.
  __m512i r[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[i], a[i]);
  const __m512i acc =
      _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(r[0], r[1]), sc[0]);
  return _mm512_dpwssd_epi32(acc, _mm512_packs_epi32(r[2], r[3]), sc[1]);
#else
  // Pair sums of codes × activations (vpmaddubsw), × the scales (vpmaddwd).
  __m512i acc = _mm512_setzero_si512();
  for (int i = 0; i < 4; ++i) {
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(q[i], a[i]), sc[i]));
  }
  return acc;
#endif
}

DSV4_KQ8_TARGET inline __m512i Q4Dots(const Q4Block& w, const Q4Acts& x) {
  __m512i a[4];
  for (int i = 0; i < 4; ++i) a[i] = _mm512_load_si512(x.v[i]);
  return BlockDots(w.q, w.sc, a);
}

// isum's lanes (s) and imin's (words: m[j]·bsum32[j] pairs) of one block and token.
DSV4_KQ8_TARGET inline void Q4Products(const Q4Block& w, const Q4Acts& x, __m512i* s,
                                       __m256i* mins) {
  *s = Q4Dots(w, x);
  *mins = _mm256_madd_epi16(
      w.m, _mm256_zextsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(x.bsum32))));
}

// ---------------------------------------------------------------------------
// q6_K. A 64-byte load of ql[64h…64h + 63] holds, in its low nibbles, the low
// bits of values 128h…128h + 63 in order, and in its high nibbles those of
// values 128h + 64…128h + 127; their high 2 bits are bit pairs 0–3 of
// qh[32h…32h + 31]. The activations are in value order (BlockQ8K as it is).
// ---------------------------------------------------------------------------

#if DSV4_KQ8_VNNI
// DecodeQ6's byte shuffles: in lane L, words 0–3 take scale byte 8i + L and
// words 4–7 byte 8i + 4 + L, each into the word's high byte (low byte 0).
struct Q6PairCtrl {
  alignas(64) int16_t v[2][32];
  constexpr Q6PairCtrl() : v{} {
    for (int i = 0; i < 2; ++i) {
      for (int lane = 0; lane < 4; ++lane) {
        for (int k = 0; k < 4; ++k) {
          v[i][8 * lane + k] = static_cast<int16_t>((8 * i + lane) << 8 | 0x80);
          v[i][8 * lane + 4 + k] = static_cast<int16_t>((8 * i + 4 + lane) << 8 | 0x80);
        }
      }
    }
  }
};
inline constexpr Q6PairCtrl kQ6PairCtrlTable{};
inline constexpr const int16_t (&kQ6PairCtrl)[2][32] = kQ6PairCtrlTable.v;
#endif

// q[i]: the codes 0…63 of values 64i … 64i + 63, in order. Per half h,
// qhx holds qh[32h…32h + 31] in its low 32 bytes and the same shifted right
// by 2 (as words) in its high 32, so that one shift serves both: bit pair 0
// (2 in the high bytes) moved to bits 4–5 for q[2h], bit pair 2 (6) already
// there for q[2h + 1]. Word shifts carry bits across bytes, but the pairs
// picked (bits k, k + 1 of a byte, k ≤ 6) are each byte's own.
DSV4_KQ8_TARGET inline void Q6Codes(const uint8_t* blk, __m512i q[4]) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), hi2 = _mm512_set1_epi8(0x30);
  const __m512i qh = _mm512_loadu_si512(blk + offsetof(BlockQ6_K, qh));  // qh[0…31], qh[32…63]
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(blk + offsetof(BlockQ6_K, ql) + 64 * h);
    // qh's half h in both halves (the immediate must be a constant).
    const __m512i qh2 =
        h == 0 ? _mm512_shuffle_i64x2(qh, qh, 0x44) : _mm512_shuffle_i64x2(qh, qh, 0xee);
    const __m512i qhx = _mm512_mask_srli_epi16(qh2, 0xffff0000u, qh2, 2);
    // lo | (hi & 0x30) (vpternlog: A | (B & C)).
    q[2 * h] =
        _mm512_ternarylogic_epi32(_mm512_and_si512(ql, low4), _mm512_slli_epi16(qhx, 4), hi2, 0xf8);
    q[2 * h + 1] =
        _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), qhx, hi2, 0xf8);
  }
}

struct Q6Block {
  __m512i q[4], sc[4];  // codes 0…63 of values 64i…64i + 63; their scales' words
  __m256i sc16;         // the 16 scales as words (for the −32 · Σ sc · bsums)
  float d;
};

DSV4_KQ8_TARGET inline Q6Block DecodeQ6(const uint8_t* blk) {
  const uint8_t* scales = blk + offsetof(BlockQ6_K, scales);
  Q6Block w;
  w.sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
#if DSV4_KQ8_VNNI
  // For Q6Dots' packed sums: in lane L, sub-blocks L | 4 + L (first vector)
  // and 8 + L | 12 + L (second); each scale byte into a word's high byte,
  // then shifted down arithmetically (sign-extended).
  const __m512i all =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
  for (int i = 0; i < 2; ++i) {
    w.sc[i] = _mm512_srai_epi16(_mm512_shuffle_epi8(all, _mm512_load_si512(kQ6PairCtrl[i])), 8);
  }
#else
  // Per 128-bit lane L, every word's high byte from byte L (its low byte 0):
  // shifted right arithmetically by 8, scale L sign-extended.
  const __m512i spread = _mm512_set_epi16(
      0x0380, 0x0380, 0x0380, 0x0380, 0x0380, 0x0380, 0x0380, 0x0380, 0x0280, 0x0280, 0x0280,
      0x0280, 0x0280, 0x0280, 0x0280, 0x0280, 0x0180, 0x0180, 0x0180, 0x0180, 0x0180, 0x0180,
      0x0180, 0x0180, 0x0080, 0x0080, 0x0080, 0x0080, 0x0080, 0x0080, 0x0080, 0x0080);
  for (int i = 0; i < 4; ++i) {
    int32_t four;  // scales 4i … 4i + 3
    std::memcpy(&four, scales + 4 * i, 4);
    w.sc[i] = _mm512_srai_epi16(_mm512_shuffle_epi8(_mm512_set1_epi32(four), spread), 8);
  }
#endif
  Q6Codes(blk, w.q);
  w.d = F16At(blk + offsetof(BlockQ6_K, d));
  return w;
}

DSV4_KQ8_TARGET inline __m512i Q6Dots(const Q6Block& w, const BlockQ8K& x) {
  __m512i a[4];
  for (int i = 0; i < 4; ++i) a[i] = _mm512_loadu_si512(x.qs + 64 * i);
  return BlockDots(w.q, w.sc, a);
}

// Σ sc·code·x8 lanes (s) and the Σ sc·bsums lanes (corr) of one block and token.
DSV4_KQ8_TARGET inline void Q6Products(const Q6Block& w, const BlockQ8K& x, __m512i* s,
                                       __m256i* corr) {
  *s = Q6Dots(w, x);
  *corr = _mm256_madd_epi16(w.sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)));
}

// ---------------------------------------------------------------------------
// Per format: one token's block products (Products, Combine: the float steps
// of ops/ref/kquant_ref.h) and a row's block decoded for the lanes
// (LaneDecode: LaneRows' row r).
// ---------------------------------------------------------------------------

// acc + Σ over groups of four of u8 bytes of u × s8 bytes of s, per int32
// lane (vpdpbusd; without VNNI through word pair sums, which cannot saturate
// here: |u·s + u·s| ≤ 2·255·32).
DSV4_KQ8_TARGET inline __m512i DotU8S8(__m512i acc, __m512i u, __m512i s) {
#if DSV4_KQ8_VNNI
  return _mm512_dpbusd_epi32(acc, u, s);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

// acc + the int32 sums of the two word products per lane.
DSV4_KQ8_TARGET inline __m512i DotI16(__m512i acc, __m512i a, __m512i b) {
#if DSV4_KQ8_VNNI
  return _mm512_dpwssd_epi32(acc, a, b);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

// The int8 dot-product roof: 12 independent DotU8S8 chains, register-only
// (Int8DotLoop).
DSV4_KQ8_TARGET float DotLoop(int64_t macs, int64_t* done) {
  __m512i u = _mm512_set1_epi8(1), s = _mm512_set1_epi8(1);
  __m512i c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm512_set1_epi32(i);
  const int64_t iters = std::max<int64_t>(1, macs / (12 * 64));
  for (int64_t it = 0; it < iters; ++it) {
    asm("" : "+v"(u), "+v"(s));  // not constants: no folding of the products
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) c[i] = DotU8S8(c[i], u, s);
  }
  *done = iters * 12 * 64;
  __m512i sum = c[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_epi32(sum, c[i]);
  return static_cast<float>(_mm512_reduce_add_epi32(sum));
}

// Σ_lanes sums[L] · scales[base + L / per] (per: quads per sub-block): the
// scaled code sums of 16 quads, added to t.
DSV4_KQ8_TARGET inline __m512i ScaledQuadSums(__m512i t, __m512i codes, __m512i scales, int base,
                                              int per) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i idx = _mm512_add_epi32(
      _mm512_set1_epi32(base), _mm512_srlv_epi32(lane, _mm512_set1_epi32(per == 4 ? 2 : 3)));
  const __m512i sums = DotU8S8(_mm512_setzero_si512(), _mm512_set1_epi8(1), codes);
  return _mm512_add_epi32(t, _mm512_mullo_epi32(sums, _mm512_permutexvar_epi32(idx, scales)));
}

template <DType kW>
struct Fmt;

template <>
struct Fmt<DType::kQ4_K> {
  using Block = Q4Block;
  using Acts = Q4Acts;
  static constexpr int64_t kBytes = sizeof(BlockQ4_K);
  static constexpr int kSubBlocks = 8;
  static constexpr bool kMins = true;
  static DSV4_KQ8_TARGET Block Decode(const uint8_t* p) { return DecodeQ4(p); }
  static DSV4_KQ8_TARGET void Products(const Block& w, const Acts& x, __m512i* s, __m256i* t) {
    Q4Products(w, x, s, t);
  }
  static float Scale(const Acts& x) { return x.d; }
  static float Min(const Block& w) { return w.dmin; }
  // acc after a block (weight scales d, dmin; activations' dx) given its two
  // integer sums.
  static float Combine(float acc, float d, float dmin, float dx, int32_t isum, int32_t imin) {
    acc = acc + (dx * d) * static_cast<float>(isum);
    return acc - (dx * dmin) * static_cast<float>(imin);
  }
  // Codes 0…15 in value order: a 64-byte load of qs[64p …] holds values
  // 128p … + 31 and 128p + 64 … + 95 in its low nibbles, the 32 after each
  // in its high ones.
  static DSV4_KQ8_TARGET void LaneDecode(const uint8_t* blk, LaneRows* w, int r) {
    const __m128i scm = Q4ScalesMins(blk);
    const __m256i sc = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(
        scm,
        _mm_set_epi8(-128, -128, -128, -128, -128, -128, -128, -128, 11, 10, 9, 8, 3, 2, 1, 0)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(w->sc[r]), sc);
    _mm_store_si128(reinterpret_cast<__m128i*>(w->m2[r]),
                    _mm_cvtepu8_epi16(
                        _mm_shuffle_epi8(scm, _mm_set_epi8(-128, -128, -128, -128, -128, -128, -128,
                                                           -128, 15, 14, 13, 12, 7, 6, 5, 4))));
    const __m512i sc16 = _mm512_zextsi256_si512(sc);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const uint8_t* qs = blk + offsetof(BlockQ4_K, qs);
    __m512i t = _mm512_setzero_si512();
    for (int p = 0; p < 2; ++p) {
      const __m512i v = _mm512_loadu_si512(qs + 64 * p);
      const __m512i lo = _mm512_and_si512(v, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      const __m512i c0 = _mm512_shuffle_i64x2(lo, hi, 0x44);  // values 128p … + 63
      const __m512i c1 = _mm512_shuffle_i64x2(lo, hi, 0xee);  // values 128p + 64 … + 127
      _mm512_store_si512(w->c[r] + 128 * p, c0);
      _mm512_store_si512(w->c[r] + 128 * p + 64, c1);
      t = ScaledQuadSums(t, c0, sc16, 4 * p, 8);
      t = ScaledQuadSums(t, c1, sc16, 4 * p + 2, 8);
    }
    w->wc[r] = 128 * _mm512_reduce_add_epi32(t);
    w->d[r] = F16At(blk + offsetof(BlockQ4_K, d));
    w->dmin[r] = F16At(blk + offsetof(BlockQ4_K, dmin));
  }
};

template <>
struct Fmt<DType::kQ6_K> {
  using Block = Q6Block;
  using Acts = BlockQ8K;
  static constexpr int64_t kBytes = sizeof(BlockQ6_K);
  static constexpr int kSubBlocks = 16;
  static constexpr bool kMins = false;
  static DSV4_KQ8_TARGET Block Decode(const uint8_t* p) { return DecodeQ6(p); }
  static DSV4_KQ8_TARGET void Products(const Block& w, const Acts& x, __m512i* s, __m256i* t) {
    Q6Products(w, x, s, t);
  }
  static float Scale(const Acts& x) { return x.d; }
  static float Min(const Block&) { return 0.0f; }
  static float Combine(float acc, float d, float /*dmin*/, float dx, int32_t isum, int32_t corr) {
    return acc + (dx * d) * static_cast<float>(isum - 32 * corr);
  }
  // Codes q − 32 (−32…31) in value order.
  static DSV4_KQ8_TARGET void LaneDecode(const uint8_t* blk, LaneRows* w, int r) {
    __m512i q[4];
    Q6Codes(blk, q);
    const __m512i sc = _mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + offsetof(BlockQ6_K, scales))));
    _mm512_store_si512(w->sc[r], sc);
    __m512i t = _mm512_setzero_si512();
    for (int i = 0; i < 4; ++i) {
      const __m512i c = _mm512_sub_epi8(q[i], _mm512_set1_epi8(32));
      _mm512_store_si512(w->c[r] + 64 * i, c);
      t = ScaledQuadSums(t, c, sc, 4 * i, 4);
    }
    w->wc[r] = 128 * _mm512_reduce_add_epi32(t);
    w->d[r] = F16At(blk + offsetof(BlockQ6_K, d));
    w->dmin[r] = 0.0f;
  }
};

// ---------------------------------------------------------------------------
// One token: four rows at a time (Q4RowsOneToken4, Q6RowsOneToken4), the
// last rows % 4 of a call a row at a time (RowOneToken); either way per block
// and row the float steps of ops/ref/kquant_ref.h in block order.
// ---------------------------------------------------------------------------

// The lines of [p, p + bytes) kFetchAheadBytes on, into L2 (past the weights
// they are only fetched, never read). The hardware prefetcher alone falls
// behind on rows of a few KiB, whose per-block scale reads then stall on every
// miss; 4–12 KiB ahead measured alike.
DSV4_KQ8_TARGET inline void FetchAhead(const uint8_t* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) {
    x86::PrefetchWeights(reinterpret_cast<const char*>(p + kFetchAheadBytes + o));
  }
}

// One row: per block its integer sums, then Combine.
template <DType kW>
DSV4_KQ8_TARGET float RowOneToken(const uint8_t* row, const typename Fmt<kW>::Acts* x,
                                  int64_t n_blocks) {
  using F = Fmt<kW>;
  const __m512i z = _mm512_setzero_si512();
  const __m256i z8 = _mm256_setzero_si256();
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row + b * F::kBytes;
    FetchAhead(blk, F::kBytes);
    const typename F::Block w = F::Decode(blk);
    __m512i s;
    __m256i t;
    F::Products(w, x[b], &s, &t);
    acc = F::Combine(acc, w.d, F::Min(w), F::Scale(x[b]), _mm_cvtsi128_si32(Sum4(s, z, z, z)),
                     _mm_cvtsi128_si32(x86::Sum4(t, z8, z8, z8)));
  }
  return acc;
}

// Block b of rows row0 + r · row_bytes (r < 4) into blk, each row's block
// fetched `ahead` bytes on: kFetchAheadBytes, or at least the next four rows'
// same block, since a shorter distance lands inside these four rows when they
// are long (q4_K rows of 5632 values); at 2048 values the next four rows
// alone would be too near.
template <int64_t kBytes>
DSV4_KQ8_TARGET inline void FourBlocks(const uint8_t* row0, int64_t row_bytes, int64_t b,
                                       const uint8_t* blk[4]) {
  const int64_t ahead = std::max(kFetchAheadBytes, 4 * row_bytes);
  for (int r = 0; r < 4; ++r) {
    blk[r] = row0 + r * row_bytes + b * kBytes;
    for (int64_t o = 0; o < kBytes; o += 64) x86::PrefetchWeights(blk[r] + ahead + o);
  }
}

// Four q4_K rows of one token at a time: their scales and mins decoded
// together (a row per 128-bit lane), each block's activations loaded once
// for the four, and the four rows' float steps in the lanes of one vector.
// Each lane takes the ref's steps in block order, as RowOneToken does: the
// same bits, with a third fewer instructions per row and block (the one-token
// product is bound by its vector instructions, not by memory).
// out[r] = row r (rows at row0 + r · row_bytes).
DSV4_KQ8_TARGET inline void Q4RowsOneToken4(const uint8_t* row0, int64_t row_bytes, const Q4Acts* x,
                                            int64_t n_blocks, float* out) {
  constexpr int64_t kBytes = sizeof(BlockQ4_K);
  const __m512i mins_shuffle = _mm512_broadcast_i32x4(Q4MinsShuffle());
  // d, dmin of four blocks (f16 words 0, 2, 4, 6 and 1, 3, 5, 7) as words 0–3, 4–7.
  const __m128i dd_order = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  __m128 acc = _mm_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk[4];
    FourBlocks<kBytes>(row0, row_bytes, b, blk);
    const Q4Acts& xb = x[b];
    __m512i a[4];
    for (int i = 0; i < 4; ++i) a[i] = _mm512_load_si512(xb.v[i]);
    const __m512i scm = Q4ScalesMins4(blk);
    // Row r's scales broadcast from lane r (the immediate must be a constant).
    const __m512i all[4] = {
        _mm512_shuffle_i32x4(scm, scm, 0x00), _mm512_shuffle_i32x4(scm, scm, 0x55),
        _mm512_shuffle_i32x4(scm, scm, 0xaa), _mm512_shuffle_i32x4(scm, scm, 0xff)};
    __m512i s[4];
    for (int r = 0; r < 4; ++r) {
      __m512i q[4], sc[4];
      Q4ScaleWords(all[r], sc);
      Q4Codes(blk[r], q);
      s[r] = BlockDots(q, sc, a);
    }
    const __m128i isum = Sum4(s[0], s[1], s[2], s[3]);
    // Per lane r: Σ m[j] · bsum32[j] in every dword.
    __m512i m = _mm512_madd_epi16(
        _mm512_shuffle_epi8(scm, mins_shuffle),
        _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(xb.bsum32))));
    m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, static_cast<_MM_PERM_ENUM>(0x4e)));
    m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, static_cast<_MM_PERM_ENUM>(0xb1)));
    const __m128i imin = _mm512_castsi512_si128(_mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), m));
    // The float steps: acc + (dx·d)·isum, then − (dx·dmin)·imin, per lane.
    uint32_t dd[4];  // d | dmin << 16 (they lead the block)
    for (int r = 0; r < 4; ++r) std::memcpy(&dd[r], blk[r] + offsetof(BlockQ4_K, d), 4);
    const __m256 w = _mm256_cvtph_ps(
        _mm_shuffle_epi8(_mm_setr_epi32(static_cast<int>(dd[0]), static_cast<int>(dd[1]),
                                        static_cast<int>(dd[2]), static_cast<int>(dd[3])),
                         dd_order));  // d0…d3, dmin0…dmin3
    const __m256 p = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(xb.d), w),
                                   _mm256_cvtepi32_ps(_mm256_set_m128i(imin, isum)));
    acc = _mm_add_ps(acc, _mm256_castps256_ps128(p));
    acc = _mm_sub_ps(acc, _mm256_extractf128_ps(p, 1));
  }
  _mm_storeu_ps(out, acc);
}

// Four q6_K rows of one token at a time, as Q4RowsOneToken4: the
// activations loaded once per block for the four rows, the −32 corrections'
// and the float steps of the four rows together, each lane the ref's steps in
// block order (the same bits as RowOneToken).
DSV4_KQ8_TARGET inline void Q6RowsOneToken4(const uint8_t* row0, int64_t row_bytes,
                                            const BlockQ8K* x, int64_t n_blocks, float* out) {
  constexpr int64_t kBytes = sizeof(BlockQ6_K);
  __m128 acc = _mm_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk[4];
    FourBlocks<kBytes>(row0, row_bytes, b, blk);
    const BlockQ8K& xb = x[b];
    __m512i a[4];
    for (int i = 0; i < 4; ++i) a[i] = _mm512_loadu_si512(xb.qs + 64 * i);
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums));
    __m512i s[4];
    __m256i corr[4];
    for (int r = 0; r < 4; ++r) {
      const Q6Block w = DecodeQ6(blk[r]);
      s[r] = BlockDots(w.q, w.sc, a);
      corr[r] = _mm256_madd_epi16(w.sc16, bsums);
    }
    const __m128i ints =
        _mm_sub_epi32(Sum4(s[0], s[1], s[2], s[3]),
                      _mm_slli_epi32(x86::Sum4(corr[0], corr[1], corr[2], corr[3]), 5));
    uint16_t h[4];
    for (int r = 0; r < 4; ++r) std::memcpy(&h[r], blk[r] + offsetof(BlockQ6_K, d), 2);
    const __m128 d = _mm_cvtph_ps(
        _mm_setr_epi16(static_cast<int16_t>(h[0]), static_cast<int16_t>(h[1]),
                       static_cast<int16_t>(h[2]), static_cast<int16_t>(h[3]), 0, 0, 0, 0));
    // acc + (dx·d)·(isum − 32·corr), per lane.
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(xb.d), d), _mm_cvtepi32_ps(ints)));
  }
  _mm_storeu_ps(out, acc);
}

// ---------------------------------------------------------------------------
// Several tokens: 8 rows × 16 tokens (LaneActs, LaneRows), the tokens in the
// lanes. Per sub-block and row, its quads' products with every token
// (DotU8S8 against four codes broadcast), then × the row's sub-block scale
// (int32, exact); per block, − wc (the + 128's share) and the float steps of
// ops/ref/kquant_ref.h per lane: each token's bits are the one-token path's.
// ---------------------------------------------------------------------------

DSV4_KQ8_TARGET inline __m512i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// acc[r] (lane j: token j) = row r of w against the tokens of x, blocks
// [0, n_blocks).
template <DType kW>
DSV4_KQ8_TARGET inline void LaneBlocks(const LaneRows* w, const LaneActs* x, int64_t n_blocks,
                                       __m512* acc) {
  using F = Fmt<kW>;
  constexpr int kQuads = 64 / F::kSubBlocks;  // per sub-block
  for (int r = 0; r < kLaneRows; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const LaneRows& W = w[b];
    const LaneActs& X = x[b];
    __m512i is[kLaneRows];
    for (int r = 0; r < kLaneRows; ++r) is[r] = _mm512_setzero_si512();
    for (int s = 0; s < F::kSubBlocks; ++s) {
      __m512i a[kLaneRows];
      for (int r = 0; r < kLaneRows; ++r) a[r] = _mm512_setzero_si512();
      for (int k = 0; k < kQuads; ++k) {
        const int q = s * kQuads + k;
        const __m512i v = _mm512_load_si512(X.x[q]);
        for (int r = 0; r < kLaneRows; ++r) a[r] = DotU8S8(a[r], v, Broadcast4(W.c[r] + 4 * q));
      }
      for (int r = 0; r < kLaneRows; ++r) {
        is[r] = _mm512_add_epi32(is[r], _mm512_mullo_epi32(a[r], _mm512_set1_epi32(W.sc[r][s])));
      }
    }
    const __m512 dx = _mm512_load_ps(X.d);
    for (int r = 0; r < kLaneRows; ++r) {
      const __m512i isum = _mm512_sub_epi32(is[r], _mm512_set1_epi32(W.wc[r]));
      acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(dx, _mm512_set1_ps(W.d[r])),
                                                   _mm512_cvtepi32_ps(isum)));
      if constexpr (F::kMins) {
        __m512i imin = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) {
          imin = DotI16(imin, _mm512_load_si512(X.bsum2[p]), _mm512_set1_epi32(W.m2[r][p]));
        }
        acc[r] = _mm512_sub_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(dx, _mm512_set1_ps(W.dmin[r])),
                                                     _mm512_cvtepi32_ps(imin)));
      }
    }
  }
}

// Rows [row_begin, row_end) against n_tokens ≥ kLaneMinTokens tokens. The
// tokens go in chunks whose lane activations stay in L2 (~384 KiB); per chunk
// each 8 rows are decoded once (LaneRows per block) and multiplied by every
// 16 tokens of it. The last 8 rows and 16 tokens may be partial: rows past
// the range are zeros, tokens past n_tokens zeros, neither stored.
template <DType kW>
DSV4_KQ8_TARGET void MatMulLanes(const MatMulArgs& a, const BlockQ8K* xq, int64_t n_blocks,
                                 int64_t row_bytes) {
  const uint8_t* base = static_cast<const uint8_t*>(a.w.data);
  const int64_t groups = (a.n_tokens + kLaneTokens - 1) / kLaneTokens;
  const int64_t chunk =
      std::clamp<int64_t>((int64_t{384} << 10) / (n_blocks * int64_t{sizeof(LaneActs)}), 1, groups);
  thread_local std::vector<LaneActs> acts;  // grow once; no allocation per token
  thread_local std::vector<LaneRows> rows;
  if (acts.size() < static_cast<size_t>(chunk * n_blocks)) acts.resize(chunk * n_blocks);
  if (rows.size() < static_cast<size_t>(n_blocks)) rows.resize(n_blocks);
  for (int64_t g0 = 0; g0 < groups; g0 += chunk) {
    const int64_t g1 = std::min(groups, g0 + chunk);
    for (int64_t g = g0; g < g1; ++g) {
      LaneLayout(xq, a.n_tokens, g * kLaneTokens, n_blocks, &acts[(g - g0) * n_blocks]);
    }
    for (int64_t n0 = a.row_begin; n0 < a.row_end; n0 += kLaneRows) {
      const int nr = static_cast<int>(std::min<int64_t>(kLaneRows, a.row_end - n0));
      for (int64_t b = 0; b < n_blocks; ++b) {
        for (int r = 0; r < nr; ++r) {
          Fmt<kW>::LaneDecode(base + (n0 + r) * row_bytes + b * Fmt<kW>::kBytes, &rows[b], r);
        }
        for (int r = nr; r < kLaneRows; ++r) ZeroLaneRow(&rows[b], r);
      }
      // The next 8 rows into L2 while these are multiplied.
      const int64_t next_rows = std::min<int64_t>(kLaneRows, a.row_end - n0 - kLaneRows);
      for (int64_t o = 0; o < next_rows * row_bytes; o += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(base + (n0 + kLaneRows) * row_bytes + o),
                     _MM_HINT_T1);
      }
      for (int64_t g = g0; g < g1; ++g) {
        __m512 acc[kLaneRows];
        LaneBlocks<kW>(rows.data(), &acts[(g - g0) * n_blocks], n_blocks, acc);
        const int64_t t0 = g * kLaneTokens;
        const int nt = static_cast<int>(std::min<int64_t>(kLaneTokens, a.n_tokens - t0));
        x86::StoreLaneTile<kLaneRows>(acc, nr, nt, a.out + t0 * a.out_stride + (n0 - a.row_begin),
                                      a.out_stride);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Calls.
// ---------------------------------------------------------------------------

template <DType kW>
DSV4_KQ8_TARGET void MatMulQ8K(const MatMulArgs& a, const BlockQ8K* xq) {
  using Acts = typename Fmt<kW>::Acts;
  const int64_t k_size = a.w.sizes[1], n_blocks = k_size / kQK_K;
  const int64_t row_bytes = DTypeBytes(a.w.dtype, a.w.strides[0]);
  if (a.n_tokens >= kLaneMinTokens) {
    MatMulLanes<kW>(a, xq, n_blocks, row_bytes);
    return;
  }
  const uint8_t* base = static_cast<const uint8_t*>(a.w.data);
  const Acts* x;
  if constexpr (kW == DType::kQ4_K) {
    thread_local std::vector<Q4Acts> lay;  // grows once; no allocation per token
    const auto need = static_cast<size_t>(a.n_tokens * n_blocks);
    if (lay.size() < need) lay.resize(need);
    for (size_t i = 0; i < need; ++i) Q4Layout(xq[i], &lay[i]);
    x = lay.data();
  } else {
    x = xq;
  }
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    int64_t n = a.row_begin;
    for (; n + 4 <= a.row_end; n += 4) {
      float* out = a.out + t * a.out_stride + (n - a.row_begin);
      if constexpr (kW == DType::kQ4_K) {
        Q4RowsOneToken4(base + n * row_bytes, row_bytes, x + t * n_blocks, n_blocks, out);
      } else {
        Q6RowsOneToken4(base + n * row_bytes, row_bytes, x + t * n_blocks, n_blocks, out);
      }
    }
    for (; n < a.row_end; ++n) {
      a.out[t * a.out_stride + (n - a.row_begin)] =
          RowOneToken<kW>(base + n * row_bytes, x + t * n_blocks, n_blocks);
    }
  }
}
