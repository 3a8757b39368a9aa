// Tests of tokenizer/spm_tokenizer.h: the stories260K vocabulary loaded from
// tok512.bin and from the GGUF file must encode exactly as llama2.c run.c
// (tests/data/stories260K/encode_cases.txt) and as Google's SentencePiece
// (tests/data/tokenizer/spm/spm_goldens.txt), and both loaders must agree.
// Also: decoding, round trips, the merge order on hand-made vocabularies, and
// one test per kind of bad input to each loader and to SpmTokenizer::Create.
#include "tokenizer/spm_tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gguf_vocab_reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

const std::string kTok512 = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/tok512.bin";
const std::string kGguf = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/stories260K.gguf";
const std::string kData = DSV4_TEST_DATA_DIR;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<int32_t> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  std::istringstream in(s);
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

std::unique_ptr<SpmTokenizer> Tok512() {
  Result<SpmVocab> vocab = ReadTok512(kTok512, 512);
  EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
  Result<std::unique_ptr<SpmTokenizer>> tok = SpmTokenizer::Create(std::move(vocab).value());
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return std::move(tok).value();
}

std::unique_ptr<SpmTokenizer> Gguf() {
  Result<GgufSpmMetadata> meta = testing::ReadGgufSpmMetadata(kGguf);
  EXPECT_TRUE(meta.ok()) << meta.status().ToString();
  Result<SpmVocab> vocab = SpmVocabFromGguf(std::move(meta).value());
  EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
  Result<std::unique_ptr<SpmTokenizer>> tok = SpmTokenizer::Create(std::move(vocab).value());
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return std::move(tok).value();
}

class Stories260KTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok512_ = Tok512().release();
    gguf_ = Gguf().release();
  }
  static void TearDownTestSuite() {
    delete tok512_;
    delete gguf_;
  }
  static SpmTokenizer* tok512_;
  static SpmTokenizer* gguf_;
};
SpmTokenizer* Stories260KTest::tok512_ = nullptr;
SpmTokenizer* Stories260KTest::gguf_ = nullptr;

// ---- loading ----------------------------------------------------------------

TEST_F(Stories260KTest, Tok512Vocabulary) {
  const SpmVocab& v = tok512_->vocab();
  ASSERT_EQ(tok512_->vocab_size(), 512);
  EXPECT_EQ(tok512_->bos_id(), 1);
  EXPECT_EQ(tok512_->eos_id(), 2);
  EXPECT_EQ(tok512_->unk_id(), 0);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_EQ(v.types[0], static_cast<int32_t>(SpmTokenType::kUnknown));
  EXPECT_EQ(v.types[1], static_cast<int32_t>(SpmTokenType::kControl));
  EXPECT_EQ(v.types[2], static_cast<int32_t>(SpmTokenType::kControl));
  for (int i = 3; i < 259; ++i)
    EXPECT_EQ(v.types[i], static_cast<int32_t>(SpmTokenType::kByte)) << i;
  for (int i = 259; i < 512; ++i)
    EXPECT_EQ(v.types[i], static_cast<int32_t>(SpmTokenType::kNormal)) << i;
  EXPECT_EQ(v.pieces[1], "\n<s>\n");
  EXPECT_EQ(v.pieces[3], "<0x00>");
  EXPECT_EQ(v.pieces[259], " t");
  EXPECT_EQ(v.scores[260], -1.0f);
  EXPECT_EQ(v.pieces[403], " Once");
}

TEST_F(Stories260KTest, GgufVocabularyMatchesTok512) {
  const SpmVocab& a = tok512_->vocab();
  const SpmVocab& b = gguf_->vocab();
  ASSERT_EQ(b.pieces.size(), 512u);
  EXPECT_EQ(b.bos, 1);
  EXPECT_EQ(b.eos, 2);
  EXPECT_EQ(b.unk, 0);
  EXPECT_EQ(b.pieces[1], "<s>");  // control pieces are spelled differently
  EXPECT_EQ(b.types, a.types);
  EXPECT_EQ(b.scores, a.scores);
  // '▁' became ' ': every other piece is identical.
  for (size_t i = 3; i < 512; ++i) EXPECT_EQ(b.pieces[i], a.pieces[i]) << i;
}

