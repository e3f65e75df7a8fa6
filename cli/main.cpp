// `cohort`: the command-line front end, written against the public C header only (it proves the
// ABI suffices to train on real data). Every failure is one "error: ..." line on stderr and exit
// code 2 (usage) or 1 (runtime); nothing escapes as an exception.
#include <cohort/cohort.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "cli/options.h"
#include "cli/train.h"

namespace {

void print_usage(FILE* f) {
  std::fprintf(f, "%s", cohort_cli::usage_text());
  std::fprintf(f, "       cohort --version | --help\n");
  std::fprintf(f, "%s", cohort_cli::usage_notes());
}

int dispatch(int argc, char** argv) {
  if (argc < 2) throw cohort_cli::UsageError("missing command (try 'cohort train --help')");
  const char* cmd = argv[1];
  if (!std::strcmp(cmd, "--help") || !std::strcmp(cmd, "-h") || !std::strcmp(cmd, "help")) {
    print_usage(stdout);
    return 0;
  }
  if (!std::strcmp(cmd, "--version")) {
    std::printf("cohort %s (ABI %d)\n", cohort_version_string(), cohort_abi_version());
    return 0;
  }
  if (std::strcmp(cmd, "train") != 0) throw cohort_cli::UsageError(std::string("unknown command '") + cmd + "'");
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      print_usage(stdout);
      return 0;
    }
  }
  return cohort_cli::run_train(cohort_cli::parse_train_options(argc, argv, 2));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const cohort_cli::UsageError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
