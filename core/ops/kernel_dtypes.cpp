// kernel_dtype_mismatch: a device kernel's declared dtypes (kernel_dtypes.h) against a call's.
#include "core/ops/kernel_dtypes.h"

#include <algorithm>

#include "core/base/error.h"

namespace cohort {

namespace {

struct Side {
  std::string letters;  // one per slot; the last repeats when `variadic`
  bool variadic = false;
};

// The call's T and A types, fixed by the first slot of each letter.
struct Bound {
  DType type[2] = {DType::kF32, DType::kF32};
  std::string first[2];  // "input 0", ...: the slot that fixed it ("" while unfixed)
};

std::string check_slot(char letter, DType d, const std::string& slot, Bound& b) {
  switch (letter) {
    case 'F':
      return d == DType::kF32 ? "" : str_cat(slot, " has dtype ", dtype_name(d), ", expected f32");
    case 'I':
      return d == DType::kI32 ? "" : str_cat(slot, " has dtype ", dtype_name(d), ", expected i32");
    case 'T':
      if (d != DType::kF32 && d != DType::kBF16)
        return str_cat(slot, " has dtype ", dtype_name(d), ", expected f32 or bf16");
      [[fallthrough]];
    case 'A': {
      const int k = letter == 'T' ? 0 : 1;
      if (b.first[k].empty()) {
        b.type[k] = d;
        b.first[k] = slot;
        return "";
      }
      return d == b.type[k] ? ""
                            : str_cat(slot, " has dtype ", dtype_name(d), ", expected ", dtype_name(b.type[k]),
                                      " like ", b.first[k]);
    }
  }
  return str_cat("unknown letter '", std::string(1, letter), "'");
}

bool parse_side(const std::string& text, Side& side) {
  side.letters = text;
  if (!text.empty() && text.back() == '*') {
    side.variadic = true;
    side.letters.pop_back();
    if (side.letters.empty()) return false;  // '*' repeats a letter
  }
  return side.letters.find('*') == std::string::npos;
}

std::string check_side(const Side& side, const std::vector<DType>& types, const char* what, bool all_required,
                       Bound& b) {
  const size_t fixed = side.letters.size() - (side.variadic ? 1 : 0);
  if (!side.variadic && types.size() > fixed)
    return str_cat(types.size(), " ", what, "s, the kernel takes ", all_required ? "" : "at most ", fixed);
  if (all_required && types.size() < fixed)
    return str_cat(types.size(), " ", what, "s, the kernel takes ", side.variadic ? "at least " : "", fixed);
  for (size_t i = 0; i < types.size(); ++i) {
    const char letter = side.letters[std::min(i, side.letters.size() - 1)];
    std::string why = check_slot(letter, types[i], str_cat(what, " ", i), b);
    if (!why.empty()) return why;
  }
  return "";
}

}  // namespace

std::string kernel_dtype_mismatch(const std::string& signature, const std::vector<DType>& inputs,
                                  const std::vector<DType>& outputs) {
  const size_t arrow = signature.find('>');
  Side in, out;
  if (arrow == std::string::npos || signature.find('>', arrow + 1) != std::string::npos ||
      !parse_side(signature.substr(0, arrow), in) || !parse_side(signature.substr(arrow + 1), out) ||
      out.letters.empty())
    return str_cat("signature '", signature, "' is malformed (expected letters '>' letters, '*' last on a side)");
  for (const std::string* letters : {&in.letters, &out.letters})
    for (char c : *letters)
      if (c != 'T' && c != 'F' && c != 'I' && c != 'A')
        return str_cat("signature '", signature, "': unknown letter '", std::string(1, c), "'");
  Bound b;
  std::string why = check_side(in, inputs, "input", false, b);
  if (why.empty()) why = check_side(out, outputs, "output", true, b);
  return why;
}

}  // namespace cohort