// ---- encoding ---------------------------------------------------------------

TEST_F(Stories260KTest, OnceUponATime) {
  const std::vector<int32_t> expected = {1, 403, 407, 261, 378};  // oracles/README.md, run.c
  EXPECT_EQ(tok512_->Encode("Once upon a time", true), expected);
  EXPECT_EQ(gguf_->Encode("Once upon a time", true), expected);
}

// Undoes the escaping of encode_cases.txt: \\ \n \t \xNN.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    if (c == 'n') {
      out.push_back('\n');
    } else if (c == 't') {
      out.push_back('\t');
    } else if (c == 'x' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

TEST_F(Stories260KTest, MatchesLlama2cRunC) {
  std::istringstream lines(ReadFile(kData + "/stories260K/encode_cases.txt"));
  int cases = 0, invalid_utf8 = 0;
  for (std::string line; std::getline(lines, line);) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::vector<int32_t> expected = ParseIds(line.substr(0, tab));
    const std::string prompt = Unescape(line.substr(tab + 1));
    EXPECT_EQ(tok512_->Encode(prompt, true), expected) << line;
    EXPECT_EQ(gguf_->Encode(prompt, true), expected) << line;
    ++cases;
    invalid_utf8 += utf8::IsValid(prompt) ? 0 : 1;
  }
  EXPECT_EQ(cases, 15);
  EXPECT_EQ(invalid_utf8, 1);  // the stray-bytes case
}

struct Golden {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Golden> LoadSentencePieceGoldens() {
  std::vector<Golden> goldens;
  std::istringstream lines(ReadFile(kData + "/tokenizer/spm/spm_goldens.txt"));
  for (std::string line; std::getline(lines, line);) {
    const size_t tab = line.find('\t');
    EXPECT_NE(tab, std::string::npos);
    Golden g;
    g.ids = ParseIds(line.substr(0, tab));
    const std::string hex = line.substr(tab + 1);
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
      g.text.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    goldens.push_back(std::move(g));
  }
  return goldens;
}

TEST_F(Stories260KTest, MatchesSentencePiece) {
  const std::vector<Golden> goldens = LoadSentencePieceGoldens();
  ASSERT_EQ(goldens.size(), 461u);
  for (const Golden& g : goldens) {
    EXPECT_EQ(tok512_->Encode(g.text, false), g.ids) << "tok512: \"" << g.text << "\"";
    EXPECT_EQ(gguf_->Encode(g.text, false), g.ids) << "gguf: \"" << g.text << "\"";
  }
}

TEST_F(Stories260KTest, Tok512AndGgufAgreeOnTinyStories) {
  const std::string sample = ReadFile(kData + "/text/tinystories_sample.txt");
  ASSERT_EQ(sample.size(), 3793u);
  std::vector<std::string> texts = {sample};
  size_t start = 0;
  for (size_t at; (at = sample.find("<|endoftext|>", start)) != std::string::npos;
       start = at + 13) {
    texts.push_back(sample.substr(start, at - start));
  }
  EXPECT_EQ(texts.size(), 6u);  // the whole file and five stories
  EXPECT_EQ(sample.substr(start), "\n");
  for (const std::string& t : texts) {
    const std::vector<int32_t> ids = tok512_->Encode(t, true);
    EXPECT_EQ(gguf_->Encode(t, true), ids);
    EXPECT_GT(ids.size(), 10u);
  }
}

TEST_F(Stories260KTest, EmptyString) {
  EXPECT_EQ(tok512_->Encode("", true), std::vector<int32_t>{1});
  EXPECT_EQ(tok512_->Encode("", false), std::vector<int32_t>{});
  EXPECT_EQ(DecodeTokens(*tok512_, std::vector<int32_t>{1}), "");
}

TEST_F(Stories260KTest, WhitespaceRuns) {
  const int32_t space = tok512_->PieceToId(" ");
  ASSERT_EQ(space, 410);
  // No piece holds two spaces: a run of n spaces is n+1 single spaces (prefix).
  EXPECT_EQ(tok512_->Encode("   ", false), std::vector<int32_t>(4, space));
  const std::vector<int32_t> ids = tok512_->Encode("a  b", true);
  EXPECT_EQ(ids,
            (std::vector<int32_t>{1, tok512_->PieceToId(" a"), space, tok512_->PieceToId(" b")}));
  EXPECT_EQ(DecodeTokens(*tok512_, ids), "a  b");
  // Newline and tab are not pieces: byte fallback, id = byte + 3.
  EXPECT_EQ(tok512_->Encode("\n\t", false), (std::vector<int32_t>{space, 0x0A + 3, 0x09 + 3}));
}

TEST_F(Stories260KTest, ByteFallbackForCharactersNotInVocab) {
  // U+4F60 (你) = E4 BD A0 is not a piece; ' ' is.
  EXPECT_EQ(tok512_->PieceToId("\xE4\xBD\xA0"), -1);
  EXPECT_EQ(tok512_->Encode("\xE4\xBD\xA0", false),
            (std::vector<int32_t>{410, 0xE4 + 3, 0xBD + 3, 0xA0 + 3}));
  // A 4-byte character: U+1F600.
  EXPECT_EQ(tok512_->Encode("\xF0\x9F\x98\x80", false),
            (std::vector<int32_t>{410, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3}));
  // é is a piece: no fallback.
  EXPECT_EQ(tok512_->Encode("\xC3\xA9", false),
            (std::vector<int32_t>{410, tok512_->PieceToId("\xC3\xA9")}));
  // NUL is an ordinary byte here (run.c would stop at it).
  const std::vector<int32_t> ids = tok512_->Encode(std::string("a\0b", 3), false);
  EXPECT_EQ(ids,
            (std::vector<int32_t>{tok512_->PieceToId(" a"), 0x00 + 3, tok512_->PieceToId("b")}));
}

TEST_F(Stories260KTest, PrefixSpaceDoesNotAbsorbContinuationBytes) {
  // run.c adds the dummy prefix as a token before grouping the text, so a
  // leading continuation byte is a group of its own (found by the fuzzer).
  const std::string text = "\x80\x61\x62\x63";
  const std::vector<int32_t> ids = tok512_->Encode(text, true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[1], 410);       // ' '
  EXPECT_EQ(ids[2], 0x80 + 3);  // <0x80>
  EXPECT_EQ(DecodeTokens(*tok512_, ids), utf8::Sanitize(text));
  // Inside the text, an ASCII byte does take a following continuation byte
  // into its group (run.c), which then falls back to bytes.
  EXPECT_EQ(tok512_->Encode("x\x80", false), (std::vector<int32_t>{410, 'x' + 3, 0x80 + 3}));
}

TEST_F(Stories260KTest, ControlAndBytePiecesAreNeverProducedFromText) {
  for (const std::string text : {"<s>", "</s>", "<unk>", "\n<s>\n", "<0x41>"}) {
    for (const SpmTokenizer* tok : {tok512_, gguf_}) {
      const std::vector<int32_t> ids = tok->Encode(text, false);
      for (const int32_t id : ids) {
        EXPECT_GT(id, 2) << text;         // not <unk>, BOS, EOS
        EXPECT_NE(id, 0x41 + 3) << text;  // not the byte token <0x41>
      }
      EXPECT_EQ(DecodeTokens(*tok, ids), " " + text);
    }
  }
}

TEST_F(Stories260KTest, LiteralMetaspaceIsAnOrdinaryCharacter) {
  // U+2581 is not a space here (it is in llama.cpp): byte fallback, exact round trip.
  const std::string text = "a\xE2\x96\x81\x62";
  const std::vector<int32_t> ids = gguf_->Encode(text, true);
  EXPECT_EQ(ids, tok512_->Encode(text, true));
  EXPECT_EQ(ids, (std::vector<int32_t>{1, gguf_->PieceToId(" a"), 0xE2 + 3, 0x96 + 3, 0x81 + 3,
                                       gguf_->PieceToId("b")}));
  EXPECT_EQ(DecodeTokens(*gguf_, ids), text);
}

// ---- decoding ---------------------------------------------------------------

TEST_F(Stories260KTest, DecodeSingleTokens) {
  EXPECT_EQ(tok512_->Decode(0), "");  // <unk>
  EXPECT_EQ(tok512_->Decode(1), "");  // BOS
  EXPECT_EQ(tok512_->Decode(2), "");  // EOS
  EXPECT_EQ(tok512_->Decode(3), std::string(1, '\0'));
  EXPECT_EQ(tok512_->Decode(0x41 + 3), "A");
  EXPECT_EQ(tok512_->Decode(0xE4 + 3), "\xE4");
  EXPECT_EQ(tok512_->Decode(403), " Once");
  EXPECT_EQ(gguf_->Decode(403), " Once");
  EXPECT_EQ(tok512_->Decode(-1), "");
  EXPECT_EQ(tok512_->Decode(512), "");
  EXPECT_EQ(tok512_->Decode(std::numeric_limits<int32_t>::max()), "");
}

TEST_F(Stories260KTest, LeadingSpaceIsStrippedOnlyAfterBos) {
  EXPECT_EQ(tok512_->DecodeNext(1, 403), "Once");
  EXPECT_EQ(tok512_->DecodeNext(-1, 403), " Once");
  EXPECT_EQ(tok512_->DecodeNext(2, 403), " Once");
  EXPECT_EQ(tok512_->DecodeNext(407, 403), " Once");
  // A byte token for ' ' keeps its space (run.c checks the piece "<0x20>").
  EXPECT_EQ(tok512_->DecodeNext(1, 0x20 + 3), " ");
  // The first generated token after a BOS-only prompt (run.c prints "Once ...").
  StreamDecoder decoder(*tok512_, /*prev_id=*/1);
  EXPECT_EQ(decoder.Push(403), "Once");
  EXPECT_EQ(decoder.Push(407), " upon");
}

TEST_F(Stories260KTest, RoundTripsEveryGolden) {
  for (const Golden& g : LoadSentencePieceGoldens()) {
    // With BOS the dummy prefix is stripped again; without it, it stays.
    EXPECT_EQ(DecodeTokens(*tok512_, tok512_->Encode(g.text, true)), g.text);
    std::string raw;
    for (const int32_t id : tok512_->Encode(g.text, false)) raw += tok512_->Decode(id);
    EXPECT_EQ(raw, g.text.empty() ? "" : " " + g.text);
  }
}

TEST_F(Stories260KTest, StreamDecoderOnMultiByteCharactersSplitOverByteTokens) {
  StreamDecoder decoder(*tok512_);
  const std::vector<int32_t> ids = tok512_->Encode("\xE4\xBD\xA0!", true);  // 你!
  ASSERT_EQ(ids,
            (std::vector<int32_t>{1, 410, 0xE4 + 3, 0xBD + 3, 0xA0 + 3, tok512_->PieceToId("!")}));
  EXPECT_EQ(decoder.Push(ids[0]), "");
  EXPECT_EQ(decoder.Push(ids[1]), "");  // the prefix space, dropped after BOS
  EXPECT_EQ(decoder.Push(ids[2]), "");
  EXPECT_EQ(decoder.pending_bytes(), 1u);
  EXPECT_EQ(decoder.Push(ids[3]), "");
  EXPECT_EQ(decoder.pending_bytes(), 2u);
  EXPECT_EQ(decoder.Push(ids[4]), "\xE4\xBD\xA0");
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  EXPECT_EQ(decoder.Push(ids[5]), "!");
  EXPECT_EQ(decoder.Flush(), "");
}

TEST_F(Stories260KTest, StreamDecoderReplacesBrokenSequences) {
  const int32_t kE4 = 0xE4 + 3, kBD = 0xBD + 3, k80 = 0x80 + 3;
  const int32_t a = tok512_->PieceToId("a");
  {
    // Truncated at the end: one U+FFFD at Flush, nothing before.
    StreamDecoder d(*tok512_);
    EXPECT_EQ(d.Push(kE4), "");
    EXPECT_EQ(d.Push(kBD), "");
    EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(d.Flush(), "");
  }
  {
    // Interrupted by an ASCII token: U+FFFD as soon as that is known.
    StreamDecoder d(*tok512_);
    EXPECT_EQ(d.Push(kE4), "");
    EXPECT_EQ(d.Push(a), "\xEF\xBF\xBD\x61");
  }
  {
    // A lone continuation byte is replaced at once.
    StreamDecoder d(*tok512_);
    EXPECT_EQ(d.Push(k80), "\xEF\xBF\xBD");
    EXPECT_EQ(d.pending_bytes(), 0u);
  }
  // The stray-bytes run.c case decodes to its sanitized text.
  const std::string text = "stray bytes \xff\xfe and a lone continuation \x80 end";
  EXPECT_EQ(DecodeTokens(*tok512_, tok512_->Encode(text, true)), utf8::Sanitize(text));
}

TEST_F(Stories260KTest, LongTextEncodesAndRoundTrips) {
  // ~1 MB: the quadratic rescan of run.c would take minutes here.
  const std::string sample = ReadFile(kData + "/text/tinystories_sample.txt");
  std::string book;
  while (book.size() < (1u << 20)) book += sample;
  const std::vector<int32_t> ids = tok512_->Encode(book, true);
  EXPECT_GT(ids.size(), book.size() / 8);
  EXPECT_LT(ids.size(), book.size() / 2);
  EXPECT_EQ(DecodeTokens(*tok512_, ids), book);
  // One long run of one character merges pairwise with no quadratic blow-up either.
  const std::string run(200000, 'a');
  EXPECT_EQ(DecodeTokens(*tok512_, tok512_->Encode(run, true)), run);
}

// ---- merge order on hand-made vocabularies ------------------------------------

// <unk>, <s>, </s>, then `pieces` (normal) with `scores`; no byte tokens.
std::unique_ptr<SpmTokenizer> MakeTokenizer(const std::vector<std::string>& pieces,
                                            const std::vector<float>& scores,
                                            bool add_space_prefix = true,
                                            const std::vector<int32_t>& types = {}) {
  SpmVocab v;
  v.pieces = {"<unk>", "<s>", "</s>"};
  v.scores = {0, 0, 0};
  v.types = {2, 3, 3};
  for (size_t i = 0; i < pieces.size(); ++i) {
    v.pieces.push_back(pieces[i]);
    v.scores.push_back(scores[i]);
    v.types.push_back(types.empty() ? 1 : types[i]);
  }
  v.add_space_prefix = add_space_prefix;
  auto tok = SpmTokenizer::Create(std::move(v));
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return std::move(tok).value();
}

TEST(SpmMergeOrderTest, EqualScoresMergeTheLeftmostPairFirst) {
  //                  3    4    5    6     7
  auto tok = MakeTokenizer({"a", "b", " ", "ab", "ba"}, {-1, -1, -1, -5, -5}, false);
  EXPECT_EQ(tok->Encode("aba", false), (std::vector<int32_t>{6, 3}));
  EXPECT_EQ(tok->Encode("bab", false), (std::vector<int32_t>{7, 4}));
}

TEST(SpmMergeOrderTest, HigherScoreWinsWhereverItIs) {
  auto tok = MakeTokenizer({"a", "b", " ", "ab", "ba"}, {-1, -1, -1, -5, -4}, false);
  EXPECT_EQ(tok->Encode("aba", false), (std::vector<int32_t>{3, 7}));
}

TEST(SpmMergeOrderTest, MergedTokensMergeAgain) {
  // bc (-1) before ab (-2); then a + bc = abc.
  auto tok = MakeTokenizer({"a", "b", "c", "ab", "bc", "abc"}, {0, 0, 0, -2, -1, -3}, false);
  EXPECT_EQ(tok->Encode("abc", false), (std::vector<int32_t>{8}));
  // Without "abc" the result is a, bc.
  auto tok2 = MakeTokenizer({"a", "b", "c", "ab", "bc"}, {0, 0, 0, -2, -1}, false);
  EXPECT_EQ(tok2->Encode("abc", false), (std::vector<int32_t>{3, 7}));
}

TEST(SpmMergeOrderTest, SpacePrefixIsOptional) {
  auto with = MakeTokenizer({"a", " ", " a"}, {0, 0, -1}, true);
  EXPECT_EQ(with->Encode("a", false), (std::vector<int32_t>{5}));
  EXPECT_EQ(with->DecodeNext(1, 5), "a");
  auto without = MakeTokenizer({"a", " ", " a"}, {0, 0, -1}, false);
  EXPECT_EQ(without->Encode("a", false), (std::vector<int32_t>{3}));
  EXPECT_EQ(without->DecodeNext(1, 5), " a");  // nothing to strip without the prefix
}

TEST(SpmMergeOrderTest, ControlAndUnusedTypes) {
  // "ab" as a control piece is never produced; as unused it is (llama.cpp).
  auto control = MakeTokenizer({"a", "b", "ab"}, {0, 0, 0}, false, {1, 1, 3});
  EXPECT_EQ(control->Encode("ab", false), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(control->Decode(5), "");
  auto unused = MakeTokenizer({"a", "b", "ab"}, {0, 0, 0}, false, {1, 1, 5});
  EXPECT_EQ(unused->Encode("ab", false), (std::vector<int32_t>{5}));
}

TEST(SpmMergeOrderTest, WithoutByteTokensUnknownCharactersBecomeOneUnk) {
  auto tok = MakeTokenizer({"a"}, {0}, false);
  EXPECT_EQ(tok->Encode("a\xC3\xA9\x61", false), (std::vector<int32_t>{3, 0, 3}));
}

// ---- bad vocabularies ---------------------------------------------------------

SpmVocab ValidVocab() {
  SpmVocab v;
  v.pieces = {"<unk>", "<s>", "</s>", "a"};
  v.scores = {0, 0, 0, 0};
  v.types = {2, 3, 3, 1};
  return v;
}

void ExpectCreateFails(SpmVocab v, StatusCode code, const std::string& needle) {
  Result<std::unique_ptr<SpmTokenizer>> tok = SpmTokenizer::Create(std::move(v));
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), code);
  EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status().ToString();
}

TEST(SpmCreateTest, ValidVocabularyIsAccepted) {
  EXPECT_TRUE(SpmTokenizer::Create(ValidVocab()).ok());
}

TEST(SpmCreateTest, RejectsEmptyVocabulary) {
  ExpectCreateFails(SpmVocab{}, StatusCode::kInvalidArgument, "empty");
}

TEST(SpmCreateTest, RejectsArraysOfDifferentLengths) {
  SpmVocab v = ValidVocab();
  v.scores.pop_back();
  ExpectCreateFails(std::move(v), StatusCode::kInvalidArgument, "3 scores");
}

TEST(SpmCreateTest, RejectsSpecialIdOutOfRange) {
  SpmVocab v = ValidVocab();
  v.eos = 4;
  ExpectCreateFails(std::move(v), StatusCode::kInvalidArgument, "EOS id 4");
}

TEST(SpmCreateTest, RejectsUnknownType) {
  SpmVocab v = ValidVocab();
  v.types[3] = 7;
  ExpectCreateFails(std::move(v), StatusCode::kInvalidArgument, "token 3 (\"a\") has type 7");
}

TEST(SpmCreateTest, RejectsNanScore) {
  SpmVocab v = ValidVocab();
  v.scores[3] = std::nanf("");
  ExpectCreateFails(std::move(v), StatusCode::kInvalidArgument, "NaN");
}

TEST(SpmCreateTest, RejectsMalformedBytePiece) {
  SpmVocab v = ValidVocab();
  v.types[3] = 6;  // "a" is not <0xXX>
  ExpectCreateFails(std::move(v), StatusCode::kInvalidArgument, "byte token 3");
}

TEST(SpmCreateTest, RejectsNoUnknownTokenWithoutAllBytes) {
  SpmVocab v = ValidVocab();
  v.unk = -1;
  ExpectCreateFails(std::move(v), StatusCode::kInvalidArgument, "unknown token");
}

// ---- bad tok512 files -----------------------------------------------------------

struct Tok512Entry {
  float score;
  std::string piece;
};

std::vector<uint8_t> MakeTok512(const std::vector<Tok512Entry>& entries) {
  std::string out;
  const auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const int32_t max_len = 8;
  put(&max_len, 4);
  for (const Tok512Entry& e : entries) {
    const auto len = static_cast<int32_t>(e.piece.size());
    put(&e.score, 4);
    put(&len, 4);
    put(e.piece.data(), e.piece.size());
  }
  return std::vector<uint8_t>(out.begin(), out.end());
}

const std::vector<Tok512Entry> kSmall = {
    {0, "<unk>"}, {0, "\n<s>\n"}, {0, "\n</s>\n"}, {0, "<0x41>"}, {-1, "a"}};

void ExpectParseFails(const std::vector<uint8_t>& bytes, int32_t vocab_size, StatusCode code,
                      const std::string& needle) {
  Result<SpmVocab> v = ParseTok512(bytes, vocab_size, "test.bin");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), code);
  EXPECT_NE(v.status().message().find("test.bin"), std::string::npos) << v.status().ToString();
  EXPECT_NE(v.status().message().find(needle), std::string::npos) << v.status().ToString();
  EXPECT_FALSE(v.status().hint().empty());
}

TEST(Tok512ParseTest, SmallFileParses) {
  Result<SpmVocab> v = ParseTok512(MakeTok512(kSmall), 5, "test.bin");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->pieces[4], "a");
  EXPECT_EQ(v->scores[4], -1.0f);
  EXPECT_EQ(v->types, (std::vector<int32_t>{2, 3, 3, 6, 1}));
  Result<SpmVocab> all = ParseTok512(MakeTok512(kSmall), -1, "test.bin");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->pieces, v->pieces);
}

TEST(Tok512ParseTest, ReadAllTokensOfTok512) {
  Result<SpmVocab> a = ReadTok512(kTok512, -1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->pieces.size(), 512u);
}

TEST(Tok512ParseTest, MissingFile) {
  Result<SpmVocab> v = ReadTok512(kTok512 + ".missing", 512);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("tok512.bin.missing"), std::string::npos);
}

TEST(Tok512ParseTest, VocabSizeTooSmall) {
  ExpectParseFails(MakeTok512(kSmall), 2, StatusCode::kInvalidArgument, "vocab_size 2");
}

TEST(Tok512ParseTest, HeaderTruncated) {
  ExpectParseFails({7, 0}, 5, StatusCode::kDataLoss, "2 bytes");
}

TEST(Tok512ParseTest, ScoreAndLengthTruncated) {
  std::vector<uint8_t> bytes = MakeTok512(kSmall);
  bytes.resize(4 + 5);  // header + 5 of the first token's 8 bytes
  ExpectParseFails(bytes, 5, StatusCode::kDataLoss, "token 0");
}

TEST(Tok512ParseTest, NegativeLength) {
  std::vector<uint8_t> bytes = MakeTok512(kSmall);
  const int32_t negative = -5;
  std::memcpy(bytes.data() + 4 + 4, &negative, 4);
  ExpectParseFails(bytes, 5, StatusCode::kDataLoss, "negative length -5");
}

TEST(Tok512ParseTest, LengthPastEndOfFile) {
  std::vector<uint8_t> bytes = MakeTok512(kSmall);
  const int32_t huge = 1 << 30;
  std::memcpy(bytes.data() + 4 + 4, &huge, 4);
  ExpectParseFails(bytes, 5, StatusCode::kDataLoss, "runs past the end");
}

TEST(Tok512ParseTest, FewerTokensThanVocabSize) {
  ExpectParseFails(MakeTok512(kSmall), 6, StatusCode::kDataLoss, "token 5");
}

TEST(Tok512ParseTest, BytesLeftOverAfterVocabSize) {
  ExpectParseFails(MakeTok512(kSmall), 4, StatusCode::kDataLoss, "left over");
}

TEST(Tok512ParseTest, FewerThanThreeTokens) {
  ExpectParseFails(MakeTok512({{0, "<unk>"}, {0, "<s>"}}), -1, StatusCode::kDataLoss,
                   "only 2 tokens");
}

// ---- GGUF metadata ------------------------------------------------------------

GgufSpmMetadata SmallGguf() {
  GgufSpmMetadata m;
  m.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81\x61\xE2\x96\x81\xE2\x96\x81", "b"};
  m.scores = {0, 0, 0, -1, -2};
  m.types = {2, 3, 3, 1, 1};
  return m;
}

TEST(SpmVocabFromGgufTest, ConvertsMetaspaceAndDefaults) {
  GgufSpmMetadata m = SmallGguf();
  m.scores.clear();
  m.types.clear();
  m.unk = 0xFFFFFFFFll;
  m.add_space_prefix = false;
  Result<SpmVocab> v = SpmVocabFromGguf(std::move(m));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->pieces[3], " a  ");
  EXPECT_EQ(v->scores, std::vector<float>(5, 0.0f));
  EXPECT_EQ(v->types, std::vector<int32_t>(5, 1));
  EXPECT_EQ(v->unk, -1);
  EXPECT_EQ(v->bos, 1);
  EXPECT_FALSE(v->add_space_prefix);
}

void ExpectGgufFails(GgufSpmMetadata m, const std::string& needle) {
  Result<SpmVocab> v = SpmVocabFromGguf(std::move(m));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find(needle), std::string::npos) << v.status().ToString();
}

TEST(SpmVocabFromGgufTest, RejectsEmptyTokens) {
  ExpectGgufFails({}, "tokenizer.ggml.tokens is empty");
}

TEST(SpmVocabFromGgufTest, RejectsScoresOfWrongLength) {
  GgufSpmMetadata m = SmallGguf();
  m.scores.push_back(0);
  ExpectGgufFails(std::move(m), "tokenizer.ggml.scores has 6");
}

TEST(SpmVocabFromGgufTest, RejectsTypesOfWrongLength) {
  GgufSpmMetadata m = SmallGguf();
  m.types.pop_back();
  ExpectGgufFails(std::move(m), "tokenizer.ggml.token_type has 4");
}

TEST(SpmVocabFromGgufTest, RejectsIdOutOfRange) {
  GgufSpmMetadata m = SmallGguf();
  m.bos = 5;
  ExpectGgufFails(std::move(m), "tokenizer.ggml.bos_token_id = 5");
}

}  // namespace
}  // namespace dsv4
